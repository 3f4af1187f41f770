"""Microbenchmark: the engine-thread cost of recording a trace, at the size of the H200 bench
row (batch 64, 8k context, block size 16: rows of ~514 blocks; 33k KV blocks in the pool),
without an engine. vLLM's own scheduler objects (KVCacheBlock) stand in the pool; the DA
tracker, StepRecord and the trace writers are the real ones.

    .venv/bin/python bench/recording_cpu.py [--steps 64] [--format parquet]

Per decode step, in ms, each piece old way vs new way:
  kv      kvmap.snapshot + diff (whole pool)      vs  KVTracker.update (changed blocks only)
  hook    Tracker.rewrite with record_rows on, minus off (the rows' cost; old: lists)
  write   StepRecord.to_json + TraceWriter.write  vs  ProcessTraceWriter.write(StepRecord)
          (in this thread; the new writer's child process does the encoding meanwhile)
Rows grow by one block every 16 steps, as in decode. The engine itself is not simulated. The
child process's pace per record is printed last: it must stay below the engine's step time,
or write() waits for it (bounded queue).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from da_lab.bench.run import bench_layout  # noqa: E402
from da_lab.engine import kvmap  # noqa: E402
from da_lab.hook.state import EXTRA_ID, EXTRA_LAYOUT, Tracker  # noqa: E402
from da_lab.engine.lab import step_record  # noqa: E402
from da_lab.trace import TraceWriter, load  # noqa: E402
from da_lab.trace.process import ProcessTraceWriter  # noqa: E402

BATCH, CONTEXT, BS, POOL = 64, 8192, 16, 33_000


class FakeEngine:
    """The scheduler-side objects kvmap reads, holding BATCH decoding requests."""

    def __init__(self, layout) -> None:
        from vllm.v1.core.kv_cache_utils import KVCacheBlock

        self.blocks = [KVCacheBlock(i) for i in range(POOL)]
        self.blocks[0].is_null = True
        self.next = 1
        self.lists: dict[str, list] = {}
        reqs = {}
        for r in range(BATCH):
            rid = f"r{r}"
            self.lists[rid] = self.take(-(-CONTEXT // BS))
            extra = {EXTRA_ID: rid, EXTRA_LAYOUT: layout.to_dict()}
            reqs[rid] = types.SimpleNamespace(
                sampling_params=types.SimpleNamespace(extra_args=extra))
        pool = types.SimpleNamespace(blocks=self.blocks, enable_caching=False,
                                     cached_block_hash_to_block=None)
        stm = types.SimpleNamespace(req_to_blocks=self.lists)
        mgr = types.SimpleNamespace(block_pool=pool, coordinator=types.SimpleNamespace(
            single_type_managers=[stm]))
        self.scheduler = types.SimpleNamespace(kv_cache_manager=mgr, requests=reqs,
                                               finished_req_ids=set())

    def take(self, n: int) -> list:
        out = self.blocks[self.next:self.next + n]
        self.next += n
        return out

    def decode_step(self, seq_len: int) -> None:
        if (seq_len - 1) % BS == 0:          # every request starts a new block
            for blocks in self.lists.values():
                blocks.extend(self.take(1))

    def table(self) -> np.ndarray:
        width = max(len(b) for b in self.lists.values())
        t = np.zeros((BATCH, width), dtype=np.int32)
        for i, blocks in enumerate(self.lists.values()):
            t[i, :len(blocks)] = [b.block_id for b in blocks]
        return t


def hook_step(tracker: Tracker, eng: FakeEngine, seq_len: int, first: bool, lists: bool):
    rids = list(eng.lists)
    extra = [eng.scheduler.requests[r].sampling_params.extra_args if first else None
             for r in rids]
    table = eng.table()
    t0 = time.perf_counter()
    tracker.rewrite(rids, [None] * BATCH, extra, table.__getitem__,
                    np.full(BATCH, seq_len), np.ones(BATCH, dtype=np.int64))
    step = tracker.steps[-1]
    for rec in step.requests:     # what note_built adds: the built row (equal: not stored)
        rec.note_built(seq_len, rec.kernel_row)
        if lists and tracker.record_rows:   # the old hook made every row a Python list
            for row in (rec.staged_row, rec.kept, rec.kernel_row, rec.read_row):
                row.tolist()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--format", default="parquet", choices=("parquet", "jsonl.gz"))
    args = ap.parse_args()
    layout = bench_layout(CONTEXT, BS, response_tokens=args.steps)
    out = Path(tempfile.mkdtemp(prefix="rec-bench-"))
    res: dict[str, list[float]] = {}

    def add(k, v):
        res.setdefault(k, []).append(v * 1e3)

    for way in ("old", "new"):
        eng = FakeEngine(layout)
        tracker = Tracker()
        tracker_off = Tracker()
        tracker_off.record_rows = False
        prev = kvmap.snapshot(eng)
        kv = kvmap.KVTracker(eng)
        header = {"provenance": {"bench": "recording_cpu"}}
        path = out / f"{way}.{args.format}"
        writer = (TraceWriter if way == "old" else ProcessTraceWriter)(path, header)
        live = []
        t_all = time.perf_counter()
        for s in range(args.steps):
            seq_len = CONTEXT + s + 1
            eng.decode_step(seq_len)
            add(f"hook rows {way}", hook_step(tracker, eng, seq_len, s == 0, way == "old")
                - hook_step(tracker_off, eng, seq_len, s == 0, False))
            t0 = time.perf_counter()
            rec = step_record(s, 0.02, tracker.reset_log(), [], [])
            if way == "old":
                snap = kvmap.snapshot(eng)
                rec.kv = kvmap.diff(prev, snap)
                prev = snap
            else:
                rec.kv = kv.update()
            t1 = time.perf_counter()
            if way == "old":
                writer.write(rec.to_json())
            else:
                writer.write(rec)
            t2 = time.perf_counter()
            tracker_off.reset_log()
            add(f"kv+record {way}", t1 - t0)
            add(f"write {way}", t2 - t1)
            if way == "new":
                live.append(rec)
        t_close = time.perf_counter()
        writer.close()
        res[f"close {way}"] = [(time.perf_counter() - t_close) * 1e3]
        res[f"total {way}"] = [(time.perf_counter() - t_all) * 1e3 / args.steps]
    # The two files hold the same records.
    def same(records):      # everything but the measured times
        return [{k: v for k, v in r.to_json().items() if k not in ("hook_us", "wall_s")}
                for r in records]

    old, new = load(out / f"old.{args.format}"), load(out / f"new.{args.format}")
    assert same(old.records) == same(new.records) == same(live)
    print(f"batch {BATCH}, context {CONTEXT}, block size {BS}, pool {POOL} blocks, "
          f"{args.steps} decode steps, {args.format}; ms per step (mean / max):")
    for k, v in res.items():
        print(f"  {k:18s} {np.mean(v):8.3f} {np.max(v):8.3f}")
    per_step = {w: np.mean(res[f"hook rows {w}"]) + np.mean(res[f"kv+record {w}"])
                + np.mean(res[f"write {w}"]) for w in ("old", "new")}
    print(f"engine-thread recording cost per step: old {per_step['old']:.2f} ms, "
          f"new {per_step['new']:.2f} ms ({per_step['old'] / per_step['new']:.0f}x less); "
          f"new writer close (flush) {res['close new'][0]:.0f} ms")
    # The child's own pace: every record at once, then close (it must stay below the
    # engine's step time, or write() waits for it).
    t0 = time.perf_counter()
    with ProcessTraceWriter(out / f"pace.{args.format}", {"provenance": {}}) as w:
        t1 = time.perf_counter()
        for rec in live:
            w.write(rec)
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    print(f"child process: start {t1 - t0:.2f} s; {len(live)} records written and the file "
          f"closed in {t3 - t1:.2f} s ({(t3 - t1) / len(live) * 1e3:.1f} ms per record; "
          f"write() calls {(t2 - t1) / len(live) * 1e3:.1f} ms each)")
    for p in out.iterdir():
        os.unlink(p)
    out.rmdir()


if __name__ == "__main__":
    main()
