"""The GPU run's verdicts, from the case documents alone (so `--rescore` can apply them to an
earlier run's case files): engine vs the masked float32 and bfloat16 references (`score`), and
compiled vs eager by teacher forcing (`compare_graphs`)."""

from __future__ import annotations


def comparable_outputs(h1: list, h2: list) -> int:
    """How many leading output positions two runs of one stream computed under identical
    masks. Under async scheduling a tag can take effect one step later in one run than in the
    other; from that step on the two runs attend (and write KV) differently, so their tokens
    are no longer expected to agree."""
    def by_seq(h):   # seq_len -> kept blocks (a prefix-cache hit may shorten the prefill query)
        return {b: None if k is None else tuple(k) for a, b, k in h}
    m1, m2 = by_seq(h1), by_seq(h2)
    decode = [b for a, b, _ in h1 if b - a == 1]
    if not decode:
        return 0
    prompt_len = min(decode) - 1
    n = 0
    while prompt_len + n in m1 and prompt_len + n in m2 and \
            m1[prompt_len + n] == m2[prompt_len + n]:
        n += 1
    return n


def gap_stats(gaps: list[float]) -> dict:
    """How close to a tie the disagreements were: count, smallest and largest top-2 gap."""
    return {"n": len(gaps), "min": round(min(gaps), 4) if gaps else None,
            "max": round(max(gaps), 4) if gaps else None}


# The engine's own top-2 logit gap at or under which its choice is a bfloat16 rounding coin
# flip: two bf16 steps for logits in [8, 16). A wrong mask moves logits far more than this.
ENGINE_TIE = 0.0625


def score(case: dict, threshold: float) -> dict:
    """Engine vs the masked references. A mismatch: the engine differs from the float32
    reference where its gap is >= threshold, and from the bfloat16 reference too, and the
    engine's own top-2 gap (when recorded) is above ENGINE_TIE; a disagreement at an engine
    near-tie is counted apart (`engine_ties`)."""
    from da_lab.checks.oracle import disagreement_gaps

    compared = ties = mism = mism_fp32 = unmasked_diff = masked_steps = 0
    where, engine_ties, gaps = [], [], {"float32": [], "bfloat16": []}
    for name, r in case["requests"].items():
        forced = set(r["forced"])
        masked_steps += r["masked_steps"]
        gaps["float32"] += disagreement_gaps(r["tokens"], r["ref_masked"], r["gap"], forced)
        if "ref_masked_bf16" in r:
            gaps["bfloat16"] += disagreement_gaps(r["tokens"], r["ref_masked_bf16"],
                                                  r["gap_bf16"], forced)
        for i, tok in enumerate(r["tokens"]):
            if i in forced:
                continue
            unmasked_diff += r["ref_unmasked"][i] != tok
            if r["gap"][i] < threshold:
                ties += 1
                continue
            compared += 1
            if r["ref_masked"][i] != tok:
                mism_fp32 += 1
                if r.get("ref_masked_bf16", r["ref_masked"])[i] != tok:
                    eg = (r.get("engine_gap") or [])[i:i + 1]
                    at = {"at": f"{name}@{i}", "ref_gap_fp32": r["gap"][i],
                          "engine_gap": eg[0] if eg else None}
                    if eg and eg[0] is not None and eg[0] <= ENGINE_TIE:
                        engine_ties.append(at)
                    else:
                        mism += 1
                        where.append(at)
    ok_runner = case["runner_ran"] == case["runner"]
    passed = ok_runner and mism == 0 and compared > 0 and unmasked_diff > 0 and masked_steps > 0
    return {"passed": passed, "tokens_compared": compared, "near_ties": ties,
            "mismatches": mism, "mismatch_at": [w["at"] for w in where[:20]],
            "mismatch_gaps": where[:20], "engine_ties": len(engine_ties),
            "engine_tie_at": engine_ties[:20],
            "mismatches_fp32_alone": mism_fp32,
            "disagreement_gap_fp32": gap_stats(gaps["float32"]),
            "disagreement_gap_bf16": gap_stats(gaps["bfloat16"]),
            "unmasked_reference_differs_at": unmasked_diff, "masked_steps": masked_steps,
            "runner_as_asked": ok_runner}


def compare_graphs(eager: dict, case: dict, threshold: float) -> dict:
    """This case's greedy choice on the eager case's streams (teacher forcing) against the
    eager tokens, at every position the director did not write and that both runs computed
    under the same mask history. A difference counts where the eager run's float32 reference
    gap is >= threshold; near-tie differences are counted apart."""
    compared = diff = ties_diff = timing = 0
    where, gaps = [], []
    for name, r in case["requests"].items():
        e = eager["requests"].get(name)
        if e is None or "forced_argmax" not in r:
            continue
        forced = set(e["forced"])
        same = comparable_outputs(e["history"], r.get("forced_history", e["history"]))
        for i, (a, b) in enumerate(zip(e["tokens"], r["forced_argmax"], strict=False)):
            if i in forced:
                continue
            if i >= same:
                timing += 1
                continue
            compared += 1
            if a != b:
                gaps.append(e["gap"][i])
                # As in score(): a real difference needs both references on the eager side;
                # where the bfloat16 reference picks what the compiled run picked, the
                # position is a bf16 near-tie whatever the float32 gap says.
                bf16 = e.get("ref_masked_bf16", e["ref_masked"])[i]
                if e["gap"][i] >= threshold and bf16 != b:
                    diff += 1
                    where.append(f"{name}@{i}")
                else:
                    ties_diff += 1
    return {"eager_tokens_compared": compared, "eager_mismatches": diff,
            "eager_not_comparable_mask_timing": timing,
            "eager_mismatch_at": where[:20], "eager_near_tie_differences": ties_diff,
            "eager_difference_gap": gap_stats(gaps)}
