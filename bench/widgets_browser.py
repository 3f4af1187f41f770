"""Benchmark: what a step costs end to end in a real browser, per diagram and per shipped trace.

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/widgets_browser.py \
        [--out bench/results/widgets-browser-DATE.json] [--traces h200_8b_64k] [--steps N]

Starts JupyterLab on localhost (as tests/test_browser.py does) and opens a one-cell notebook in
headless Chromium (Playwright). For each trace in traces/ and each diagram (and for the pair
notebook 04 shows, da_hook + blocks; and for a Player with no diagram at all, the floor: its
step counter, slider and Play, the kernel's busy/idle), the kernel builds a Player over a
TraceSource; then the page presses Step once per recorded step and measures, per step:
  - e2e_ms: from the click to the first animation frame after the step is on screen (the step
    counter shows the new step and no plotly event came after that frame): the click's trip to
    the kernel, the kernel's redraw, the messages back, plotly.js's redraw, layout and paint;
  - main_ms: the browser main thread's busy time over that interval (Chrome DevTools
    Performance.getMetrics TaskDuration), i.e. what the page itself spent;
  - kernel_ms: the kernel's own redraw time (Player.update_ms);
  - ws_bytes_to_page / ws_bytes_from_page: bytes on the kernel websocket each way for the step
    (the widget messages out, and what the page sends back: plotly's figure deltas, the click).
Then Play runs through the trace at the fastest tick the player offers (50 ms), for the pair
(and each set named by --play), and reports: the wall time from the click on ▶ to the last step
painted, per tick (it includes the click and the last step's trip: a Player with no diagram
measures ~52 ms); the page's timer gaps; how many distinct steps the counter showed, and per
second (20/s is every step: the player skips steps a busy page had no time for); the main
thread's busy time per tick (wall time in tasks, and its CPU time: on two shared cores a task
also waits for a core) and its long tasks; the kernel's redraw times.
Numbers are medians/p95 over the steps (step 0, drawn before the page shows it, left out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from browser_page import (  # noqa: F401 - the other browser benchmarks use these as wb.X
    CHROMIUM,
    ROOT,
    Lab,
    chromium_page,
    open_notebook,
    traces_named,
)

SETS = {"player_only": [], "skeleton": ["skeleton"], "blocks": ["blocks"],
        "metadata_path": ["metadata_path"], "da_hook": ["da_hook"],
        "pair_04": ["da_hook", "blocks"]}
MAKE = {"skeleton": "SkeletonDiagram(src.header, hl)", "blocks": "BlocksDiagram(src.header, hl)",
        "metadata_path": "MetadataPathDiagram(src.header, hl)",
        "da_hook": "DAHookDiagram(src.header, hl)"}
# Run code in the notebook's kernel; resolves to its stdout (and any error).
KERNEL_EXEC = """async (code) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const fut = k.requestExecute({code, store_history: false});
  let out = '';
  fut.onIOPub = (m) => {
    if (m.header.msg_type === 'stream') out += m.content.text;
    if (m.header.msg_type === 'error') out += 'ERROR ' + m.content.ename + ': ' + m.content.evalue;
  };
  await fut.done;
  return out;
}"""

# Every plotly figure on the page reports its events into window.__ev (last timestamp).
WATCH = """() => {
  window.__ev = window.__ev || {last: 0, n: 0};
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (gd.__watched) continue;
    gd.__watched = true;
    for (const e of ['plotly_afterplot', 'plotly_update', 'plotly_restyle', 'plotly_relayout'])
      gd.on(e, () => { window.__ev.last = performance.now(); window.__ev.n++; });
  }
  return document.querySelectorAll('.js-plotly-plot').length;
}"""

# Press Step; resolve when `want` is on the counter and a frame has been painted after the last
# plotly event (two frames with no new event: the page is still). The frame in which the counter
# is first seen already holds every change made before it, plotly's events included (they fire
# in the same tasks as the drawing they report); only an event after that frame moves the
# paint on to a later frame. A frame's time is when its callbacks run (performance.now()), not
# its timestamp: that is when the frame began, which a long task before it can put well before
# the counter even changed. (Until 2026-12-01 an event from before that frame moved the paint
# on too, which added one or two frames, 17-33 ms, to every step of a diagram plotly redrew.)
STEP = """async (want) => {
  const counter = document.querySelector('.da-step-counter');
  const btn = document.querySelector('.da-step');
  const button = btn.tagName === 'BUTTON' ? btn : btn.querySelector('button');
  const t0 = performance.now();
  button.click();
  const frame = () => new Promise(r => requestAnimationFrame(r));
  let shownAt = null, still = 0, lastN = null, paintAfter = null;
  while (true) {
    await frame();
    const t = performance.now();
    if (t - t0 > 60000) return {error: 'timeout', counter: counter.innerText};
    if (shownAt === null) {
      if (counter.innerText.trim() === want) {
        shownAt = t; paintAfter = t; lastN = window.__ev.n;
      }
      continue;
    }
    if (window.__ev.n !== lastN) { lastN = window.__ev.n; still = 0; paintAfter = null; continue; }
    if (paintAfter === null) paintAfter = t;
    if (++still >= 2) break;
  }
  return {e2e_ms: paintAfter - t0, events: window.__ev.n};
}"""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _stats(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 1), "p95": round(_pct(xs, .95), 1),
            "max": round(max(xs), 1)}


class Wire:
    """Bytes on the page's websockets (the kernel channel): to the page and from it."""

    def __init__(self, page) -> None:
        self.recv = self.sent = 0
        page.on("websocket", self._attach)

    def _attach(self, ws) -> None:
        ws.on("framereceived", lambda f: self._add("recv", f))
        ws.on("framesent", lambda f: self._add("sent", f))

    def _add(self, way: str, frame) -> None:
        n = len(frame.encode() if isinstance(frame, str) else frame)
        setattr(self, way, getattr(self, way) + n)

    def take(self) -> tuple[int, int]:
        out = self.recv, self.sent
        self.recv = self.sent = 0
        return out


