"""Reliability of the hook inside a real engine: preemption never lets masked K/V into the
prefix cache and is flagged where the user reads results; one bad request never stalls the
others; per-request state returns to zero after any number of requests."""

import gc

from da_lab.checks.lifecycles import one_round
from da_lab.checks.oracle import check
from da_lab.core.layout import build_prompt, seed_texts
from da_lab.engine.results import per_request_entries


def long_prompts(lab, n):
    """n seed-like prompts that share no prefix block with each other or the seed prompt."""
    head, chunks, tail = seed_texts()
    filler = lab.encode("\n")[0]
    return [build_prompt(lab.encode, f"Variant {k}. " + head, chunks, tail, filler_id=filler,
                         bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2) for k in range(n)]


def test_preemption_never_puts_masked_kv_in_the_prefix_cache(lab, reference):
    """64 blocks: a long request B grows until vLLM preempts the newer <local> request A and
    evicts A's last prompt blocks from the cache; A is later recomputed (prompt + outputs as
    one prefill past the cached prefix) under its current mask. A plain request with A's
    prompt must still match the unmasked reference (on the old code: 14 of 24 differed), and
    A is flagged where the user reads it."""
    lab.llm.reset_prefix_cache()
    seed, other = lab.seed_prompt(), long_prompts(lab, 1)[0]
    b = lab.add_request(other, tags=[(0, "<local>")], max_tokens=600)
    a = lab.add_request(seed, tags=[(0, "<local>")], max_tokens=200)
    lab.run()
    hist = lab.request_state(a).mask_history
    recomputed = [(s, e) for s, e, _ in hist if s > 0 and e - s > 1]
    assert recomputed and recomputed[0][0] < len(seed.token_ids), \
        "A's prompt was not recomputed: the test did not exercise the case"
    plain = lab.add_request(seed, max_tokens=24)
    lab.run()
    toks = lab.requests[plain]["token_ids"]
    ref = check(reference, seed.token_ids, toks, [], lab.block_size)
    assert ref.mismatches_masked == [], (toks, ref.masked_tokens)
    res = lab.result(a)
    assert res["recomputed_under_mask"] and not lab.result(b)["recomputed_under_mask"]
    assert res["flags"][0]["kind"] == "recompute_under_mask" and res["flags"][0]["message"]
    assert lab.request_state(a).recomputed_under_mask        # the hook's state says it too


def test_stall_bad_requests_do_not_stop_a_good_one(lab):
    """A layout the hook can't use and director ids outside the vocabulary, sent straight to
    vLLM (as a server would): each runs as plain attention with a da_refused warning, and the
    good request next to them finishes with the tokens of its solo run."""
    from vllm import SamplingParams

    seed = lab.seed_prompt()
    solo = lab.add_request(seed, tags=[(2, "<local>")], max_tokens=16)
    lab.run()
    vocab = lab.session.vocab_size
    assert vocab > 0
    layout = seed.layout.to_dict()
    bad = {"bad-layout": {"da_layout": {"block_size": 32}},
           "bad-tok-high": {"da_layout": layout, "da_director": [[1, [vocab + 5]]]},
           "bad-tok-neg": {"da_layout": layout, "da_director": [[1, [-5]]]},
           "bad-len": {"da_layout": dict(layout, prompt_len=805)}}
    good = lab.add_request(seed, tags=[(2, "<local>")], max_tokens=16)
    for da_id, extra in bad.items():
        lab.engine.add_request(da_id, {"prompt_token_ids": seed.token_ids}, SamplingParams(
            temperature=0, max_tokens=8, ignore_eos=True, extra_args=dict(extra, da_id=da_id)))
    recs = lab.run()
    assert not lab.has_unfinished()
    assert lab.requests[good]["token_ids"] == lab.requests[solo]["token_ids"]
    refused = {w["req"]: w["detail"] for rec in recs for w in rec.warnings
               if w["kind"] == "da_refused"}
    assert set(refused) == set(bad), refused
    assert "vocabulary" in refused["bad-tok-high"] and "prompt_len" in refused["bad-len"]
    finished = {r.req for rec in recs for r in rec.requests if r.finished}
    assert set(bad) <= finished                     # they ran to their end as plain requests
    assert lab.session.entries()["tracker.refused"] == 0   # and left nothing behind


def test_leak_per_request_state_returns_to_zero(lab):
    """1,000 lifecycles (steer then abort, abort after a step, run to the end): no running
    state is left, and the finished histories stay within their documented bounds."""
    head, chunks, tail = seed_texts(2)
    small = build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                         bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2)
    lab.keep_finished = 64
    lab.session.configure(keep_finished=64, keep_warnings=64)
    try:
        n = 0
        while n < 1000:
            n += one_round(lab, small, short_tokens=2)
        gc.collect()
        assert set(per_request_entries(lab).values()) == {0}, per_request_entries(lab)
        assert len(lab.requests) == 64
        assert lab.session.entries()["tracker.finished_over_bound"] == 0
        # A reused id starts clean: no stale steering script is forced into it.
        lab.add_request(small, max_tokens=12, request_id="again")
        lab.steer("again", "<local 1>")
        lab.abort("again")
        lab.add_request(small, max_tokens=12, request_id="again")
        lab.run()
        assert "<local" not in lab.requests["again"]["text"]
        assert not lab.request_state("again").ever_masked
    finally:
        lab.keep_finished = 256
        lab.session.configure(keep_finished=256, keep_warnings=256)


