"""The trace writer that encodes in a child process (da_lab.trace.process): the same file as
TraceWriter's, in order, nothing lost on close or when the writing process dies, errors
surfaced; and its array-reusing JSON encoder gives exactly json's text. No vLLM needed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.record import Metadata, RequestStep, StepRecord
from da_lab.trace import TraceError, TraceWriter, load
from da_lab.trace.format import compact_json
from da_lab.trace.process import ArrayReuseEncoder, ProcessTraceWriter

FORMATS = [".jsonl.gz", ".parquet"]
HEADER = {"provenance": {"device": "cpu", "note": "ünïcödé ✓"}}


def array_record(step: int) -> StepRecord:
    """A record as the Lab hands it over: block rows as read-only numpy arrays, the kept
    blocks shared, rows growing by a block every few steps; request r2's builder got another
    row than the hook computed."""
    row = np.arange(100, 120 + step // 4, dtype=np.int32)
    row.flags.writeable = False
    kept = np.array([0, 3, 4], dtype=np.int64)
    seq = 32 * len(row) - 5
    reqs = []
    for i in range(3):
        args = (f"r{i}", i, 32, seq, 1, {"mode": "focus", "chunks": [1], "recent": None},
                "", step, 0, [], row + i, kept)
        plain = RequestStep(*args)
        built = RequestStep.built_fields(plain.attn_seq_len,
                                         row[kept] if i == 2 else (row + i)[kept],
                                         plain.kernel_row)
        reqs.append(RequestStep(*args, **built, new_token_ids=[7], new_text="a\x00b ✓",
                                finished=False))
    md = Metadata(np.array([0, 1, 2, 3], dtype=np.int32), np.array([800, 801, 802], np.int32),
                  np.arange(3), (3, 64), 802, "CPU_ATTN", "CPUModelRunner")
    return StepRecord(step, 0.01, 5.0 + step, reqs,
                      {"assign": {"5": ["r0"]}, "free": [], "cached": [], "uncached": []},
                      md if step % 2 else None)


@pytest.mark.parametrize("ext", FORMATS)
def test_same_records_as_the_plain_writer(tmp_path, ext):
    recs = [array_record(s) for s in range(40)]
    with TraceWriter(tmp_path / f"plain{ext}", HEADER) as w:
        for r in recs:
            w.write(r)
    with ProcessTraceWriter(tmp_path / f"child{ext}", HEADER, max_pending=2) as w:
        for r in recs:
            w.write(r)
        assert w.count == 40 and w.header == load(tmp_path / f"plain{ext}").header
    plain, child = load(tmp_path / f"plain{ext}"), load(tmp_path / f"child{ext}")
    assert child.header == plain.header
    assert child.records == plain.records == recs
    assert recs[0].requests[2].built_row is not None and recs[0].requests[1].built_row is None
    assert [r.to_json() for r in child] == [json.loads(compact_json(r.to_json())) for r in recs]


def test_a_record_changed_after_write_is_written_as_it_was(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    rec = array_record(0)
    with ProcessTraceWriter(p, HEADER) as w:
        w.write(rec)
        rec.requests.clear()
    assert load(p).records[0] == array_record(0)


def test_errors_are_raised_by_write_or_close(tmp_path):
    with pytest.raises(TraceError, match="unknown trace format"):
        ProcessTraceWriter(tmp_path / "t.json", HEADER)
    with pytest.raises(TraceError, match="header must be a dict"):
        ProcessTraceWriter(tmp_path / "t.jsonl.gz", [1])
    (tmp_path / "d.jsonl.gz").mkdir()
    with pytest.raises(IsADirectoryError):              # as TraceWriter raises it
        ProcessTraceWriter(tmp_path / "d.jsonl.gz", HEADER)
    w = ProcessTraceWriter(tmp_path / "t.jsonl.gz", HEADER)
    with pytest.raises(TraceError, match='no integer "step"'):
        w.write({"requests": []})                        # checked here, before the child
    w.write({"step": 0, "requests": [], "kv": {"x": {1, 2}}})   # not JSON: the child finds out
    with pytest.raises(TypeError, match="not JSON-serializable"):
        w.close()
    with pytest.raises(TraceError, match="after close"):
        w.write({"step": 1, "requests": []})


@pytest.mark.parametrize("ext", FORMATS)
def test_nothing_written_is_lost_when_the_writer_dies(tmp_path, ext):
    """A process that records and dies without close(): the child still closes the file."""
    p = tmp_path / f"t{ext}"
    code = textwrap.dedent(f"""
        import os
        from da_lab.trace.process import ProcessTraceWriter
        w = ProcessTraceWriter({str(p)!r}, {{"provenance": {{}}}})
        for s in range(25):
            w.write({{"step": s, "requests": [{{"req": "r0", "new_token_ids": list(range(s)),
                                               "new_text": "", "finished": False}}]}})
        w.wait_sent()         # the feeder has handed every record to the child
        os._exit(3)           # no close(), no atexit
    """)
    # run() returns once the child, which shares our output pipes, has exited too.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 3, out.stderr
    assert [r.step for r in load(p)] == list(range(25))
    assert load(p)[24].requests[0].new_token_ids == list(range(24))


def test_writer_left_open_is_closed_at_exit(tmp_path):
    p = tmp_path / "t.parquet"
    code = textwrap.dedent(f"""
        from da_lab.trace.process import ProcessTraceWriter
        w = ProcessTraceWriter({str(p)!r}, {{"provenance": {{}}}})
        for s in range(7):
            w.write({{"step": s, "requests": []}})
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert [r.step for r in load(p)] == list(range(7))


