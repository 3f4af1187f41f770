"""Tests for da_lab.trace: save/load round trips, streaming, replay helpers, and loading without
vLLM or torch. Broken files are in test_trace_broken.py, the record itself in test_record.py.
No vLLM needed."""

from __future__ import annotations

import copy
import gzip
import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from records_fixture import FORMATS, HEADER, RECORDS, make_record, raises

from da_lab.core.record import RequestStep, StepRecord
from da_lab.trace import SCHEMA, Trace, TraceError, TraceWriter, load, save

ROOT = Path(__file__).resolve().parents[1]


def typed(recs: list[dict]) -> list[StepRecord]:
    return [StepRecord.from_json(r) for r in recs]


# ---------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("ext", FORMATS)
def test_round_trip_realistic(tmp_path, ext):
    recs = copy.deepcopy(RECORDS)
    p = save(tmp_path / f"run{ext}", HEADER, recs)
    assert p == tmp_path / f"run{ext}" and p.exists()
    assert [q.name for q in tmp_path.iterdir()] == [p.name]  # no temp file left behind
    t = load(p)
    assert t.header == HEADER
    assert all(isinstance(r, StepRecord) for r in t.records)
    assert [r.to_json() for r in t.records] == RECORDS   # exactly what was written
    assert t.records == typed(RECORDS)
    assert recs == RECORDS  # save did not mutate its input
    assert len(t) == 6 and t[2] == typed(RECORDS)[2] and t[-2:] == typed(RECORDS)[-2:]
    assert t.provenance["model"] == "da-tiny-v1"
    # the rows come back as numpy arrays of the documented dtypes
    r = t[1].requests[0]
    assert r.staged_row.dtype == np.int32 and r.kept_logical.dtype == np.int64
    assert t[0].requests[0].kept_logical is None and t[1].requests[0].blocks_read == 25


@pytest.mark.parametrize("ext", FORMATS)
def test_step_records_are_written_as_their_json(tmp_path, ext):
    recs = typed(RECORDS)
    t = load(save(tmp_path / f"s{ext}", HEADER, recs))
    assert t.records == recs and [r.to_json() for r in t] == RECORDS


@pytest.mark.parametrize("ext", FORMATS)
def test_header_kind_and_schema_filled_in(tmp_path, ext):
    bare = {"provenance": {"device": "cpu"}}
    t = load(save(tmp_path / f"a{ext}", bare, [{"step": 0, "requests": []}]))
    assert t.header == {"kind": "da_lab.trace", "schema": SCHEMA, "provenance": {"device": "cpu"}}
    assert SCHEMA == 2
    assert bare == {"provenance": {"device": "cpu"}}  # caller's dict untouched
    assert load(save(tmp_path / f"e{ext}", {}, [])).records == []  # empty trace is valid


@pytest.mark.parametrize("ext", FORMATS)
def test_numpy_values_are_written_as_json(tmp_path, ext):
    rec = {"step": 1, "requests": [{"req": "a", "row": np.int64(0), "block_size": 32,
                                    "seq_len": 40, "query_len": 1, "tag_buffer": "",
                                    "directive": {"mode": "global"},
                                    "staged_row": np.arange(3, 5, dtype=np.int32)}],
           "wall_s": np.float32(0.5)}
    t = load(save(tmp_path / f"n{ext}", HEADER, [rec]))
    assert t[0].wall_s == 0.5 and t[0].requests[0].staged_row.tolist() == [3, 4]


# ---------------------------------------------------------------------------------------------
# streaming writer


def test_parquet_row_groups_are_bounded_in_bytes(tmp_path, monkeypatch):
    import da_lab.trace.format as fmt

    monkeypatch.setattr(fmt, "ROW_GROUP_BYTES", 2000)
    recs = [make_record(i) for i in range(20)]
    p = save(tmp_path / "t.parquet", HEADER, recs)
    assert pq.ParquetFile(p).num_row_groups >= 3
    assert load(p).records == typed(recs)


@pytest.mark.parametrize("ext", FORMATS)
def test_writer_streams_many_records(tmp_path, ext):
    p = tmp_path / "sub" / f"big{ext}"  # parent folder is created
    recs = [{"step": i, "requests": [{"req": f"r{i % 3}", "new_token_ids": [i],
                                      "new_text": "x", "finished": False}], "wall_s": i / 7}
            for i in range(2500)]
    with TraceWriter(p, HEADER) as w:
        for r in recs:
            w.write(r)
        assert w.count == 2500
    w.close()  # idempotent
    with pytest.raises(TraceError, match="after close"):
        w.write(recs[0])
    if ext == ".parquet":
        pf = pq.ParquetFile(p)
        assert pf.num_row_groups == 3  # 1000 + 1000 + 500
        assert pf.schema_arrow.field("step").type == pa.int64()
        assert pf.schema_arrow.field("record").type == pa.string()
        assert json.loads(pf.metadata.metadata[b"da_lab.trace"]) == HEADER
        assert pf.metadata.row_group(0).column(1).compression == "ZSTD"
    else:
        lines = gzip.decompress(p.read_bytes()).decode().splitlines()
        assert len(lines) == 2501 and json.loads(lines[0]) == HEADER
        assert lines[1] == json.dumps(recs[0], separators=(",", ":"))  # compact JSON
    t = load(p)
    assert t.header == HEADER and t.records == typed(recs)


