"""Record one Play per set with a DevTools trace (with stacks of forced layouts) and save the raw
events, for offline analysis (bench/play_dump.py --traces seed_cpu --sets pair_04 --dir D).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import frames_profile as fp  # noqa: E402
import widgets_browser as wb  # noqa: E402

CATS = fp.CATS + ",disabled-by-default-devtools.timeline.stack,blink.console"


def main() -> None:
    from playwright.sync_api import sync_playwright
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", nargs="*", default=["seed_cpu"])
    ap.add_argument("--sets", nargs="*", default=["pair_04"], choices=list(wb.SETS))
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    traces = [p for p in sorted((wb.ROOT / "traces").glob("*.jsonl.gz"))
              if p.name.startswith(tuple(args.traces))]
    with wb.Lab() as lab, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=wb.CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
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
                print(trace.name, s, json.dumps(r), flush=True)
                name = f"{trace.name.split('.')[0]}-{s}"
                (args.dir / f"{name}.json").write_text(json.dumps(
                    {"result": r, "events": events}))
        browser.close()


if __name__ == "__main__":
    main()
