"""Microbenchmark: the engine-thread cost of recording a trace, at the size of the H200 bench
row (batch 64, 8k context, block size 16: rows of ~514 blocks; 33k KV blocks in the pool),
without an engine. vLLM's own scheduler objects (KVCacheBlock) stand in the pool; the DA
tracker, StepRecord and the trace writers are the real ones.

    .venv/bin/python bench/recording_cpu.py [--steps 512] [--format parquet]

Per decode step, in ms, each piece old way vs new way:
  kv      kvmap.snapshot + diff (whole pool)      vs  KVTracker.update (changed blocks only)
  hook    Tracker.rewrite with record_rows on, minus off (the rows' cost; old: lists)
  write   StepRecord.to_json + TraceWriter.write  vs  the record + ProcessTraceWriter.write
          (in this thread; the new writer's child process does the encoding meanwhile)
Rows grow by one block every 16 steps, as in decode. The engine itself is not simulated. At
least 512 steps are timed, so the writer's bounded queue (16 records) fills many times over and
a writer slower than the loop shows in write(). The writer child's own pace (ms per record:
from the first write until the file is closed, / records) is printed beside the engine-thread
cost: it must stay below the engine's step time, or write() waits for it.
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

from da_lab.bench.plan import bench_layout
from da_lab.engine import access, kvmap
from da_lab.engine.lab import step_record
from da_lab.hook.state import EXTRA_ID, EXTRA_LAYOUT, Tracker
from da_lab.trace import TraceWriter, load
from da_lab.trace.process import ProcessTraceWriter

BATCH, CONTEXT, BS = 64, 8192, 16
MIN_STEPS = 512


def pool_size(steps: int) -> int:
    """At least the H200 row's 33k blocks, and room for every request's growth."""
    return max(33_000, 1 + BATCH * (-(-(CONTEXT + steps) // BS) + 1))


class FakeEngine:
    """The scheduler-side objects kvmap reads, holding BATCH decoding requests."""

    def __init__(self, layout, pool: int) -> None:
        self.blocks = [access.kv_cache_block(i) for i in range(pool)]
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


def run_way(way: str, layout, steps: int, fmt: str, out: Path, res: dict) -> list:
    """`steps` decode steps recorded the old way (lists, in-thread writer) or the new one
    (arrays, child-process writer); per-piece times into `res` (ms); the new way's records."""
    def add(k, v):
        res.setdefault(k, []).append(v * 1e3)

    eng = FakeEngine(layout, pool_size(steps))
    tracker, tracker_off = Tracker(), Tracker()
    tracker_off.record_rows = False
    prev = kvmap.snapshot(eng)
    kv = kvmap.KVTracker(eng)
    path = out / f"{way}.{fmt}"
    writer = (TraceWriter if way == "old" else ProcessTraceWriter)(
        path, {"provenance": {"bench": "recording_cpu"}})
    live = []
    t_all = time.perf_counter()
    t_first = None
    for s in range(steps):
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
        t_first = t_first or t1
        writer.write(rec.to_json() if way == "old" else rec)
        t2 = time.perf_counter()
        tracker_off.reset_log()
        add(f"kv+record {way}", t1 - t0)
        add(f"write {way}", t2 - t1)
        if way == "new":
            live.append(rec)
    t_close = time.perf_counter()
    writer.close()
    t_end = time.perf_counter()
    res[f"close {way}"] = [(t_end - t_close) * 1e3]
    res[f"total {way}"] = [(t_end - t_all) * 1e3 / steps]
    # The writer's pace over the run: first write until its file is closed, per record.
    res[f"writer pace {way}"] = [(t_end - t_first) * 1e3 / steps]
    return live


def child_pace(live: list, fmt: str, out: Path) -> dict:
    """The child's own pace with nothing else running: every record at once, then close."""
    t0 = time.perf_counter()
    with ProcessTraceWriter(out / f"pace.{fmt}", {"provenance": {}}) as w:
        t1 = time.perf_counter()
        for rec in live:
            w.write(rec)
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return {"start_s": t1 - t0, "records": len(live), "all_s": t3 - t1,
            "ms_per_record": (t3 - t1) / len(live) * 1e3,
            "write_call_ms": (t2 - t1) / len(live) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=MIN_STEPS,
                    help=f"decode steps timed per way (default and minimum {MIN_STEPS})")
    ap.add_argument("--format", default="parquet", choices=("parquet", "jsonl.gz"))
    args = ap.parse_args()
    if args.steps < MIN_STEPS:
        raise SystemExit(f"--steps must be at least {MIN_STEPS}: fewer steps leave the "
                         "writer's 16-record queue unfilled and hide its pace")
    layout = bench_layout(CONTEXT, BS, response_tokens=args.steps)
    out = Path(tempfile.mkdtemp(prefix="rec-bench-"))
    res: dict[str, list[float]] = {}
    run_way("old", layout, args.steps, args.format, out, res)
    live = run_way("new", layout, args.steps, args.format, out, res)

    def same(records):      # everything but the measured times
        return [{k: v for k, v in r.to_json().items() if k not in ("hook_us", "wall_s")}
                for r in records]

    old, new = load(out / f"old.{args.format}"), load(out / f"new.{args.format}")
    assert same(old.records) == same(new.records) == same(live)
    print(f"batch {BATCH}, context {CONTEXT}, block size {BS}, pool {pool_size(args.steps)} "
          f"blocks, {args.steps} decode steps, {args.format}; ms per step (mean / max):")
    for k, v in res.items():
        print(f"  {k:18s} {np.mean(v):8.3f} {np.max(v):8.3f}")
    per_step = {w: np.mean(res[f"hook rows {w}"]) + np.mean(res[f"kv+record {w}"])
                + np.mean(res[f"write {w}"]) for w in ("old", "new")}
    pace = child_pace(live, args.format, out)
    print(f"engine-thread recording cost per step: old {per_step['old']:.2f} ms, "
          f"new {per_step['new']:.2f} ms ({per_step['old'] / per_step['new']:.0f}x less); "
          f"beside it the writer child's pace: {res['writer pace new'][0]:.2f} ms per record "
          f"during the run, {pace['ms_per_record']:.2f} ms per record alone; new writer close "
          f"(flush) {res['close new'][0]:.0f} ms")
    print(f"child process alone: start {pace['start_s']:.2f} s; {pace['records']} records "
          f"written and the file closed in {pace['all_s']:.2f} s ({pace['ms_per_record']:.1f} "
          f"ms per record; write() calls {pace['write_call_ms']:.1f} ms each)")
    for p in out.iterdir():
        os.unlink(p)
    out.rmdir()


if __name__ == "__main__":
    main()
