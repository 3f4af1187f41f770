"""The frame-time figure: per-diagram browser step time for each shipped trace, before/after.

    python -m da_lab.bench.browser.frames_chart \\
        --before bench/results/widgets-browser-2026-12-01-before.json \\
        --after bench/results/widgets-browser-2026-12-01b.json \\
        --play-before bench/results/widgets-browser-2026-12-01b-before.json --out FILE.png

Reads `bench/widgets_browser.py` result files (nothing is measured here). Left: median (bar)
and p95 (tick) ms from a Step press to the page painted, per diagram and trace. Right: Play at
50 ms for notebook 04's pair, steps drawn per second (20 is every step), where recorded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

DIAGRAMS = ("skeleton", "blocks", "metadata_path", "da_hook", "pair_04")


def _rows(path: str) -> dict:
    rows = json.loads(Path(path).read_text())["rows"]
    return {r["trace"].removesuffix(".jsonl.gz"): r for r in rows if "(" not in r["trace"]}


def figure(before: dict, after: dict, play_before: dict | None = None) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], subplot_titles=(
        "Step press → painted, ms (bar: median, tick: p95)",
        "Play at 50 ms, notebook 04's pair: steps drawn / s"))
    traces = [t for t in after if t in before]
    for name, rows, colour, play_rows in (("before", before, "#bbbbbb", play_before or before),
                                          ("after", after, "#1f77b4", after)):
        x = [[t for t in traces for _ in DIAGRAMS], [d for _ in traces for d in DIAGRAMS]]
        med = [rows[t].get(d, {}).get("e2e_ms", {}).get("median") for t in traces
               for d in DIAGRAMS]
        p95 = [rows[t].get(d, {}).get("e2e_ms", {}).get("p95") for t in traces for d in DIAGRAMS]
        fig.add_bar(x=x, y=med, name=name, marker_color=colour, row=1, col=1,
                    error_y=dict(type="data", symmetric=False,
                                 array=[(p - m) if p and m else None
                                        for p, m in zip(p95, med, strict=True)]))
        play = [play_rows.get(t, {}).get("play_pair_04", {}).get("steps_shown_per_s")
                for t in traces]
        fig.add_bar(x=traces, y=play, name=name, marker_color=colour, showlegend=False,
                    row=1, col=2)
    fig.add_hline(y=20, line_dash="dot", row=1, col=2, annotation_text="every step")
    fig.update_layout(barmode="group", width=1500, height=520, margin=dict(t=60, b=140),
                      font=dict(size=11))
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--play-before", help="the Play rows' before, if another file has them")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    play_before = _rows(args.play_before) if args.play_before else None
    figure(_rows(args.before), _rows(args.after), play_before).write_image(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
