"""Record one Play per set with a DevTools trace (with stacks of forced layouts), save the raw
events and print, per tick: the main thread's tasks in wall time and in CPU time (on shared
cores a task also waits for a core), and the forced synchronous layouts (style or layout run
inside a script) by the script that forced them.

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/play_dump.py \
        --traces seed_cpu --sets pair_04 player_only --dir DIR
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import frames_profile as fp  # noqa: E402
import widgets_browser as wb  # noqa: E402

CATS = fp.CATS + ",disabled-by-default-devtools.timeline.stack,blink.console"
SCRIPT = {"FunctionCall", "TimerFire", "EventDispatch", "RunMicrotasks", "EvaluateScript",
          "FireAnimationFrame"}


def summary(events: list[dict], ticks: int) -> dict:
    """Per tick: tasks' wall and CPU ms (the renderer's main thread), forced layouts by stack."""
    tasks = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") == "RunTask":
            tasks[(e["pid"], e["tid"])] += e.get("dur", 0)
    if not tasks:
        return {}
    pid, tid = tasks.most_common(1)[0][0]
    evs = sorted((e for e in events if (e.get("pid"), e.get("tid")) == (pid, tid)
                  and e.get("ph") == "X"), key=lambda e: (e["ts"], -e.get("dur", 0)))
    wall = cpu = 0
    forced: collections.Counter = collections.Counter()
    stack: list[dict] = []
    for e in evs:
        while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) <= e["ts"]:
            stack.pop()
        if e["name"] == "RunTask" and not stack:
            wall, cpu = wall + e.get("dur", 0), cpu + e.get("tdur", 0)
        if e["name"] in ("Layout", "UpdateLayoutTree") and any(
                s["name"] in SCRIPT for s in stack):
            args = e.get("args", {})
            st = (args.get("beginData") or {}).get("stackTrace") or \
                (args.get("data") or {}).get("stackTrace") or []
            top = " < ".join(f"{f.get('functionName') or '(anon)'}@"
                             f"{f.get('url', '').rsplit('/', 1)[-1][:24]}" for f in st[:3])
            forced[top or "(no stack)"] += e.get("dur", 0)
        stack.append(e)
    per = lambda us: round(us / 1e3 / ticks, 2)  # noqa: E731
    return {"tasks_wall_ms": per(wall), "tasks_cpu_ms": per(cpu),
            "forced_layout_ms": {k: per(v) for k, v in forced.most_common(8)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", nargs="*", default=["seed_cpu"])
    ap.add_argument("--sets", nargs="*", default=["pair_04"], choices=list(wb.SETS))
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    traces = wb.traces_named(args.traces)
    with wb.chromium_page(domains=("Performance",)) as (page, cdp, lab):
        wb.open_notebook(page, lab)
        for trace in traces:
            for s in args.sets:
                def start():
                    cdp.send("Tracing.start", {"categories": CATS,
                                               "transferMode": "ReturnAsStream"})
                r = wb.play_through(page, cdp, trace, wb.SETS[s], before_click=start)
                events = fp._stop_trace(page, cdp)
                r["breakdown_per_tick"] = {b: round(v / r["ticks"], 1)
                                           for b, v in fp.breakdown(events).items()}
                r["per_tick"] = summary(events, r["ticks"])
                print(trace.name, s, json.dumps(r), flush=True)
                name = f"{trace.name.split('.')[0]}-{s}"
                (args.dir / f"{name}.json").write_text(json.dumps(
                    {"result": r, "events": events}))


if __name__ == "__main__":
    main()
