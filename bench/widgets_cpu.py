"""Benchmark: what each diagram costs per step, for every shipped trace.

    .venv/bin/python bench/widgets_cpu.py [--out bench/results/widgets-cpu-DATE.json]

Replays each trace in `traces/` through the four diagrams (no engine, no browser: the Python
side of a Play tick, which is what the kernel pays per frame) and reports, per diagram and for
one whole tick (all four): the median and p95 milliseconds per step, and the bytes the kernel
sends to the front end per step (median, p95, max).

Bytes: outside a kernel every widget talks to a `comm.DummyComm`, which drops its messages.
Here its `publish_msg` JSON-encodes each message the way jupyter_client's session does
(json.dumps, ensure_ascii=False, UTF-8) plus the binary buffers, and counts the bytes; the
encoding runs inside the timed `show`, as it does in a real kernel. Step 0 (the first draw,
before the figure is on screen) is left out of the per-step statistics and reported apart.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "widgets"))
DIAGRAMS = ("skeleton", "blocks", "metadata_path", "da_hook")


class ByteMeter:
    """Counts what widgets publish to the front end (see the module doc)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.messages = 0

    def install(self) -> None:
        import comm

        meter = self

        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            body = json.dumps({"data": data, "metadata": metadata or {}}, ensure_ascii=False,
                              default=str).encode("utf8", errors="surrogateescape")
            meter.bytes += len(body) + sum(memoryview(b).nbytes for b in buffers or ())
            meter.messages += 1

        comm.DummyComm.publish_msg = publish_msg

    def take(self) -> tuple[int, int]:
        out = self.bytes, self.messages
        self.bytes = self.messages = 0
        return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def build(header: dict, hl) -> dict:
    from da_lab_widgets import (
        BlocksDiagram,
        DAHookDiagram,
        MetadataPathDiagram,
        SkeletonDiagram,
    )

    return {"skeleton": SkeletonDiagram(header, hl), "blocks": BlocksDiagram(header, hl),
            "metadata_path": MetadataPathDiagram(header, hl),
            "da_hook": DAHookDiagram(header, hl)}


def time_trace(path: Path, meter: ByteMeter) -> dict:
    from da_lab_widgets import Highlight, TraceSource

    src = TraceSource(path)
    diagrams = build(src.header, Highlight())
    meter.take()
    per = {k: {"ms": [], "bytes": [], "msgs": []} for k in (*diagrams, "tick")}
    for i in range(len(src.records)):
        t_all, b_all, m_all = 0.0, 0, 0
        for name, d in diagrams.items():
            t0 = time.perf_counter()
            d.show(src.records, i)
            dt = (time.perf_counter() - t0) * 1e3
            nb, nm = meter.take()
            for key, v in (("ms", dt), ("bytes", nb), ("msgs", nm)):
                per[name][key].append(v)
            t_all, b_all, m_all = t_all + dt, b_all + nb, m_all + nm
        for key, v in (("ms", t_all), ("bytes", b_all), ("msgs", m_all)):
            per["tick"][key].append(v)
    row = {"trace": path.name, "steps": len(src.records),
           "num_blocks": int(src.header["provenance"]["num_blocks"])}
    for name, d in per.items():
        ms, nb = d["ms"][1:], d["bytes"][1:]   # step 0 is the first draw: reported apart
        row[name] = {"median_ms": round(statistics.median(ms), 2),
                     "p95_ms": round(_pct(ms, .95), 2), "max_ms": round(max(ms), 2),
                     "median_bytes": int(statistics.median(nb)), "p95_bytes": _pct(nb, .95),
                     "max_bytes": max(nb), "messages_per_step": round(statistics.mean(
                         d["msgs"][1:]), 1),
                     "first_draw_ms": round(d["ms"][0], 2), "first_draw_bytes": d["bytes"][0]}
    return row


def unchanged_tick(path: Path, meter: ByteMeter) -> dict:
    """Bytes sent when a diagram is shown the step it already shows (nothing changed)."""
    from da_lab_widgets import Highlight, TraceSource

    src = TraceSource(path)
    diagrams = build(src.header, Highlight())
    i = len(src.records) // 2
    out = {}
    for name, d in diagrams.items():
        d.show(src.records, i)
        meter.take()
        d.show(src.records, i)
        out[name] = meter.take()[0]
    return out


def code_version() -> str:
    """The commit of the code measured (+ "-dirty" when the widgets differ from it)."""
    import subprocess

    def git(*a):
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True,
                              text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "widgets") else "")


def main() -> None:
    load0 = os.getloadavg()[0]
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    meter = ByteMeter()
    meter.install()
    paths = sorted((ROOT / "traces").glob("*.jsonl.gz"))
    rows = [time_trace(p, meter) for p in paths]
    for p, r in zip(paths, rows, strict=True):
        r["unchanged_tick_bytes"] = unchanged_tick(p, meter)
    doc = {"command": " ".join(["python", *sys.argv]), "code": code_version(),
           "machine": platform.machine(), "cpus": os.cpu_count(),
           "load_avg_1m_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "note": "per-step statistics leave out step 0 (the first draw); bytes are the JSON "
                   "of the widget comm messages plus binary buffers",
           "rows": rows}
    for r in rows:
        cells = "  ".join(f"{k} {r[k]['median_ms']:.1f}/{r[k]['p95_ms']:.1f} ms "
                          f"{r[k]['median_bytes'] / 1e3:.1f}/{r[k]['p95_bytes'] / 1e3:.1f} kB"
                          for k in (*DIAGRAMS, "tick"))
        print(f"{r['trace']:24s} {r['steps']:3d} steps  median/p95: {cells}")
        print(f"{'':24s} unchanged tick bytes: {r['unchanged_tick_bytes']}")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
