"""Export: the whole run as one page that needs no kernel, and every diagram as PNG and SVG at
one step or a range of steps.

Headless and offline; needs no vLLM (the diagrams read a trace). The page is the notebook's
player and diagrams with the trace embedded (page.py): one HTML file, no network, opens from
file://. The images are that page drawn by the system Chromium (BROWSER_PATH, default
/usr/bin/chromium, driven by Playwright; none is ever downloaded): a PNG of each diagram's box
and an SVG of it (the drawing's own SVG, the text parts as XHTML inside a foreignObject).

    da-lab export TRACE --html FILE            the page: all four diagrams and the player
    da-lab export TRACE --out DIR              DIR/1_skeleton.{png,svg}, 2_blocks.*,
                                               3_metadata_path.*, 4_da_hook.*, blocks_read.*
                                               (the last step)
    da-lab export TRACE --out DIR --step N     the same, at engine step N
    da-lab export TRACE --out DIR --steps A:B  DIR/step_A/*.{png,svg} ... DIR/step_B/*
                                               (A, B inclusive; either may be left out)
    --animate (with --out)                     also DIR/run.html: the page, as --html writes it
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_BROWSER = "/usr/bin/chromium"
FORMATS = ("png", "svg")
NAMES = ("1_skeleton", "2_blocks", "3_metadata_path", "4_da_hook", "blocks_read")
_SELECTORS = dict(zip(NAMES, ['[data-da-diagram="1"]', '[data-da-diagram="2"]',
                              '[data-da-diagram="3"]', '[data-da-diagram="4"]',
                              '[data-da-diagram="4"] [data-da-part="chart"]'], strict=True))
WIDTH = 1366          # the page's width when drawn for images (the lab's smallest screen)


def browser_path() -> str:
    """The Chromium export drives: $BROWSER_PATH, else the system Chromium (set into
    BROWSER_PATH so kaleido's and Playwright's lookups agree). Never downloads one."""
    if not os.environ.get("BROWSER_PATH"):
        os.environ["BROWSER_PATH"] = DEFAULT_BROWSER
    path = os.environ["BROWSER_PATH"]
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        found = shutil.which(path)
        if not found:
            raise RuntimeError(
                f"no Chromium at BROWSER_PATH={path!r}: export drives a system Chromium-based "
                "browser (Debian: apt-get install chromium); set BROWSER_PATH to its "
                "executable. (da_lab never downloads one.)")
        path = found
    return path


def run_page(trace_path: str | Path, *, eager: bool = False, still: bool = False) -> str:
    """The page of a trace: the player and all four diagrams, the trace embedded. `still`: a
    page drawn for images (nothing on it can be hovered, so no hint says to)."""
    from da_lab_widgets import (
        BlocksDiagram,
        DAHookDiagram,
        Highlight,
        MetadataPathDiagram,
        Player,
        SkeletonDiagram,
        TraceSource,
    )

    from .page import page_html

    src = TraceSource(trace_path)
    if not src.records:
        raise ValueError("the trace has no step records to draw")
    hl, h = Highlight(), src.header
    player = Player(src, [SkeletonDiagram(h, hl), BlocksDiagram(h, hl), MetadataPathDiagram(h, hl),
                          DAHookDiagram(h, hl)])
    prov = h.get("provenance") or {}
    steps = [r.step for r in src.records]
    config = {**player.config(kernel=False), "eager": eager, "still": still}
    return page_html(config, player.encoder.packet(), title=f"da_lab · {Path(trace_path).name}",
                     subtitle=f"{prov.get('vllm', '?')} on {prov.get('device', '?')}, model "
                              f"{prov.get('model_name') or prov.get('model', '?')}: steps "
                              f"{steps[0]}–{steps[-1]}, every value from the trace")


def step_indices(records: list, step: int | None = None, steps: str | None = None) -> list[int]:
    """Record indices for `--step N` (one engine step) or `--steps A:B` (A to B inclusive,
    either end may be left out); default: the last record. A step the trace lacks is a
    ValueError naming the steps it has."""
    if not records:
        raise ValueError("the trace has no step records to draw")
    have = [r.step for r in records]
    span = f"steps {have[0]}–{have[-1]}"
    if step is not None:
        if step not in have:
            raise ValueError(f"--step {step}: the trace has no such step ({span})")
        return [have.index(step)]
    if steps is None:
        return [len(records) - 1]
    a, sep, b = steps.partition(":")
    try:
        lo = int(a) if a.strip() else have[0]
        hi = int(b) if b.strip() else have[-1]
    except ValueError:
        raise ValueError(f"--steps {steps!r}: expected A:B with whole numbers, e.g. 3:12") from None
    if not sep or lo > hi:
        raise ValueError(f"--steps {steps!r}: expected A:B with A <= B, e.g. 3:12")
    picked = [k for k, s in enumerate(have) if lo <= s <= hi]
    if not picked:
        raise ValueError(f"--steps {steps}: no step of the trace is in that range ({span})")
    return picked


# The diagram's box as an SVG document: its drawings stay vector, its text parts are XHTML in a
# foreignObject, with the page's stylesheet inside.
_SVG_OF = """([sel, css]) => {
  const el = document.querySelector(sel), r = el.getBoundingClientRect();
  const body = new XMLSerializer().serializeToString(el);
  const esc = (t) => t.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${Math.ceil(r.width)}" ` +
    `height="${Math.ceil(r.height)}"><foreignObject width="100%" height="100%">` +
    `<div xmlns="http://www.w3.org/1999/xhtml" class="da-player"><style>${esc(css)}</style>` +
    `${body}</div></foreignObject></svg>`;
}"""


def render_images(page_path: Path, folders: list[tuple[int, Path]]) -> list[Path]:
    """PNG and SVG of every diagram for each (record index, folder), in one browser."""
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise RuntimeError("image export needs Playwright (pip install playwright; the lab's "
                           "requirements/cpu.lock has it)") from None
    try:
        return _render(sync_playwright, page_path, folders)
    except PlaywrightError as e:
        raise RuntimeError(f"Chromium could not draw the page: {str(e).splitlines()[0]}") from None


def _render(sync_playwright, page_path: Path, folders: list[tuple[int, Path]]) -> list[Path]:
    from .bundle import css

    written: list[Path] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path(),
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.route("**/*", lambda r: r.abort() if r.request.url.startswith(("http:", "https:"))
                       else r.continue_())
            page.goto(page_path.resolve().as_uri())
            page.wait_for_function("window.daLab !== undefined", timeout=60_000)
            for i, out in folders:
                out.mkdir(parents=True, exist_ok=True)
                page.evaluate("(i) => daLab.goto(i)", i)
                page.wait_for_function("(i) => daLab.root.dataset.daStep == i", arg=i)
                for name, sel in _SELECTORS.items():
                    png = out / f"{name}.png"
                    page.locator(sel).first.screenshot(path=str(png))
                    svg = out / f"{name}.svg"
                    svg.write_text(page.evaluate(_SVG_OF, [sel, css()]))
                    written += [png, svg]
        finally:
            browser.close()
    return written


def export_trace(trace_path: str | Path, out_dir: str | Path | None = None, *,
                 step: int | None = None, steps: str | None = None, animate: bool = False,
                 html: str | Path | None = None) -> list[Path]:
    """The page (`html`), and/or PNG + SVG of every diagram into out_dir (at the last step, or
    at `step`; per step of `steps` into out_dir/step_<N>/); `animate`: also out_dir/run.html.
    Returns the paths written."""
    from da_lab.trace import load

    written: list[Path] = []
    if html is not None:
        p = Path(html)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(run_page(trace_path))
        written.append(p)
    if out_dir is None:
        return written
    tr = load(trace_path)
    indices = step_indices(tr.records, step, steps)
    out = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="da-export-") as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(run_page(trace_path, eager=True, still=True))
        folders = [(i, out if steps is None else out / f"step_{tr.records[i].step:04d}")
                   for i in indices]
        written += render_images(page, folders)
    if animate:
        run = out / "run.html"
        run.write_text(run_page(trace_path))
        written.append(run)
    return written


def main_export(argv: list[str] | None = None) -> int:
    """`da-lab export TRACE [--html FILE] [--out DIR [--step N | --steps A:B] [--animate]]`:
    argv is what follows `export`."""
    import sys

    from da_lab.trace import TraceError

    ap = argparse.ArgumentParser(prog="da-lab export",
                                 description="write a trace as one page that plays it (--html) "
                                             "and/or every diagram as PNG and SVG (--out); "
                                             "needs no vLLM")
    ap.add_argument("trace", help="a recorded trace (.jsonl.gz or .parquet)")
    ap.add_argument("--html", metavar="FILE", help="one self-contained page: the player and "
                    "all four diagrams, the trace embedded; opens offline")
    ap.add_argument("--out", help="folder for PNG + SVG of each diagram (created if missing)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, metavar="N", help="the diagrams at engine step N")
    which.add_argument("--steps", metavar="A:B",
                       help="PNG and SVG of every step from A to B (inclusive; 5: or :12 "
                            "leave an end open), one folder per step")
    ap.add_argument("--animate", action="store_true",
                    help="with --out: also OUT/run.html, the page --html writes")
    args = ap.parse_args(argv)
    if args.html is None and args.out is None:
        ap.error("give --html FILE (the page) and/or --out DIR (PNG + SVG)")
    if args.out is None and (args.step is not None or args.steps or args.animate):
        ap.error("--step, --steps and --animate go with --out DIR")
    try:
        paths = export_trace(args.trace, args.out, step=args.step, steps=args.steps,
                             animate=args.animate, html=args.html)
    except (TraceError, RuntimeError, ValueError) as e:
        print(f"da-lab export: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main_export())
