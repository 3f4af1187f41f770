"""Write docs/img/*.png, the screenshots docs/diagrams.md shows, from the exported page of a
shipped trace (headless Chromium at the notebook's width at 1366 x 768: ~934 px a cell).

    .venv/bin/python tools/diagram_shots.py [--trace traces/seed_cpu.jsonl.gz]

Some are taken while an animation runs (a step played at 2 steps/s): the moment is when the
shot was taken, so they differ a little from run to run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
sys.path.insert(0, str(ROOT / "widgets"))

D = '[data-da-diagram="{}"]'


def _step_once(page, i: int, wait_ms: int) -> None:
    """Show step i - 1, then play step i as ▶ does at 2 steps/s; wait `wait_ms` into it."""
    page.evaluate("(i) => daLab.goto(i)", i - 1)
    page.fill("[data-da-action=speed]", "2")
    page.dispatch_event("[data-da-action=speed]", "change")
    page.click("[data-da-action=next]")
    page.wait_for_timeout(wait_ms)


def shots(trace: Path) -> list[Path]:
    from da_lab_widgets.export import run_page
    from playwright.sync_api import sync_playwright

    from da_lab.trace import load

    tr = load(trace)
    recs = tr.records
    focus = next(i for i, r in enumerate(recs) if r.requests[0].hooked
                 and r.requests[0].mode == "focus")
    typing = next(i for i, r in enumerate(recs) if len(r.requests[0].tag_buffer or "") >= 4)
    rows = [len(r.requests[0].staged_row) if r.requests[0].staged_row is not None else 0
            for r in recs]
    grows = next(i for i in range(1, len(recs)) if rows[i] > rows[i - 1])
    page_file = Path(tempfile.mkdtemp()) / "run.html"
    page_file.write_text(run_page(trace, eager=True))
    OUT.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=os.environ.get("BROWSER_PATH", "/usr/bin/chromium"),
                              args=["--no-sandbox", "--disable-gpu"])
        page = b.new_page(viewport={"width": 966, "height": 4000})
        page.goto(page_file.as_uri())
        page.wait_for_function("window.daLab !== undefined")

        def shot(name: str, sel: str, clip_h: int | None = None) -> None:
            el = page.locator(sel).first
            box = el.bounding_box()
            path = OUT / f"{name}.png"
            clip = {**box, "height": min(box["height"], clip_h)} if clip_h else box
            page.screenshot(path=str(path), clip=clip)
            out.append(path)

        page.evaluate("(i) => daLab.goto(i)", focus)
        shot("player", ".da-controls")
        shot("d1_skeleton", D.format(1))
        # hover a block the kernel still reads: it pulses in diagrams 2 and 4
        rect = page.locator(f'{D.format(2)} [data-strip=kernel] rect[data-run]').nth(1)
        bb = rect.bounding_box()
        page.mouse.move(bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2)
        page.wait_for_timeout(300)
        shot("d2_blocks_hover", D.format(2))
        shot("d4_row_hover", f"{D.format(4)} svg")
        page.mouse.move(1, 1)
        _step_once(page, grows, 180)                 # append_row's block lands, commit() copies
        shot("d2_append_row_lands", D.format(2), clip_h=230)
        _step_once(page, focus, 300)                 # the row closes ranks under FOCUS
        shot("d2_row_shrinks", D.format(2), clip_h=230)
        shot("d4_row_shrinks", f"{D.format(4)} svg")
        _step_once(page, focus + 2, 220)             # the packet travels the path
        shot("d3_packet", f"{D.format(3)} svg")
        _step_once(page, typing, 150)                # the tag buffer fills, letter by letter
        shot("d4_top", f"{D.format(4)} .da-hook-top")
        page.evaluate("(i) => daLab.goto(i)", len(recs) - 1)
        shot("d4_bands_chart", f"{D.format(4)} .da-bands")
        shot("d4_chart", f"{D.format(4)} [data-da-part=chart]")
        b.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=ROOT / "traces" / "seed_cpu.jsonl.gz")
    args = ap.parse_args()
    for p in shots(args.trace):
        print(p.relative_to(ROOT), p.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