def test_jsonl_writer_flushes_each_record(tmp_path):
    # A crashed run (writer never closed) leaves every written step readable up to the cut.
    p = tmp_path / "live.jsonl.gz"
    w = TraceWriter(p, HEADER)
    for s in range(3):
        w.write(StepRecord.from_json(make_record(s)))
    data = p.read_bytes()  # what a crash would leave: no gzip trailer yet
    lines = zlib.decompressobj(31).decompress(data).splitlines()
    assert len(lines) == 4 and json.loads(lines[3]) == make_record(2)
    w.close()
    assert load(p).records == typed([make_record(s) for s in range(3)])
    crashed = tmp_path / "crashed.jsonl.gz"
    crashed.write_bytes(data)
    raises(crashed, "truncated", "after 3 records")


def test_writer_rejects_what_load_would_reject(tmp_path):
    with pytest.raises(TraceError, match="unknown trace format"):
        TraceWriter(tmp_path / "x.json", HEADER)
    with pytest.raises(TraceError, match="newer than this da_lab"):
        TraceWriter(tmp_path / "x.jsonl.gz", {"schema": SCHEMA + 1})
    with pytest.raises(TraceError, match="not a da_lab trace"):
        TraceWriter(tmp_path / "x.jsonl.gz", {"kind": "other"})
    with TraceWriter(tmp_path / "y.parquet", HEADER) as w:
        with pytest.raises(TraceError, match='integer "step"'):
            w.write({"step": "3", "requests": []})
        with pytest.raises(TraceError, match="outside 0..2251799813685247"):
            w.write({"step": 2**63, "requests": []})
        with pytest.raises(TraceError, match=r"step 1: requests\[0\].tag_buffer is missing"):
            w.write({"step": 1, "requests": [{"req": "a", "row": 0, "block_size": 32,
                                              "seq_len": 5, "query_len": 5,
                                              "directive": {"mode": "global"}}]})
        with pytest.raises(TypeError, match="not JSON-serializable"):
            w.write({"step": 1, "requests": [], "kv": {"free": {1, 2}}})
    assert load(tmp_path / "y.parquet").records == []
    # save() never leaves a half-written file, nor destroys an existing good one
    good = save(tmp_path / "z.jsonl.gz", HEADER, RECORDS)
    with pytest.raises(TypeError):
        save(good, HEADER, [RECORDS[0], {"step": 1, "requests": [], "kv": {"x": object()}}])
    assert load(good).records == typed(RECORDS)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["y.parquet", "z.jsonl.gz"]


# ---------------------------------------------------------------------------------------------
# replay helpers


def _req(req, mode, seq_len, **kw) -> RequestStep:
    return RequestStep(req, 0, 4, seq_len, 1, {"mode": mode}, **kw)


def test_to_pandas_rows_and_columns():
    recs = [
        StepRecord(0, 0.5, 10.0, [
            _req("r0", "global", 5, events=[], new_token_ids=[1], new_text="a", finished=False),
            _req("r1", "focus", 9, kept_logical=np.array([0, 2]),
                 events=[{"kind": "x"}, {"kind": "y"}])]),
        StepRecord(1),  # a step with no request gives no row
        StepRecord(2, 0.25, 0.0, [_req("r0", "local", 6, built_seq_len=6),
                                  RequestStep("r2", new_token_ids=[3], new_text="z",
                                              finished=True)]),
    ]
    df = Trace(HEADER, recs).to_pandas()
    assert list(df.columns) == ["step", "wall_s", "hook_us", "req", "mode", "tag_buffer", "seq_len",
                                "attn_seq_len", "blocks_total", "blocks_read", "new_text",
                                "n_events"]
    assert len(df) == 4
    assert df["step"].tolist() == [0, 0, 2, 2]
    assert df["req"].tolist() == ["r0", "r1", "r0", "r2"]
    assert df["mode"].tolist()[:3] == ["global", "focus", "local"] and df["mode"].isna()[3]
    assert df["seq_len"].tolist()[:3] == [5, 9, 6]
    assert df["attn_seq_len"].tolist()[:3] == [5, 5, 6]      # r1 hides one 4-token block
    assert df["blocks_total"].tolist()[:3] == [2, 3, 2]
    assert df["blocks_read"].tolist()[:3] == [2, 2, 2]
    assert df["wall_s"].tolist() == [0.5, 0.5, 0.25, 0.25]
    assert df["n_events"].tolist()[:3] == [0, 2, 0] and df["n_events"].isna()[3]
    assert df["new_text"].isna().tolist() == [False, True, True, False]
    assert str(df["seq_len"].dtype) == "Int64" and str(df["wall_s"].dtype) == "Float64"
    empty = Trace(HEADER, []).to_pandas()
    assert len(empty) == 0 and list(empty.columns) == list(df.columns)