arrays = st.builds(lambda xs, dt: np.array(xs, dtype=dt),
                   st.lists(st.integers(-2**31, 2**31 - 1), max_size=20),
                   st.sampled_from([np.int32, np.int64]))
values = st.one_of(arrays, st.integers(), st.text(max_size=8), st.none(),
                   st.lists(st.integers(), max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["staged_row", "kernel_row", "req", "x"]),
                                values, max_size=4), max_size=4),
       st.one_of(st.none(), st.dictionaries(st.sampled_from(["seq_lens", "backend"]), values)))
def test_array_reuse_encoder_gives_jsons_text(requests, metadata):
    enc = ArrayReuseEncoder()
    rec = {"step": 1, "requests": requests, "metadata": metadata}
    assert enc.dumps(rec) == compact_json(rec)
    assert enc.dumps(rec) == compact_json(rec)          # second time from its cache
    rec2 = {"step": 2, "requests": requests[::-1]}
    assert enc.dumps(rec2) == compact_json(rec2)


def test_a_detached_writer_outlives_a_killed_process_tree(tmp_path):
    """Issue 57 F3: vLLM's shutdown (SIGTERM or Ctrl-C to `da-lab serve`) SIGKILLs the engine's
    whole process tree at once, and the server's tests kill its process group: a server trace
    ended truncated ("gzip stream ended early"). A detached writer is in neither, so it reads
    what the pipe holds, closes the file, and `wait_closed` says when."""
    import os
    import signal

    import psutil

    from da_lab.trace.process import wait_closed

    p = tmp_path / "t.jsonl.gz"
    code = textwrap.dedent(f"""
        import sys, time
        from da_lab.trace.process import ProcessTraceWriter
        w = ProcessTraceWriter({str(p)!r}, {{"provenance": {{}}}}, detach=True)
        for s in range(25):
            w.write({{"step": s, "requests": []}})
        w.wait_sent()
        print("sent", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "sent"
        for child in psutil.Process(proc.pid).children(recursive=True):   # kill_process_tree
            child.kill()
        os.killpg(proc.pid, signal.SIGKILL)                                # and the group
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_closed(p, 60)
    assert [r.step for r in load(p)] == list(range(25))
