"""Benchmark: the four diagrams in a real browser, today's plotly path and the browser-drawn one,
side by side in one run, every shipped trace.

    git worktree add --detach /tmp/da-old e5c576c          # main before the change
    BROWSER_PATH=/usr/bin/chromium .venv/bin/python -m da_lab.bench.browser.diagrams_browser \
        --old /tmp/da-old \
        --out bench/results/diagrams-browser-DATE.json

For each path a JupyterLab server on localhost (its kernel imports that checkout's da_lab and
widgets) and headless Chromium at 1366 x 768 (da_lab/bench/browser/browser_page.py). Per shipped
trace,
for the tour (all four diagrams) and notebook 04's pair (DA hook + blocks), the kernel builds a
Player over a TraceSource at 20 steps/s (interval 50 ms), then
(da_lab/bench/browser/diagrams_paths.py
says how each page is read):
  - play: ▶ from the first step to the last; steps painted of steps played, and steps a second;
  - step: a Step press per recorded step, click -> painted (median, p95);
  - drag: the slider dragged across every step with the mouse (2 s); frames a second in which
    the step on screen changed;
  - bytes: kernel -> page on the websocket, to build the player and per Step press.
Live (a Lab in the kernel, the lab's default model, one 40-token lesson request per set): play
to the end at 20 steps/s; steps painted of the engine steps run, steps a second, bytes kernel ->
page per engine step. New path only: the exported 8B page (da-lab export --html): its size, the
time it takes to open from file:// with the network refused, and a play at 20 steps/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from da_lab.bench.browser import diagrams_paths as dp
from da_lab.bench.browser.browser_page import (
    ROOT,
    Wire,
    chromium_page,
    kernel,
    open_notebook,
    traces_named,
)

SETS = {"tour": ["skeleton", "blocks", "metadata_path", "da_hook"],
        "pair_04": ["da_hook", "blocks"]}
MAKE = {"skeleton": "SkeletonDiagram(src.header, hl)", "blocks": "BlocksDiagram(src.header, hl)",
        "metadata_path": "MetadataPathDiagram(src.header, hl)",
        "da_hook": "DAHookDiagram(src.header, hl, lab=lab)"}
IMPORTS = """
import json
from da_lab_widgets import (BlocksDiagram, DAHookDiagram, Highlight, Player, TraceSource,
                            LiveSource)