def test_a_preemption_right_after_a_tags_close_is_flagged(lab):
    """The `>` of `<focus C3>` is sampled, the tag machine has not read it yet (the request was
    never masked), and vLLM preempts the request: its recompute reads every block (a prefill
    keeps the blocks its query touches) where an uninterrupted run read FOCUS's, so the
    tokens differ from output 9 on. That must be flagged, as any recompute after a trapped
    tag is; a preempted request whose directive hides nothing is not flagged and equals its
    uninterrupted run."""
    seed = lab.seed_prompt()
    tag = "<focus C3>"
    n_tag = len(lab.encode(tag))

    def run(tags, preempt_after: int | None):
        lab.llm.reset_prefix_cache()
        da_id = lab.add_request(seed, tags=tags, max_tokens=24)
        while preempt_after is not None and len(lab.requests[da_id]["token_ids"]) < preempt_after:
            lab.step()
        if preempt_after is not None:
            st = lab.request_state(da_id)
            assert not st.ever_masked and (not tags or st.stream.buffer == tag[:-1])
            lab.llm.reset_prefix_cache(reset_running_requests=True)
        lab.run()
        return lab.requests[da_id]["token_ids"], lab.result(da_id)

    whole, res = run([(4, tag)], None)
    assert not res["recomputed_under_mask"]
    cut, res = run([(4, tag)], 4 + n_tag)
    assert cut != whole, "the preemption did not change the tokens: the case was not exercised"
    assert res["recomputed_under_mask"], res["flags"]
    assert res["flags"][0]["kind"] == "recompute_under_mask"
    plain_whole, _ = run([], None)
    plain_cut, res = run([], 4 + n_tag)
    assert plain_cut == plain_whole and not res["recomputed_under_mask"]


def _preempt_running(lab) -> list[str]:
    """vLLM's own preemption of every running request, as `reset_prefix_cache(
    reset_running_requests=True)` does it but leaving the prefix cache as it is: the scheduler
    frees their blocks and queues them to resume at the next step."""
    import time

    from da_lab.engine.access import engine_core

    sched = engine_core(lab.llm).scheduler
    ids = []
    while sched.running:
        request = sched.running.pop()
        sched._preempt_request(request, time.monotonic(), drop_stale_output=True)
        ids.append(request.request_id)
    sched.prev_step_scheduled_req_ids.clear()
    return ids


def test_a_preempted_da_request_never_resumes_on_another_requests_kv(lab):
    """Issue 57 F2. D is <local> from token 0; R is a plain request whose prompt is D's prompt
    plus D's solo output (the eval's A/B), so R's blocks, computed without D's mask, sit in the
    prefix cache under the hashes of D's own tokens. D runs again and vLLM preempts it (the
    scheduler's own preemption, called directly: no timing) after 84 outputs, where its
    computed positions end on a block boundary (813 + 84 - 1 = 28 blocks). Its resume must
    not take R's K/V past its prompt: it recomputes from its prompt's last full block and is
    flagged, so its tokens never differ without a flag. On the old code the resume found every
    computed position in R's blocks (one query token, no recompute, no flag)."""
    lab.llm.reset_prefix_cache()
    seed = lab.seed_prompt()
    n, cut = 120, 84
    solo = lab.add_request(seed, tags=[(0, "<local>")], max_tokens=n)
    lab.run()
    solo_toks = lab.requests[solo]["token_ids"]
    lab.add_request(seed.token_ids + solo_toks, max_tokens=1)      # R: plain, cached
    lab.run()
    d = lab.add_request(seed, tags=[(0, "<local>")], max_tokens=n)
    while len(lab.requests[d]["token_ids"]) < cut:
        lab.step()
    assert lab.requests[d]["token_ids"] == solo_toks[:cut]
    assert len(_preempt_running(lab)) == 1
    lab.run()
    bs, p = lab.block_size, len(seed.token_ids)
    resumed = [(s, e) for s, e, _ in lab.request_state(d).mask_history if s > 0 and s < e - 1]
    assert resumed, "D's resume recomputed nothing: it took R's K/V past its prompt"
    assert resumed[0][0] <= p // bs * bs, resumed       # from its prompt's last full block
    res = lab.result(d)
    assert res["recomputed_under_mask"] and res["flags"][0]["kind"] == "recompute_under_mask"
    toks = lab.requests[d]["token_ids"]
    assert len(toks) == n and (toks == solo_toks or res["flags"])