def run_set(page, cdp, wire: Wire, trace: Path, names: list[str], steps: int | None) -> dict:
    make = ", ".join(MAKE[n] for n in names)
    out = page.evaluate(KERNEL_EXEC, f"""
import json
from da_lab_widgets import (BlocksDiagram, DAHookDiagram, Highlight, MetadataPathDiagram,
                            Player, SkeletonDiagram, TraceSource)
box.children = []
src = TraceSource({str(trace)!r}); hl = Highlight()
player = Player(src, [{make}])
box.children = [player.widget]
print(json.dumps([r.step for r in src.records]))""")
    if "ERROR" in out:
        raise RuntimeError(out)
    rec_steps = json.loads(out.strip().splitlines()[-1])
    page.wait_for_selector(".da-step", timeout=120_000)
    page.wait_for_timeout(1500)      # the first render settles
    page.evaluate(WATCH)
    n = len(rec_steps) if steps is None else min(len(rec_steps), steps + 1)
    e2e, main, recv, sent = [], [], [], []
    for i in range(1, n):
        page.wait_for_timeout(100)     # what the last step set off (deltas back) is done
        before = _task_s(cdp)
        wire.take()
        r = page.evaluate(STEP, f"step {rec_steps[i]}")
        if "error" in r:
            raise RuntimeError(f"step {i}: {r}")
        main.append((_task_s(cdp) - before) * 1e3)
        e2e.append(r["e2e_ms"])
        page.wait_for_timeout(100)
        b_in, b_out = wire.take()
        recv.append(b_in)
        sent.append(b_out)
    kern = json.loads(page.evaluate(KERNEL_EXEC, "print(json.dumps(player.update_ms))")
                      .strip().splitlines()[-1])[1:]
    return {"steps": n - 1, "e2e_ms": _stats(e2e), "main_ms": _stats(main),
            "kernel_ms": _stats(kern), "ws_bytes_to_page": _stats(recv),
            "ws_bytes_from_page": _stats(sent), "e2e_all": [round(x, 1) for x in e2e]}


# What Play does in the page: each tick of its timer run by window.setTimeout (ipywidgets'
# PlayModel.loop; the player's StepClock `tick`), each step the counter shows, and the main
# thread's long tasks.
PLAY_WATCH = """() => {
  window.__play = {ticks: [], shown: [], long: []};
  if (!window.__daTimer) {
    window.__daTimer = true;
    const st = window.setTimeout;
    window.setTimeout = function (fn, ms, ...rest) {
      if (typeof fn === 'function' && (fn.name === 'bound loop' || fn.name === 'tick')) {
        const tick = fn;
        fn = function () { window.__play.ticks.push(performance.now());
                           return tick.apply(this, arguments); };
      }
      return st.call(window, fn, ms, ...rest);
    };
    new PerformanceObserver((l) => { for (const e of l.getEntries())
      window.__play.long.push([e.startTime, e.duration]); }).observe({type: 'longtask'});
  }
  const c = document.querySelector('.da-step-counter');
  if (window.__daCounter) window.__daCounter.disconnect();
  window.__daCounter = new MutationObserver(
    () => window.__play.shown.push([performance.now(), c.textContent.trim()]));
  window.__daCounter.observe(c, {subtree: true, childList: true, characterData: true});
  return performance.now();
}"""


