"""Broken traces: a bad file, format or record content is always one TraceError line naming the
file (and, for content, the step and the field); schema-1 traces (every shipped one) still
load and draw. Broken fixtures are made here in tmp_path, never committed. No vLLM needed."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from records_fixture import HEADER, RECORDS, make_record, raises

from da_lab.core.record import StepRecord
from da_lab.trace import load, save

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "traces").glob("*.jsonl.gz"))


def _schema(path) -> int:
    import gzip
    import json

    with gzip.open(path, "rt") as f:
        return json.loads(f.readline())["schema"]


# The traces recorded before schema 2 (newer ones are schema 2 from the start), and the first
# canonical seed trace, kept as the reader's schema-1 fixture since it was re-recorded.
SHIPPED_SCHEMA1 = [p for p in SHIPPED if _schema(p) == 1] + \
    [ROOT / "tests" / "data" / "seed_cpu_schema1.jsonl.gz"]

# ---------------------------------------------------------------------------------------------
# broken files: always a TraceError with a one-line message naming the file


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
    raises(p, "schema 7 is newer than this da_lab reads (2)")
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
    raises(p, "schema 7 is newer than this da_lab reads (2)")
    kindless = schema.with_metadata({b"da_lab.trace": b'{"schema":1}'})
    pq.write_table(pa.table({"step": [0], "record": ['{"step":0}']}, schema=kindless), p)
    raises(p, "not a da_lab trace", '"kind": "da_lab.trace"')
    ok = schema.with_metadata({b"da_lab.trace": b'{"kind":"da_lab.trace","schema":1}'})
    pq.write_table(pa.table({"step": [0, 1], "record": ['{"step":0}', "{oops"]}, schema=ok), p)
    raises(p, "record 1 is not JSON")
    pq.write_table(pa.table({"step": [5], "record": ['{"step":0}']}, schema=ok), p)
    raises(p, '"step" column says 5')
    pq.write_table(pa.table({"step": [0], "record": ['{"step":0,"requests":[7]}']}, schema=ok), p)
    raises(p, "record 0 (step 0: requests[0] is int, not an object)")
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
    assert [r.to_json() for r in load(upper)] == RECORDS[:1]



# ---------------------------------------------------------------------------------------------
# malformed record content in a file that is otherwise a good trace


def _schema1_file(tmp_path, mutate) -> Path:
    """The shipped CPU trace (schema 1) with one record changed by `mutate(dict)`."""
    lines = gzip.decompress((ROOT / "traces" / "seed_cpu.jsonl.gz").read_bytes()).splitlines()
    rec = json.loads(lines[5])
    mutate(rec)
    lines[5] = json.dumps(rec).encode()
    p = tmp_path / "bad.jsonl.gz"
    p.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    return p


BAD_CONTENT = [
    # each was a raw TypeError / KeyError out of `da-lab replay` before records were typed
    (lambda r: r.update(requests=[1]), "record 4 (step 4: requests[0] is int, not an object)"),
    (lambda r: r["requests"][0].pop("tag_buffer"), "step 4: requests[0].tag_buffer is missing"),
    (lambda r: r.update(added=[3]), "step 4: added[0] is int, not an object"),
    (lambda r: r["requests"][0].update(seq_len="817"), "requests[0].seq_len is str"),
    (lambda r: r["requests"][0].update(staged_row=[1, "x"]),
     "requests[0].staged_row is not a list of ints"),
    (lambda r: r["requests"][0].update(kept_logical=[0, 99]),
     "requests[0].kept_logical has blocks outside 0..25"),
    (lambda r: r.update(metadata=[1]), "step 4: metadata is list, not an object"),
    (lambda r: r["metadata"].update(seq_lens=7), "metadata.seq_lens is not a list of ints"),
    (lambda r: r.update(kv=[]), "step 4: kv is list, not dict"),
    (lambda r: r.update(wall_s="fast"), "step 4: wall_s is str"),
    # each was an OverflowError / AttributeError out of load, replay or export
    (lambda r: r["requests"][0].update(staged_row=[10 ** 30]),
     "requests[0].staged_row holds an int outside int32's range"),
    (lambda r: r["requests"][0].update(events=[1, "two"]),
     "requests[0].events[0] is int, not an object"),
    (lambda r: r.update(warnings=[{"kind": 3}]), "step 4: warnings[0].kind is not a string"),
]


@pytest.mark.parametrize("mutate,needle", BAD_CONTENT)
def test_malformed_record_content_is_one_line(tmp_path, mutate, needle):
    p = _schema1_file(tmp_path, mutate)
    raises(p, needle)


def test_replay_of_malformed_traces_says_one_line(tmp_path):
    """The CLI: a malformed record, and a header without the provenance replay prints."""
    bad = _schema1_file(tmp_path, lambda r: r["requests"][0].pop("tag_buffer"))
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    no_prov = save(tmp_path / "np.jsonl.gz", {"provenance": {"device": "cpu"}}, RECORDS)
    for path, needle in ((bad, "requests[0].tag_buffer is missing"),
                         (no_prov, "provenance lacks vllm, model, runner, block_size")):
        p = subprocess.run([sys.executable, "-m", "da_lab.cli", "replay", str(path)], env=env,
                           capture_output=True, text=True, timeout=120)
        err = p.stderr.strip()
        assert p.returncode == 2 and "\n" not in err and needle in err, p.stderr
        assert err.startswith(f"da-lab: {path}") and "Traceback" not in p.stderr


def test_bad_provenance_and_files_that_are_not_files_are_one_line_in_every_command(tmp_path):
    """A header field the diagrams compute with, and a FIFO (open() would wait forever for a
    writer): one `da-lab` line from load, replay and export, within seconds."""
    lines = gzip.decompress((ROOT / "traces" / "seed_cpu.jsonl.gz").read_bytes()).splitlines()
    header = json.loads(lines[0])
    header["provenance"]["block_size"] = "x"
    bad_bs = tmp_path / "bs.jsonl.gz"
    bad_bs.write_bytes(gzip.compress(b"\n".join([json.dumps(header).encode(), *lines[1:]])))
    fifo = tmp_path / "fifo.jsonl.gz"
    os.mkfifo(fifo)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for path, needle in ((bad_bs, "header.provenance.block_size is 'x', not an int >= 1"),
                         (fifo, "is a FIFO, not a trace file")):
        raises(path, needle)
        for cmd in (["replay", str(path)], ["export", str(path), "--out", str(tmp_path / "o")]):
            p = subprocess.run([sys.executable, "-m", "da_lab.cli", *cmd], env=env,
                               capture_output=True, text=True, timeout=120)
            err = p.stderr.strip().splitlines()
            assert p.returncode == 2 and needle in err[-1] and "Traceback" not in p.stderr, \
                (cmd, p.stderr)
    from da_lab.models.cache import fingerprint
    from da_lab.trace.tail import TraceTail

    with pytest.raises(Exception, match="is a FIFO"):
        TraceTail(fifo).read()
    assert len(fingerprint(tmp_path)) == 64          # skips the FIFO instead of blocking


# ---------------------------------------------------------------------------------------------
# schema 1: the shipped traces


def test_the_schema1_traces_are_still_shipped():
    assert len(SHIPPED_SCHEMA1) >= 3, SHIPPED_SCHEMA1


@pytest.mark.parametrize("path", SHIPPED_SCHEMA1, ids=lambda p: p.name)
def test_shipped_schema1_traces_load_and_keep_their_numbers(path):
    """Every number schema 1 stored is what the typed record derives, and the record goes on
    to schema 2 and back unchanged."""
    t = load(path)
    lines = gzip.decompress(path.read_bytes()).splitlines()
    assert t.header["schema"] == 1 and len(t) == len(lines) - 1 >= 40
    for raw, rec in zip(lines[1:], t.records, strict=True):
        d = json.loads(raw)
        assert rec.step == d["step"] and rec.scheduled == d["scheduled"]
        assert rec.kv == d["kv"] and rec.added == d["added"]
        for q, r in zip(d["requests"], rec.requests, strict=True):
            assert r.req == q["req"] and r.hooked == ("seq_len" in q)
            if not r.hooked:
                continue
            for k in ("row", "seq_len", "query_len", "attn_seq_len", "blocks_total",
                      "blocks_read", "mode", "tag_buffer", "directive", "built_seq_len",
                      "n_output_seen", "events"):
                assert getattr(r, k) == q[k], (path.name, rec.step, k)
            assert r.staged_row.tolist() == q["staged_row"]
            assert r.kept.tolist() == q["kept_logical"]
            assert r.kernel_row.tolist() == q["kernel_row"]
            assert r.read_row.tolist() == q["built_row"]
            assert r.new_token_ids == q.get("new_token_ids") and r.new_text == q.get("new_text")
        if d["metadata"] is not None:
            assert rec.metadata.to_json() == d["metadata"]
        assert StepRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_schema2_is_smaller_than_schema1():
    """Rows are stored once: the shipped 64k trace's records (a 2042-block row per step, 24
    of them unmasked) take 57% of their schema-1 JSON (the staged row stays; the copies go)."""
    path = ROOT / "traces" / "h200_8b_64k.jsonl.gz"
    lines = gzip.decompress(path.read_bytes()).splitlines()[1:]
    old = sum(len(json.dumps(json.loads(raw), separators=(",", ":"))) for raw in lines)
    new = sum(len(json.dumps(r.to_json(), separators=(",", ":"))) for r in load(path))
    assert new < 0.6 * old
