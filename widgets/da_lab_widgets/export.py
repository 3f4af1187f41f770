"""Export: every diagram of a recorded run as PNG, SVG and standalone HTML, at one step or a
range of steps, and the whole run as one animated HTML page.

Headless and offline. Needs no vLLM: the diagrams read a trace. Images are rendered by kaleido
1.x, which drives a Chromium-based browser over the DevTools pipe; we point it at the system
Chromium (BROWSER_PATH, default /usr/bin/chromium) and never download one. Running as root
needs Chromium's --no-sandbox: choreographer (kaleido's browser driver) already adds it unless
`enable_sandbox=True` is asked for (choreographer/browsers/chromium.py, get_cli), so we pass
enable_sandbox=False explicitly to keep that guarantee visible. MathJax is off (kaleido would
fetch it from a CDN; no diagram uses LaTeX). HTML files embed plotly.js, so they open offline.

    da-lab export TRACE --out DIR             DIR/1_skeleton.{png,svg,html}, 2_blocks.*,
                                              3_metadata_path.*, 4_da_hook.*, blocks_read.*
                                              (the last step)
    da-lab export TRACE --out DIR --step N    the same, at engine step N
    da-lab export TRACE --out DIR --steps A:B DIR/step_A/*.{png,svg} ... DIR/step_B/*
                                              (A, B inclusive; either may be left out)
    da-lab export TRACE --out DIR --animate   also DIR/run.html: every diagram, one frame per
                                              step (of --steps if given, else the whole run)
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

DEFAULT_BROWSER = "/usr/bin/chromium"
FORMATS = ("png", "svg")
# Used when a figure doesn't set its own size (kaleido's default is 700 x 500).
DEFAULT_SIZE = (1200, 800)


def browser_path() -> str:
    """The Chromium kaleido will drive: $BROWSER_PATH, else the system Chromium (set into
    BROWSER_PATH so choreographer's own lookups agree). Never downloads one."""
    if not os.environ.get("BROWSER_PATH"):
        os.environ["BROWSER_PATH"] = DEFAULT_BROWSER
    path = os.environ["BROWSER_PATH"]
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        found = shutil.which(path)
        if not found:
            raise RuntimeError(
                f"no Chromium at BROWSER_PATH={path!r}: image export drives a system "
                "Chromium-based browser (Debian: apt-get install chromium); set BROWSER_PATH "
                "to its executable. (kaleido.get_chrome() would download one; da_lab never "
                "does.)")
        path = found
    return path


def _static(fig):
    """A plain go.Figure copy of a FigureWidget (what kaleido and write_html serialize)."""
    import plotly.graph_objects as go

    return go.Figure(fig)


def _size(fig) -> tuple[int, int]:
    w, h = fig.layout.width, fig.layout.height
    return int(w or DEFAULT_SIZE[0]), int(h or DEFAULT_SIZE[1])


def _image_jobs(figures: dict[str, object], out: Path) -> list[dict]:
    """kaleido jobs for <name>.png and <name>.svg of each figure, as the figure is now."""
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for name, fig in figures.items():
        static = _static(fig)
        w, h = _size(static)
        jobs += [{"fig": static, "path": str(out / f"{name}.{fmt}"),
                  "opts": {"format": fmt, "width": w, "height": h, "scale": 1}}
                 for fmt in FORMATS]
    return jobs


def _render(jobs: list[dict]) -> list[Path]:
    """All the images in one browser session."""
    import kaleido

    path = browser_path()
    kaleido.write_fig_from_object_sync(
        jobs, cancel_on_error=True,
        kopts={"path": path, "enable_sandbox": False, "mathjax": False})
    written = [Path(j["path"]) for j in jobs]
    missing = [str(p) for p in written if not p.exists()]
    if missing:
        raise RuntimeError(f"export: kaleido reported success but did not write {missing}")
    return written


def export_figures(figures: dict[str, object], out_dir: str | Path) -> list[Path]:
    """Write <name>.png, <name>.svg and <name>.html for every figure; one browser session
    renders all the images. Returns the paths written, in order."""
    out = Path(out_dir)
    written = _render(_image_jobs(figures, out))
    for name, fig in figures.items():
        p = out / f"{name}.html"
        # include_plotlyjs=True embeds plotly.js (~4 MB): the file opens with no network.
        _static(fig).write_html(str(p), include_plotlyjs=True, full_html=True)
        written.append(p)
    return written


def export_figure(fig, base_path: str | Path) -> list[Path]:
    """Write base_path.png, .svg and .html for one figure (FigureWidget or Figure)."""
    base = Path(base_path)
    return export_figures({base.name: fig}, base.parent)


NAMES = ("1_skeleton", "2_blocks", "3_metadata_path", "4_da_hook", "blocks_read")


def diagrams_at(header: dict, records: list, indices: list[int]):
    """Every diagram of the lab, built headless once, shown at each record index in turn:
    yields (index, {export name: plotly figure}) (the same figure objects each time)."""
    from .highlight import Highlight
    from .metadata_path import MetadataPathDiagram
    from .skeleton import SkeletonDiagram

    try:
        from .blocks import BlocksDiagram
        from .dahook import DAHookDiagram
    except ImportError as e:
        raise RuntimeError(
            "export needs every diagram: BlocksDiagram (da_lab_widgets/blocks.py) and "
            f"DAHookDiagram (da_lab_widgets/dahook.py) could not be imported: {e}") from e
    if not records:
        raise ValueError("the trace has no step records to draw")
    hl = Highlight()
    skel, blocks = SkeletonDiagram(header, hl), BlocksDiagram(header, hl)
    path, hook = MetadataPathDiagram(header, hl), DAHookDiagram(header, hl)
    figures = dict(zip(NAMES, (skel.figure, blocks.figure, path.figure, hook.figure,
                               hook.chart), strict=True))
    for i in indices:
        for d in (skel, blocks, hook):
            d.show(records, i)
        # The packet at the DA hook: the one stage where the full and the kernel's values differ.
        path.show(records, i, frame=path.hook_frame)
        yield i, figures


def build_diagrams(header: dict, records: list, i: int | None = None) -> dict[str, object]:
    """Every diagram of the lab, built headless and shown at record i (default: the last).
    Returns {export name: plotly figure}."""
    i = len(records) - 1 if i is None and records else i
    return next(diagrams_at(header, records, [i]))[1]


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


def export_trace(trace_path: str | Path, out_dir: str | Path, *, step: int | None = None,
                 steps: str | None = None, animate: bool = False) -> list[Path]:
    """Write the diagrams of the trace as PNG, SVG and HTML into out_dir (at the last step, or
    at `step`), or as PNG and SVG per step of `steps` into out_dir/step_<N>/; with `animate`,
    also out_dir/run.html. Returns the paths written."""
    from da_lab.trace import load

    tr = load(trace_path)
    indices = step_indices(tr.records, step, steps)
    out = Path(out_dir)
    written: list[Path] = []
    if steps is None:
        written += export_figures(build_diagrams(tr.header, tr.records, indices[0]), out)
    else:
        jobs = [job for i, figures in diagrams_at(tr.header, tr.records, indices)
                for job in _image_jobs(figures, out / f"step_{tr.records[i].step:04d}")]
        written += _render(jobs)
    if animate:
        from .export_run import write_run

        run = indices if steps is not None else list(range(len(tr.records)))
        written.append(write_run(diagrams_at(tr.header, tr.records, run), tr.header,
                                 [tr.records[i].step for i in run], out / "run.html",
                                 title=f"da_lab · {Path(trace_path).name}"))
    return written


def main_export(argv: list[str] | None = None) -> int:
    """`da-lab export TRACE --out DIR [--step N | --steps A:B] [--animate]`: argv is what
    follows `export`."""
    import sys

    from da_lab.trace import TraceError

    ap = argparse.ArgumentParser(prog="da-lab export",
                                 description="write every diagram of a trace as PNG, SVG and "
                                             "HTML (last step by default); needs no vLLM")
    ap.add_argument("trace", help="a recorded trace (.jsonl.gz or .parquet)")
    ap.add_argument("--out", required=True, help="output folder (created if missing)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, metavar="N", help="the diagrams at engine step N")
    which.add_argument("--steps", metavar="A:B",
                       help="PNG and SVG of every step from A to B (inclusive; 5: or :12 "
                            "leave an end open), one folder per step")
    ap.add_argument("--animate", action="store_true",
                    help="also run.html: every diagram with one frame per step of the run "
                         "(or of --steps), one player; opens offline")
    args = ap.parse_args(argv)
    try:
        paths = export_trace(args.trace, args.out, step=args.step, steps=args.steps,
                             animate=args.animate)
    except (TraceError, RuntimeError, ValueError) as e:
        print(f"da-lab export: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main_export())
