"""Where a Play's page time goes, cheaply (no DevTools trace): per set, one Play at 50 ms with
Chrome's own counters (Performance.getMetrics: script, style recalc, layout, all tasks) and
plotly.js's calls timed in the page (what each was asked, synchronous ms).

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/play_split.py \
        [--traces seed_cpu h200_8b] [--sets pair_04 player_only] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import frames_profile as fp  # noqa: E402
import widgets_browser as wb  # noqa: E402

METRICS = ("TaskDuration", "ThreadTime", "ProcessTime", "ScriptDuration", "RecalcStyleDuration",
           "LayoutDuration", "DevToolsCommandDuration")
COUNTS = ("LayoutCount", "RecalcStyleCount")
# CSS tried in the page (--css NAME): a <style> added before Play, removed after
CSS = {"none": "",
       "contain": ".da-dahook, .da-blocks, .da-player, .da-player-note, .da-stream, "
                  ".da-tag-buffer, .da-band-model, .da-band-hook, .da-band-kernel, "
                  ".da-blocks-read, .da-step-counter {contain: layout style paint;}",
       "output": ".jp-OutputArea-output {contain: layout style paint;}"}
# Kernel-side variants (--kernel NAME), set before each Play
KERNEL = {"as_is": "",
          "echo_on": "from da_lab_widgets.clock import StepClock\n"
                     "StepClock.class_traits()['value'].metadata['echo_update'] = True",
          "echo_off": "from da_lab_widgets.clock import StepClock\n"
                      "StepClock.class_traits()['value'].metadata['echo_update'] = False"}


def _metrics(cdp) -> dict:
    m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
    return {k: m[k] for k in METRICS + COUNTS}


def play_split(page, cdp, trace: Path, names: list[str], css: str = "none",
               kernel: str = "as_is") -> dict:
    state = {}
    if KERNEL[kernel]:
        out = page.evaluate(wb.KERNEL_EXEC, KERNEL[kernel])
        if "ERROR" in out:
            raise RuntimeError(out)
    page.evaluate("""(css) => { let s = document.getElementById('da-bench-css');
      if (!s) { s = document.createElement('style'); s.id = 'da-bench-css';
                document.head.appendChild(s); }
      s.textContent = css; }""", CSS[css])

    def start():
        key = json.loads(page.evaluate(wb.KERNEL_EXEC, "from da_lab_widgets.figure import "
                                       "_KEY; import json; print(json.dumps(_KEY))").strip())
        if names:
            page.evaluate(fp.INSTRUMENT, key)
        page.evaluate("window.__prof = []")
        state["m0"] = _metrics(cdp)
    r = wb.play_through(page, cdp, trace, names, before_click=start)
    m1 = _metrics(cdp)
    ticks = r["ticks"]
    r["chrome_ms_per_tick"] = {k.replace("Duration", ""): round(
        (m1[k] - state["m0"][k]) * 1e3 / ticks, 1) for k in METRICS}
    r["chrome_per_tick"] = {k: round((m1[k] - state["m0"][k]) / ticks, 1) for k in COUNTS}
    calls = collections.defaultdict(list)
    for c in page.evaluate("window.__prof || []"):
        if c["name"].endswith("settled"):
            continue
        lay = sorted(c.get("layout", []))
        lay = lay if len(lay) < 4 else [*lay[:3], f"...{len(lay)}"]
        calls[f"{c['name']} {sorted(c.get('data', []))} {lay}"].append(c["ms"])
    r["plotly_ms_per_tick"] = {k: [len(v), round(sum(v) / ticks, 2), round(max(v), 1)]
                               for k, v in sorted(calls.items(), key=lambda x: -sum(x[1]))}
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", nargs="*", default=["seed_cpu"])
    ap.add_argument("--sets", nargs="*", default=["pair_04", "player_only"],
                    choices=list(wb.SETS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--css", nargs="*", default=["none"], choices=list(CSS),
                    help="CSS variants, each played in turn (A/B on the same page)")
    ap.add_argument("--kernel", nargs="*", default=["as_is"], choices=list(KERNEL),
                    help="kernel-side variants, each played in turn")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    traces = wb.traces_named(args.traces)
    rows = []
    with wb.chromium_page(domains=("Performance",)) as (page, cdp, lab):
        wb.open_notebook(page, lab)
        for trace in traces:
            for _ in range(args.repeat):
                for s in args.sets:
                    for css in args.css:
                        for kern in args.kernel:
                            r = play_split(page, cdp, trace, wb.SETS[s], css, kern)
                            r.update(trace=trace.name, set=s, css=css, kernel=kern,
                                     load=round(os.getloadavg()[0], 2))
                            print(json.dumps(r), flush=True)
                            rows.append(r)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
