"""The typed step record (da_lab/core/record.py): schema-2 round trips with its numpy rows, the
numbers it derives instead of storing, and one-line errors for malformed content."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.record import Metadata, RecordError, RequestStep, StepRecord


@st.composite
def request_steps(draw, req: str) -> RequestStep:
    if draw(st.booleans()):             # a request the hook does not track: outputs only
        return RequestStep(req, new_token_ids=draw(st.lists(st.integers(0, 10**6), max_size=3)),
                           new_text=draw(st.text(max_size=5)), finished=draw(st.booleans()))
    bs = draw(st.sampled_from([1, 16, 32]))
    seq = draw(st.integers(1, 40 * bs))
    total = -(-seq // bs)
    staged = np.array(draw(st.lists(st.integers(0, 2**31 - 1), min_size=total,
                                    max_size=total)), dtype=np.int32)
    kept = draw(st.none() | st.sets(st.integers(0, total - 1), min_size=1, max_size=total - 1)
                .map(lambda s: np.array(sorted(s), dtype=np.int64))) if total > 1 else None
    args = (req, draw(st.integers(0, 63)), bs, seq, draw(st.integers(1, seq)),
            {"mode": draw(st.sampled_from(["global", "focus", "local"])),
             "chunks": [], "recent": None},
            draw(st.text(max_size=6)), draw(st.integers(0, 99)), draw(st.integers(0, 1)),
            [{"kind": "tag_trapped", "text": draw(st.text(max_size=8))}],
            staged if draw(st.booleans()) else None, kept)
    r = RequestStep(*args)
    if draw(st.booleans()):     # the builder saw it: the same row, or (rarely) another one
        other = draw(st.none() | st.just(np.array([7, 7], dtype=np.int32)))
        row = other if other is not None else r.kernel_row
        r = RequestStep(*args, **RequestStep.built_fields(r.attn_seq_len, row, r.kernel_row))
    return r


@st.composite
def step_records(draw) -> StepRecord:
    n = draw(st.integers(0, 3))
    md = draw(st.none() | st.builds(
        lambda q, s, m: Metadata(np.array(q, np.int32), np.array(s, np.int32),
                                 np.array(m, np.int64), (len(s), 64), max(s, default=0),
                                 "CPU_ATTN", "CPUModelRunner"),
        st.lists(st.integers(0, 99), max_size=4), st.lists(st.integers(0, 99), max_size=3),
        st.lists(st.integers(0, 2**40), max_size=4)))
    return StepRecord(draw(st.integers(-(2**63), 2**63 - 1)),
                      draw(st.floats(0, 10, allow_nan=False)),
                      draw(st.floats(0, 1e6, allow_nan=False)),
                      [draw(request_steps(f"r{i}")) for i in range(n)],
                      {"assign": {"3": ["r0"]}, "free": [1], "cached": [], "uncached": []},
                      md, [{"req": "r0", "prompt_len": 5}], [{"kind": "w", "req": "r0"}])


@settings(max_examples=200, deadline=None)
@given(step_records())
def test_schema2_round_trip_keeps_every_field_and_array(rec):
    d = json.loads(json.dumps(rec.to_json()))       # plain JSON, nothing numpy left
    back = StepRecord.from_json(d)
    assert back == rec and back.to_json() == d
    for a, b in zip(rec.requests, back.requests, strict=True):
        for k in ("staged_row", "kept_logical", "built_row", "kernel_row", "read_row"):
            x, y = getattr(a, k), getattr(b, k)
            assert (x is None) == (y is None) and (x is None or x.tolist() == y.tolist())
        assert (a.blocks_read, a.attn_seq_len, a.blocks_total) == \
            (b.blocks_read, b.attn_seq_len, b.blocks_total)


def test_derived_numbers():
    r = RequestStep("a", 0, 32, 100, 1, {"mode": "focus"}, staged_row=np.arange(10, 14,
                    dtype=np.int32), kept_logical=np.array([0, 3]))
    assert (r.blocks_total, r.blocks_kept, r.attn_seq_len, r.blocks_read) == (4, 2, 36, 2)
    assert r.kernel_row.tolist() == [10, 13] and r.mode == "focus" and r.hooked
    same = RequestStep.built_fields(36, np.array([10, 13], dtype=np.int32), r.kernel_row)
    assert same["built_row"] is None                                  # equal: not stored
    b = dataclasses.replace(r, **same)
    assert b.built_seq_len == 36 and b.read_row.tolist() == [10, 13]
    b = dataclasses.replace(r, **RequestStep.built_fields(36, np.array([10, 12], np.int32),
                                                          r.kernel_row))
    assert b.read_row.tolist() == [10, 12] and b.to_json()["built_row"] == [10, 12]
    g = RequestStep("b", 1, 32, 64, 64, {"mode": "global"})
    assert g.kept.tolist() == [0, 1] and g.blocks_read == 2 and "kept_logical" not in g.to_json()
    assert StepRecord(3, requests=[r, RequestStep("c")]).scheduled == [{"req": "a",
                                                                         "query_len": 1}]


@pytest.mark.parametrize("bad,needle", [
    ([], "a record is a JSON list"),
    ({"step": "1"}, "step ?: step is str"),
    ({"step": 1, "requests": [{"req": 5}]}, "step 1: requests[0].req is int, not str"),
    ({"step": 1, "requests": [{"req": "a", "seq_len": 5}]}, "step 1: requests[0].row is missing"),
    ({"step": 1, "requests": [{"req": "a", "row": 0, "block_size": 0, "seq_len": 5,
                               "query_len": 1}]}, "requests[0].block_size is 0, not > 0"),
    ({"step": 1, "metadata": {"seq_lens": [1.5]}}, "metadata.seq_lens is not a list of ints"),
])
def test_malformed_content_names_step_and_field(bad, needle):
    with pytest.raises(RecordError) as e:
        StepRecord.from_json(bad)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_record_module_needs_neither_torch_nor_vllm():
    code = ("import sys, da_lab.core.record; "
            "print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
