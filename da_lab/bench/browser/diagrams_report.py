"""The tables of bench/results/diagrams-browser-*.md from da_lab/bench/browser/diagrams_browser.py's
JSON: the
plotly path and the browser-drawn one side by side, per shipped trace and set (nothing is
measured here).

    python -m da_lab.bench.browser.diagrams_report bench/results/diagrams-browser-DATE.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _row(r: dict, path: str) -> str:
    p, press, drag = r["play"], r["press_ms"], r["drag"]
    sweep = drag.get("sweep")
    return (f"| {path} | {p['painted']}/{p['played']} ({p['painted_pct']}%), {p['steps_per_s']}/s "
            f"| {press['median']} / {press['p95']} | {drag['changed_frames_per_s']}"
            f" ({drag['distinct_steps_shown']}/{drag['steps']} steps)"
            + (f"; sweep {sweep['frames_per_s']} fps, {sweep['painted']}/{sweep['frames']}"
               if sweep else "") +
            f" | {r['bytes_to_page']['median']:.0f} / {r['bytes_to_page_mean']} "
            f"| {r['bytes_to_build']:,} | {r['bytes_per_step_total']:,} |")


def tables(doc: dict) -> str:
    paths = doc["paths"]
    out = ["| path | Play at 20/s: painted / played, rate | Step press → painted ms, median / "
           "p95 | slider drag: changed frames/s (steps shown) | bytes to page per press, "
           "median / mean | bytes to build the player | bytes per step, all in |",
           "|---|---|---|---|---|---|---|"]
    body = []
    traces = [r["trace"] for r in paths["new"]["rows"] if "trace" in r]
    for t in traces:
        for s in ("tour", "pair_04"):
            body.append(f"| **{t} · {s}** | | | | | | |")
            for path in ("old", "new"):
                if path in paths:
                    row = next(r for r in paths[path]["rows"] if r.get("trace") == t)
                    body.append(_row(row[s], path))
    live = ["", "Live (a Lab in the kernel, one lesson request of 40 tokens per set):", "",
            "| path | set | painted / engine steps played | steps/s | bytes to page per step |",
            "|---|---|---|---|---|"]
    for path in ("old", "new"):
        for r in (paths.get(path) or {}).get("rows", []):
            if "live" in r:
                live.append(f"| {path} | {r['live']} | {r['painted']}/{r['played']} "
                            f"({r['painted_pct']}%) | {r['steps_per_s']} | "
                            f"{r['bytes_to_page_per_step']:,} |")
    e = doc.get("exported_page")
    page = [] if not e else ["", f"Exported page of {e['trace']}: {e['bytes']:,} bytes, opened "
                             f"from file:// in {e['open_ms']} ms with {len(e['network_requests'])}"
                             f" network requests; Play at 20/s painted {e['play']['painted']}/"
                             f"{e['play']['played']} steps at {e['play']['steps_per_s']}/s."]
    return "\n".join(out + body + live + page) + "\n"


if __name__ == "__main__":
    print(tables(json.loads(Path(sys.argv[1]).read_text())))