def test_to_pandas_of_a_realistic_trace(tmp_path):
    df = load(save(tmp_path / "r.parquet", HEADER, RECORDS)).to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 6
    assert df["blocks_read"].tolist() == [26, 25, 24, 26, 25, 24]
    assert (df["n_events"] == 1).all() and (df["tag_buffer"] == "<foc").all()


def test_kv_map_replay():
    recs = [
        StepRecord(0, kv={"assign": {"1": ["r0"], "2": ["r0"], "3": ["r1"]},
                          "free": [], "cached": [1], "uncached": []}),
        StepRecord(1),  # nothing recorded
        StepRecord(2, kv={"assign": {"1": ["r0", "r2"], "4": ["r2"]},
                          "free": [3], "cached": [2, 3], "uncached": []}),
        StepRecord(3),
        StepRecord(4, kv={"assign": {"3": ["r3"]}, "free": [1, 2], "cached": [],
                          "uncached": [3]}),
    ]
    t = Trace(HEADER, recs)
    assert t.kv_map(-1) == {}
    s0 = {1: {"owners": ["r0"], "cached": True}, 2: {"owners": ["r0"], "cached": False},
          3: {"owners": ["r1"], "cached": False}}
    assert t.kv_map(0) == s0 and t.kv_map(1) == s0
    s2 = {1: {"owners": ["r0", "r2"], "cached": True}, 2: {"owners": ["r0"], "cached": True},
          3: {"owners": [], "cached": True}, 4: {"owners": ["r2"], "cached": False}}
    assert t.kv_map(2) == s2 and t.kv_map(3) == s2
    s4 = {1: {"owners": [], "cached": True}, 2: {"owners": [], "cached": True},
          3: {"owners": ["r3"], "cached": False}, 4: {"owners": ["r2"], "cached": False}}
    assert t.kv_map(4) == s4 and t.kv_map(10**9) == s4
    assert list(t.kv_map(4)) == [1, 2, 3, 4]  # int keys, sorted
    t.kv_map(4)[1]["owners"].append("zz")  # results are fresh copies
    assert t.kv_map(4) == s4


# ---------------------------------------------------------------------------------------------
# a laptop without vLLM / torch can load and replay a trace

BLOCKED_CHILD = textwrap.dedent("""
    import importlib.abc, json, sys

    BLOCKED = {"vllm", "torch", "transformers"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    for m in list(sys.modules):
        if m.partition(".")[0] in BLOCKED:
            del sys.modules[m]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("torch should have been blocked")

    from da_lab.trace import load

    jsonl, parquet = sys.argv[1:3]
    t = load(jsonl)
    # a .jsonl.gz trace needs only the standard library and numpy
    assert "pandas" not in sys.modules and "pyarrow" not in sys.modules, sorted(sys.modules)
    t2 = load(parquet)
    assert t.records == t2.records and t.header == t2.header
    df = t.to_pandas()
    out = {"n": len(t), "steps": [r.step for r in t], "model": t.provenance["model"],
           "rows": len(df), "kv": {str(k): v for k, v in t.kv_map(10).items()},
           "heavy": sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)}
    print(json.dumps(out))
""")


def test_loads_without_vllm_or_torch(tmp_path):
    recs = [make_record(s) for s in range(4)]
    j = save(tmp_path / "t.jsonl.gz", HEADER, recs)
    q = save(tmp_path / "t.parquet", HEADER, recs)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", BLOCKED_CHILD, str(j), str(q)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"n": 4, "steps": [0, 1, 2, 3], "model": "da-tiny-v1", "rows": 4,
                   "kv": {"3": {"owners": [], "cached": True}, "4": {"owners": [], "cached": True},
                          "5": {"owners": ["r0"], "cached": False},
                          "7": {"owners": [], "cached": False},
                          "8": {"owners": [], "cached": False}},
                   "heavy": []}