from da_lab_widgets.skeleton import SkeletonDiagram
from da_lab_widgets.metadata_path import MetadataPathDiagram
"""
LIVE_TOKENS = 40


def _stats(xs: list[float]) -> dict | None:
    if not xs:
        return None
    s = sorted(xs)
    return {"median": round(statistics.median(s), 1), "p95": round(s[min(len(s) - 1,
            int(0.95 * len(s)))], 1), "max": round(s[-1], 1), "n": len(s)}


def build(page, path: str, names: list[str], trace: Path | None) -> list[int]:
    """A Player in the kernel (replay of `trace`, or live on the kernel's Lab), on the page."""
    make = ", ".join(MAKE[n] for n in names)
    if trace is not None:
        src = f"lab = None\nsrc = TraceSource({str(trace)!r})"
    else:
        src = ("from da_lab.engine.lab import Lab\nfrom da_lab.lesson import add_lesson_request\n"
               "lab = globals().get('lab') or Lab()\n"
               f"add_lesson_request(lab, max_tokens={LIVE_TOKENS})\nsrc = LiveSource(lab)")
    out = kernel(page, IMPORTS + f"""
box.children = []
{src}
hl = Highlight()
player = Player(src, [{make}], interval_ms=50)
box.children = [player.widget]
print(json.dumps([r.step for r in src.records]))""")
    page.wait_for_selector(dp.OLD_READY if path == "old" else dp.NEW_READY, timeout=180_000)
    page.wait_for_timeout(1500)           # the first render settles
    if path == "old":
        page.evaluate(dp.OLD_WATCH)
    return json.loads(out.strip().splitlines()[-1])


def play(page, path: str, last_step: int | None) -> dict:
    """▶ to the end; steps painted / played, per second (last_step None: a live run)."""
    counter = dp.OLD_COUNTER if path == "old" else dp.NEW_COUNTER
    start = page.evaluate(f"document.querySelector('{dp.NEW_COUNTER}')?.dataset.daStep")
    page.evaluate(dp.FRAMES, counter)
    t0 = time.perf_counter()
    page.locator(dp.OLD_PLAY if path == "old" else "[data-da-action=play]").first.click()
    if last_step is not None and path == "old":
        page.wait_for_function(f"document.querySelector('.da-step-counter').textContent.trim()"
                               f" === 'step {last_step}'", timeout=600_000, polling="raf")
    elif path == "old":      # live: Play stops when the engine has nothing left
        page.wait_for_selector(".da-player-note b", timeout=900_000)
    else:
        page.wait_for_function("!document.querySelector('[data-da-player]').classList"
                               ".contains('da-playing')", timeout=900_000, polling=200)
    wall = (time.perf_counter() - t0) * 1e3
    fr = page.evaluate(dp.FRAMES_END)
    if path == "old":       # the steps the counter showed after the first
        played = kernel(page, "print(len(player.source.records) - 1)").strip()
        painted, played = fr["distinct"] - 1, int(played)
    else:
        st = page.evaluate("(() => { const e = document.querySelector('[data-da-player]');"
                           " return [+e.dataset.daDrawn, +e.dataset.daStep]; })()")
        painted, played = st[0], st[1] - int(start or 0)
    return {"played": played, "painted": painted,
            "painted_pct": round(100 * painted / max(1, played), 1),
            "steps_per_s": round(played / wall * 1e3, 1), "wall_ms": round(wall)}


def steps(page, path: str, rec_steps: list[int], wire: Wire) -> dict:
    """A Step press per recorded step: click -> painted, and bytes kernel -> page each."""
    ms, recv = [], []
    for i in range(1, len(rec_steps)):
        page.wait_for_timeout(80)
        wire.take()
        r = (page.evaluate(dp.OLD_STEP, f"step {rec_steps[i]}") if path == "old"
             else page.evaluate(dp.NEW_STEP))
        if "error" in r:
            raise RuntimeError(f"step {i}: {r}")
        ms.append(r["ms"])
        page.wait_for_timeout(80)
        recv.append(wire.take()[0])
    return {"press_ms": _stats(ms), "bytes_to_page": _stats(recv),
            "bytes_to_page_mean": round(statistics.mean(recv)) if recv else None}


def drag(page, path: str, n: int) -> dict:
    """Drag the slider's handle from the first step to the last with the mouse, as fast as the
    mouse moves come (4 moves a step); frames a second in which the step on screen changed."""
    sel = ".da-step-slider .noUi-target" if path == "old" else dp.NEW_SLIDER
    track = page.locator(sel).first
    track.scroll_into_view_if_needed()
    box = track.bounding_box()
    y, x0, x1 = box["y"] + box["height"] / 2, box["x"] + 2, box["x"] + box["width"] - 2
    page.mouse.move(x0, y)
    page.mouse.down()
    page.evaluate(dp.FRAMES, dp.OLD_COUNTER if path == "old" else dp.NEW_COUNTER)
    moves = 4 * n
    t0 = time.perf_counter()
    for k in range(moves + 1):
        page.mouse.move(x0 + (x1 - x0) * k / moves, y)
    drag_ms = (time.perf_counter() - t0) * 1e3
    page.mouse.up()
    page.wait_for_timeout(3000 if path == "old" else 300)    # the last values' trip (old)
    fr = page.evaluate(dp.FRAMES_END)
    out = {"steps": n, "drag_ms": round(drag_ms), "distinct_steps_shown": fr["distinct"],
           "changed_frames": fr["changed"],
           "changed_frames_per_s": round(fr["changed"] / max(fr["ms"], 1) * 1e3, 1)}
    if path == "new":       # the page's own sweep: a new step at every frame, there and back
        out["sweep"] = page.evaluate(dp.NEW_SWEEP, n)
    return out


def exported_page(trace: Path) -> dict:
    """The page `da-lab export --html` writes for `trace`: size, open from file://, play."""
    from da_lab_widgets.export import export_trace
    from playwright.sync_api import sync_playwright

    out = Path(tempfile.mkdtemp()) / "run.html"
    t0 = time.perf_counter()
    export_trace(trace, html=out)
    write_s = time.perf_counter() - t0
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=os.environ.get("BROWSER_PATH", "/usr/bin/chromium"),
                              args=["--no-sandbox", "--disable-gpu"])
        page = b.new_page(viewport={"width": 1366, "height": 768})
        refused = []
        page.route("**/*", lambda r: (refused.append(r.request.url), r.abort())
                   if not r.request.url.startswith(("file:", "blob:", "data:")) else r.continue_())
        t0 = time.perf_counter()
        page.goto(out.as_uri())
        page.wait_for_selector(dp.NEW_READY)
        open_ms = (time.perf_counter() - t0) * 1e3
        page.fill("[data-da-action=speed]", "20")
        page.dispatch_event("[data-da-action=speed]", "change")
        n = page.evaluate("daLab.session.run.length")
        played = play(page, "new", n - 1)
        b.close()
    return {"trace": trace.name, "bytes": out.stat().st_size, "write_s": round(write_s, 2),
            "open_ms": round(open_ms), "network_requests": refused, "play": played}


