"""Where a step's browser time goes, per diagram: plotly calls, plotly's widget bookkeeping,
the rest of the page (other widgets' DOM, style, layout, paint).

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/frames_profile.py \
        [--traces seed_cpu] [--sets blocks da_hook] [--steps 15] [--out FILE.json]

Same page as bench/widgets_browser.py (JupyterLab + headless Chromium, one Player per set).
The page's plotly.js functions and plotly's widget view methods are wrapped to time each call
(synchronous part) and to note what it was asked to change (trace keys, layout keys); the
kernel's comm messages are counted per widget class and per synced key. A DevTools trace of
the steps splits the main thread into scripting, style + layout, paint and the rest.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import widgets_browser as wb  # noqa: E402

# Wrap plotly.js's entry points and the widget view's delta senders: per call, the synchronous
# milliseconds and what was asked (the keys of the trace / layout updates).
INSTRUMENT = """async (key) => {
  const got = await globalThis[JSON.parse(key)];   // figure._KEY is a JSON string
  const mod = got && (got.mod || got), P = got && (got.Plotly || window.Plotly);
  window.__prof = window.__prof || [];
  if (!mod || !P) return false;     // no figure on the page
  const rec = (name, t0, info) => window.__prof.push(
      {name, ms: performance.now() - t0, at: t0, ...info});
  if (!P.__wrapped) {
    P.__wrapped = true;
    for (const f of ['update', 'restyle', 'relayout', 'react', 'newPlot', 'addTraces']) {
      const orig = P[f];
      P[f] = function (gd, a, b, c) {
        const t0 = performance.now();
        const out = orig.apply(this, arguments);
        let info = {};
        if (f === 'update') info = {data: Object.keys(a || {}), layout: Object.keys(b || {})};
        if (f === 'restyle') info = {data: typeof a === 'object' ? Object.keys(a) : [a]};
        if (f === 'relayout') info = {layout: typeof a === 'object' ? Object.keys(a) : [a]};
        rec('Plotly.' + f, t0, info);
        if (out && out.then) out.then(() => rec('Plotly.' + f + ' settled', t0, {}));
        return out;
      };
    }
  }
  const V = mod.FigureView.prototype;
  if (!V.__wrapped) {
    V.__wrapped = true;
    for (const f of ['_sendTraceDeltas', '_sendLayoutDelta', 'do_update', 'do_restyle',
                     'do_relayout']) {
      const orig = V[f];
      V[f] = function () {
        const t0 = performance.now();
        const out = orig.apply(this, arguments);
        rec('view.' + f, t0, {});
        return out;
      };
    }
  }
  return true;
}"""

# Kernel side: count comm messages per widget class and synced key during each step.
KERNEL_COUNT = """
import collections, ipywidgets
_counts = collections.Counter()
if not hasattr(ipywidgets.Widget, '_da_orig_send_state'):
    ipywidgets.Widget._da_orig_send_state = ipywidgets.Widget.send_state
    def _send_state(self, key=None):
        keys = [key] if isinstance(key, str) else list(key or self.keys)
        for k in keys:
            _counts[f"{type(self).__name__}.{k}"] += 1
        return ipywidgets.Widget._da_orig_send_state(self, key)
    ipywidgets.Widget.send_state = _send_state
"""

CATS = ("devtools.timeline,disabled-by-default-devtools.timeline,v8.execute,blink.user_timing")
BUCKET = {"FunctionCall": "script", "EvaluateScript": "script", "v8.compile": "script",
          "TimerFire": "script", "FireAnimationFrame": "script", "EventDispatch": "script",
          "RunMicrotasks": "script", "V8.Execute": "script",
          "UpdateLayoutTree": "style+layout", "RecalculateStyles": "style+layout",
          "Layout": "style+layout", "ParseHTML": "style+layout",
          "Paint": "paint", "PaintImage": "paint", "RasterTask": "paint",
          "UpdateLayer": "paint", "UpdateLayerTree": "paint", "Layerize": "paint",
          "CompositeLayers": "paint", "PrePaint": "paint", "Commit": "paint",
          "MajorGC": "gc", "MinorGC": "gc", "V8.GCScavenger": "gc"}


def breakdown(events: list[dict]) -> dict:
    """Main-thread ms per bucket from a DevTools trace: the top-level tasks' time by what ran
    directly under them (nested events of the same bucket are not counted twice)."""
    main = [e for e in events if e.get("ph") == "X" and e.get("name") == "RunTask"]
    if not main:
        return {}
    # the renderer main thread: the one with the most task time
    by_tid = collections.Counter()
    for e in main:
        by_tid[(e["pid"], e["tid"])] += e.get("dur", 0)
    pid, tid = by_tid.most_common(1)[0][0]
    evs = sorted((e for e in events if e.get("pid") == pid and e.get("tid") == tid
                  and e.get("ph") == "X"), key=lambda e: (e["ts"], -e.get("dur", 0)))
    out = collections.Counter()
    stack: list[tuple[float, str | None]] = []    # (end, bucket of the outermost bucketed)
    for e in evs:
        end = e["ts"] + e.get("dur", 0)
        while stack and stack[-1][0] <= e["ts"]:
            stack.pop()
        b = BUCKET.get(e["name"])
        outer = next((s[1] for s in reversed(stack) if s[1] is not None), None)
        if e["name"] == "RunTask":
            out["tasks"] += e.get("dur", 0)
        elif b is not None and outer is None:
            out[b] += e.get("dur", 0)
        stack.append((end, b if outer is None else outer))
    return {k: round(v / 1e3, 1) for k, v in out.items()}


def profile_set(page, cdp, trace: Path, names: list[str], steps: int) -> dict:
    make = ", ".join(wb.MAKE[n] for n in names)
    out = page.evaluate(wb.KERNEL_EXEC, KERNEL_COUNT + f"""