def play_through(page, cdp, trace: Path, names: list[str], before_click=None) -> dict:
    """Play the whole trace at a 50 ms tick; wall time from Play to the last step on screen,
    what the page's timer did (ticks), which steps were shown, and who was busy meanwhile."""
    make = ", ".join(MAKE[n] for n in names)
    out = page.evaluate(KERNEL_EXEC, f"""
import json
from da_lab_widgets import (BlocksDiagram, DAHookDiagram, Highlight, MetadataPathDiagram,
                            Player, SkeletonDiagram, TraceSource)
box.children = []
src = TraceSource({str(trace)!r}); hl = Highlight()
player = Player(src, [{make}], interval_ms=50)
box.children = [player.widget]
print(json.dumps([r.step for r in src.records]))""")
    if "ERROR" in out:
        raise RuntimeError(out)
    rec_steps = json.loads(out.strip().splitlines()[-1])
    page.wait_for_selector(".da-play button", timeout=120_000)
    page.wait_for_timeout(1500)
    t_page = page.evaluate(PLAY_WATCH)
    if before_click is not None:
        before_click()
    busy0, cpu0 = _task_s(cdp), _metric(cdp, "ThreadTime")
    t0 = time.perf_counter()
    page.locator(".da-play button").first.click()
    try:
        page.wait_for_function(
            f"document.querySelector('.da-step-counter').textContent.trim() === "
            f"'step {rec_steps[-1]}'", timeout=600_000, polling="raf")
    except Exception as e:  # noqa: BLE001 - re-raised with what the page and kernel show
        shown = page.evaluate("document.querySelector('.da-step-counter').innerText")
        state = page.evaluate(KERNEL_EXEC, "print(player.i, len(player.update_ms), "
                              "player.play.value, player.play.playing, player.play.max)")
        raise RuntimeError(f"Play did not reach step {rec_steps[-1]}: the page shows "
                           f"{shown!r}; kernel (i, frames, value, playing, max): {state}") from e
    wall = (time.perf_counter() - t0) * 1e3
    busy = (_task_s(cdp) - busy0) * 1e3
    cpu = (_metric(cdp, "ThreadTime") - cpu0) * 1e3
    seen = page.evaluate("window.__play")
    kern = json.loads(page.evaluate(KERNEL_EXEC, "print(json.dumps(player.update_ms))")
                      .strip().splitlines()[-1])
    ticks = len(rec_steps) - 1
    tick_t = [t for t in seen["ticks"] if t > t_page]
    gaps = [b - a for a, b in zip(tick_t, tick_t[1:], strict=False)]
    shown = list(dict.fromkeys(s for _, s in seen["shown"]))        # distinct, in order
    long = [d for t, d in seen["long"] if t > t_page]
    return {"ticks": ticks, "interval_ms": 50, "wall_ms": round(wall), "ms_per_tick":
            round(wall / ticks, 1), "frames_drawn": len(kern) - 1,
            "steps_shown": len(shown), "steps_shown_per_s": round(len(shown) / wall * 1e3, 1),
            "timer_gap_ms": _stats(gaps) if gaps else None,
            "main_ms_per_tick": round(busy / ticks, 1),
            "main_cpu_ms_per_tick": round(cpu / ticks, 1),
            "long_tasks": {"n": len(long), "ms": round(sum(long))},
            "kernel_ms": _stats(kern[1:]) if len(kern) > 1 else None}


def _task_s(cdp) -> float:
    return _metric(cdp, "TaskDuration")


def _metric(cdp, name: str) -> float:
    """Chrome's page counter `name` (s): TaskDuration is the main thread's wall time in tasks,
    ThreadTime its CPU time (on shared cores a task also waits for a core: wall > CPU)."""
    m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
    return m[name]


def main() -> None:
    from widgets_cpu import code_version

    load0 = os.getloadavg()[0]
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--traces", nargs="*", default=None, help="trace name prefixes")
    ap.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    ap.add_argument("--steps", type=int, default=None, help="at most this many steps per run")
    ap.add_argument("--no-play", action="store_true")
    ap.add_argument("--play", nargs="*", default=["pair_04"], choices=list(SETS),
                    help="the sets Play runs through (at a 50 ms tick)")
    ap.add_argument("--width", type=int, default=1440)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args()
    traces = traces_named(args.traces)
    rows = []
    with chromium_page(args.width, args.height, ("Performance",)) as (page, cdp, lab):
        wire = Wire(page)
        open_notebook(page, lab)
        for trace in traces:
            row = {"trace": trace.name}
            for s in args.sets:
                row[s] = run_set(page, cdp, wire, trace, SETS[s], args.steps)
                r = row[s]
                print(f"{trace.name:24s} {s:14s} e2e {r['e2e_ms']['median']:7.1f}/"
                      f"{r['e2e_ms']['p95']:7.1f}  main {r['main_ms']['median']:7.1f}/"
                      f"{r['main_ms']['p95']:7.1f}  kernel {r['kernel_ms']['median']:6.1f}/"
                      f"{r['kernel_ms']['p95']:6.1f} ms (median/p95)  ws kB to/from page "
                      f"{r['ws_bytes_to_page']['median'] / 1e3:.1f}/"
                      f"{r['ws_bytes_from_page']['median'] / 1e3:.1f}", flush=True)
            for s in [] if args.no_play else args.play:
                try:
                    row[f"play_{s}"] = play_through(page, cdp, trace, SETS[s])
                except RuntimeError as e:      # recorded, and the other traces still run
                    row[f"play_{s}"] = {"error": str(e)}
                print(f"{trace.name:24s} play {s} at 50 ms: {row[f'play_{s}']}", flush=True)
            rows.append(row)
    doc = {"command": " ".join(["python", *sys.argv]), "code": code_version(),
           "machine": platform.machine(), "cpus": os.cpu_count(),
           "load_avg_1m_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "browser": f"{CHROMIUM} (headless, --disable-gpu), viewport {args.width}x{args.height}",
           "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
