"""Benchmark: how long each diagram takes to draw one step, for every shipped trace.

    .venv/bin/python bench/widgets_cpu.py [--out bench/results/widgets-cpu-DATE.json]

Replays each trace in `traces/` through the four diagrams (no engine, no browser: the Python
side of a Play tick, which is what the kernel pays per frame) and prints the median and p95
milliseconds per step of each diagram, and of one whole tick (all four).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "widgets"))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def time_trace(path: Path) -> dict:
    from da_lab_widgets import (
        BlocksDiagram,
        DAHookDiagram,
        Highlight,
        MetadataPathDiagram,
        SkeletonDiagram,
        TraceSource,
    )

    src = TraceSource(path)
    hl = Highlight()
    diagrams = {"skeleton": SkeletonDiagram(src.header, hl),
                "blocks": BlocksDiagram(src.header, hl),
                "metadata_path": MetadataPathDiagram(src.header, hl),
                "da_hook": DAHookDiagram(src.header, hl)}
    per: dict[str, list[float]] = {k: [] for k in diagrams}
    tick: list[float] = []
    for i in range(len(src.records)):
        t_all = 0.0
        for name, d in diagrams.items():
            t0 = time.perf_counter()
            d.show(src.records, i)
            dt = (time.perf_counter() - t0) * 1e3
            per[name].append(dt)
            t_all += dt
        tick.append(t_all)
    row = {"trace": path.name, "steps": len(src.records)}
    for name, xs in {**per, "tick": tick}.items():
        row[name] = {"median_ms": round(statistics.median(xs), 2),
                     "p95_ms": round(_pct(xs, .95), 2)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = [time_trace(p) for p in sorted((ROOT / "traces").glob("*.jsonl.gz"))]
    doc = {"command": " ".join(["python", *sys.argv]), "machine": platform.machine(),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "rows": rows}
    for r in rows:
        cells = "  ".join(f"{k} {r[k]['median_ms']:.1f}/{r[k]['p95_ms']:.1f}"
                          for k in ("skeleton", "blocks", "metadata_path", "da_hook", "tick"))
        print(f"{r['trace']:28s} {r['steps']:4d} steps  median/p95 ms: {cells}")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
