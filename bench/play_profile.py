"""Where Play's time goes in the page: one Play through a trace per set, with a DevTools trace
(main thread split into script, style + layout, paint, gc) and a sampling JS profile (self
time per function, top N) taken over the whole run.

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/play_profile.py \
        [--traces h200_8b] [--sets pair_04 player_only] [--top 25] [--out FILE.json]

Same page as bench/widgets_browser.py (JupyterLab + headless Chromium).
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


def self_times(profile: dict, top: int) -> list[tuple[str, float]]:
    """ms of self time per function (name @ file:line) from a CDP cpuProfile."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    deltas = profile.get("timeDeltas") or []
    out = collections.Counter()
    for sid, dt in zip(profile["samples"], deltas[1:] + [0], strict=False):
        cf = nodes[sid]["callFrame"]
        url = cf.get("url", "").rsplit("/", 1)[-1][:40]
        out[f"{cf.get('functionName') or '(anon)'} @ {url}:{cf.get('lineNumber', 0)}"] += dt
    return [(k, round(v / 1e3, 1)) for k, v in out.most_common(top)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", nargs="*", default=["h200_8b"])
    ap.add_argument("--sets", nargs="*", default=["pair_04"], choices=list(wb.SETS))
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    traces = wb.traces_named(args.traces)
    rows = []
    with wb.chromium_page(domains=("Performance", "Profiler")) as (page, cdp, lab):
        cdp.send("Profiler.setSamplingInterval", {"interval": 200})
        wb.open_notebook(page, lab)
        for trace in traces:
            for s in args.sets:
                state = {}

                def start(state=state):
                    cdp.send("Tracing.start", {"categories": fp.CATS,
                                               "transferMode": "ReturnAsStream"})
                    cdp.send("Profiler.start")
                    state["on"] = True
                r = wb.play_through(page, cdp, trace, wb.SETS[s], before_click=start)
                prof = cdp.send("Profiler.stop")["profile"]
                events = fp._stop_trace(page, cdp)
                ticks = r["ticks"]
                r.update(trace=trace.name, set=s, main_thread_ms_per_tick={
                    b: round(v / ticks, 1) for b, v in fp.breakdown(events).items()},
                    top_self_ms=self_times(prof, args.top))
                print(json.dumps(r, indent=1), flush=True)
                rows.append(r)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