import json
from da_lab_widgets import (BlocksDiagram, DAHookDiagram, Highlight, MetadataPathDiagram,
                            Player, SkeletonDiagram, TraceSource)
from da_lab_widgets.figure import _KEY
box.children = []
src = TraceSource({str(trace)!r}); hl = Highlight()
player = Player(src, [{make}])
box.children = [player.widget]
print(json.dumps([_KEY, [r.step for r in src.records]]))""")
    if "ERROR" in out:
        raise RuntimeError(out)
    key, rec_steps = json.loads(out.strip().splitlines()[-1])
    page.wait_for_selector(".da-step", timeout=120_000)
    page.wait_for_timeout(1500)
    page.evaluate(wb.WATCH)
    page.evaluate(INSTRUMENT, key)
    n = min(len(rec_steps), steps + 1)
    calls: dict[str, list[float]] = collections.defaultdict(list)
    asked = collections.Counter()
    slow: dict[str, float] = {}
    e2e = []
    page.evaluate(wb.KERNEL_EXEC, "_counts.clear()")
    cdp.send("Tracing.start", {"categories": CATS, "transferMode": "ReturnAsStream"})
    for i in range(1, n):
        page.wait_for_timeout(100)
        page.evaluate("window.__prof = []")
        r = page.evaluate(wb.STEP, f"step {rec_steps[i]}")
        e2e.append(r["e2e_ms"])
        page.wait_for_timeout(100)
        for c in page.evaluate("window.__prof"):
            calls[c["name"]].append(c["ms"])
            if "data" in c or "layout" in c:
                lay = sorted(c.get("layout", []))
                lay = lay if len(lay) < 6 else [*lay[:5], f"... {len(lay)} keys"]
                asked[f"{c['name']} data={sorted(c.get('data', []))} layout={lay}"] += 1
                slow[f"{c['name']} data={sorted(c.get('data', []))}"] = max(
                    slow.get(f"{c['name']} data={sorted(c.get('data', []))}", 0), c["ms"])
    events = _stop_trace(page, cdp)
    counts = json.loads(page.evaluate(wb.KERNEL_EXEC, "print(json.dumps(_counts))")
                        .strip().splitlines()[-1])
    k = n - 1
    return {"steps": k, "e2e_median": round(statistics.median(e2e), 1),
            "per_step_main_thread_ms": {b: round(v / k, 1)
                                        for b, v in breakdown(events).items()},
            "per_step_calls": {name: {"n": round(len(v) / k, 2),
                                      "ms": round(sum(v) / k, 1), "max": round(max(v), 1)}
                               for name, v in sorted(calls.items())},
            "asked": {a: round(c / k, 2) for a, c in asked.most_common()},
            "slowest_ms": {a: round(v, 1) for a, v in sorted(slow.items(), key=lambda x: -x[1])},
            "kernel_messages_per_step": {a: round(c / k, 2) for a, c in
                                         sorted(counts.items(), key=lambda x: -x[1])}}


def _stop_trace(page, cdp) -> list[dict]:
    done = {}
    cdp.on("Tracing.tracingComplete", lambda p: done.update(p))
    cdp.send("Tracing.end")
    for _ in range(600):      # events arrive while Playwright's loop runs, not in sleep()
        if done:
            break
        page.wait_for_timeout(50)
    handle, chunks = done["stream"], []
    while True:
        r = cdp.send("IO.read", {"handle": handle, "size": 1 << 20})
        chunks.append(r["data"])
        if r.get("eof"):
            break
    cdp.send("IO.close", {"handle": handle})
    data = json.loads("".join(chunks))
    return data["traceEvents"] if isinstance(data, dict) else data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", nargs="*", default=["seed_cpu"])
    ap.add_argument("--sets", nargs="*", default=list(wb.SETS), choices=list(wb.SETS))
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    traces = wb.traces_named(args.traces)
    rows = []
    with wb.chromium_page(domains=()) as (page, cdp, lab):
        wb.open_notebook(page, lab)
        for trace in traces:
            for s in args.sets:
                r = profile_set(page, cdp, trace, wb.SETS[s], args.steps)
                r.update(trace=trace.name, set=s)
                print(json.dumps(r, indent=1), flush=True)
                rows.append(r)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