def measure_path(path: str, code: Path, traces: list[Path], live: bool) -> dict:
    rows = []
    with chromium_page(1366, 768, ("Performance",), code=code) as (page, _cdp, lab):
        wire = Wire(page)
        open_notebook(page, lab)
        for trace in traces:
            row = {"trace": trace.name}
            for name, names in SETS.items():
                wire.take()
                rec_steps = build(page, path, names, trace)
                built = wire.take()[0]
                r = {"bytes_to_build": built, "play": play(page, path, rec_steps[-1])}
                build(page, path, names, trace)
                r.update(steps(page, path, rec_steps, wire))
                r["bytes_per_step_total"] = round((built + r["bytes_to_page_mean"]
                                                   * (len(rec_steps) - 1)) / len(rec_steps))
                build(page, path, names, trace)
                r["drag"] = drag(page, path, len(rec_steps))
                row[name] = r
                print(f"{path} {trace.name} {name}: {json.dumps(r)}", flush=True)
            rows.append(row)
        if live:
            for name, names in SETS.items():
                wire.take()
                build(page, path, names, None)
                wire.take()
                r = play(page, path, None)
                r["bytes_to_page_per_step"] = round(wire.take()[0] / max(1, r["played"]))
                rows.append({"live": name, **r})
                print(f"{path} live {name}: {json.dumps(r)}", flush=True)
    return {"code": str(code), "commit": _commit(code), "rows": rows}


def _commit(code: Path) -> str:
    r = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(code), "status", "--porcelain", "--", "widgets"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + (" (widgets modified)" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, help="a checkout of main before the change")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--traces", nargs="*", default=None, help="trace name prefixes")
    ap.add_argument("--no-live", action="store_true")
    args = ap.parse_args()
    load0, t0 = os.getloadavg()[0], time.time()
    traces = traces_named(args.traces)
    doc = {"command": " ".join(["python", *sys.argv]), "machine": platform.machine(),
           "cpus": os.cpu_count(), "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "browser": "/usr/bin/chromium headless (--disable-gpu), 1366x768", "paths": {}}
    if args.old:
        doc["paths"]["old"] = measure_path("old", args.old.resolve(), traces, not args.no_live)
    doc["paths"]["new"] = measure_path("new", ROOT, traces, not args.no_live)
    doc["exported_page"] = exported_page(ROOT / "traces" / "h200_8b_64k.jsonl.gz")
    print("exported page:", json.dumps(doc["exported_page"]))
    doc["load_avg_1m_start_end"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    doc["wall_s"] = round(time.time() - t0)
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
