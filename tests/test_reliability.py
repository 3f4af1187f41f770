"""Reliability of the hook inside a real engine: preemption never lets masked K/V into the
prefix cache and is flagged where the user reads results; one bad request never stalls the
others; per-request state returns to zero after any number of requests."""

import gc

from da_lab.checks.oracle import check
from da_lab.core.layout import build_prompt, seed_texts


def long_prompts(lab, n):
    head, chunks, tail = seed_texts()
    filler = lab.encode("\n")[0]
    return [build_prompt(lab.encode, f"Variant {k}. " + head, chunks, tail, filler_id=filler,
                         bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2) for k in range(n)]


def test_preemption_never_puts_masked_kv_in_the_prefix_cache(lab, reference):
    """64 blocks and three long <local> requests: vLLM preempts and recomputes one (prompt +
    outputs as one prefill, under its current mask). A later plain request with the same
    prompt must still match the unmasked reference, and the preempted one is flagged."""
    lab.llm.reset_prefix_cache()
    prompts = long_prompts(lab, 3)
    rids = [lab.add_request(p, tags=[(0, "<local>")], max_tokens=400) for p in prompts]
    lab.run()
    results = [lab.result(r) for r in rids]
    flagged = [r for r in results if r["recomputed_under_mask"]]
    assert flagged, "no request was preempted while masked: the test did not exercise it"
    for res, p in zip(results, prompts):
        plain = lab.add_request(p, max_tokens=24)
        lab.run()
        toks = lab.requests[plain]["token_ids"]
        ref = check(reference, p.token_ids, toks, [], lab.block_size)
        assert ref.mismatches_masked == [], (res["request_id"], toks, ref.masked_tokens)
    f = flagged[0]
    assert f["flags"][0]["kind"] == "recompute_under_mask" and f["flags"][0]["message"]
    assert lab.request_state(f["request_id"]).recomputed_under_mask     # the hook's state too


def test_stall_bad_requests_do_not_stop_a_good_one(lab):
    """A layout the hook can't use and director ids outside the vocabulary, sent straight to
    vLLM (as a server would): each runs as plain attention with a da_refused warning, and the
    good request next to them finishes with the tokens of its solo run."""
    from vllm import SamplingParams

    seed = lab.seed_prompt()
    solo = lab.add_request(seed, tags=[(2, "<local>")], max_tokens=16)
    lab.run()
    vocab = lab.tracker.model_vocab_size
    assert vocab > 0
    layout = seed.layout.to_dict()
    bad = {"bad-layout": {"da_layout": {"block_size": 32}},
           "bad-tok-high": {"da_layout": layout, "da_director": [[1, [vocab + 5]]]},
           "bad-tok-neg": {"da_layout": layout, "da_director": [[1, [-5]]]},
           "bad-len": {"da_layout": dict(layout, prompt_len=805)}}
    n_warn = lab.tracker.warnings_total
    good = lab.add_request(seed, tags=[(2, "<local>")], max_tokens=16)
    for rid, extra in bad.items():
        lab.engine.add_request(rid, {"prompt_token_ids": seed.token_ids}, SamplingParams(
            temperature=0, max_tokens=8, ignore_eos=True, extra_args=dict(extra, da_id=rid)))
    recs = lab.run()
    assert not lab.has_unfinished()
    assert lab.requests[good]["token_ids"] == lab.requests[solo]["token_ids"]
    refused = {w["req"]: w["detail"] for w in lab.tracker.new_warnings(n_warn)
               if w["kind"] == "da_refused"}
    assert set(refused) == set(bad), refused
    assert "vocabulary" in refused["bad-tok-high"] and "prompt_len" in refused["bad-len"]
    finished = {r["req"] for rec in recs for r in rec.requests if r.get("finished")}
    assert set(bad) <= finished                     # they ran to their end as plain requests
    assert not lab.tracker.refused                  # and left nothing behind


def per_request_entries(lab):
    from da_lab.hook.director import LIVE

    t = lab.tracker
    return {"tracker.requests": len(t.requests), "tracker.refused": len(t.refused),
            "tracker.pending_outputs": len(t.pending_outputs), "director.LIVE": len(LIVE),
            "lab.running": sum(not r["finished"] for r in lab.requests.values()),
            "tracker.finished_over_bound": max(0, len(t.finished) - t.keep_finished),
            "lab.requests_over_bound": max(0, len(lab.requests) - lab.keep_finished),
            "tracker.warnings_over_bound": max(0, len(t.warnings) - t.keep_warnings)}


def test_leak_per_request_state_returns_to_zero(lab):
    """1,000 lifecycles (steer then abort, abort after a step, run to the end): no running
    state is left, and the finished histories stay within their documented bounds."""
    head, chunks, tail = seed_texts(2)
    small = build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                         bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2)
    lab.keep_finished = lab.tracker.keep_finished = lab.tracker.keep_warnings = 64
    try:
        n = 0
        while n < 1000:
            batch = [lab.add_request(small, max_tokens=12 if k % 3 == 0 else 2)
                     for k in range(30)]
            for rid in batch[::3]:
                lab.steer(rid, "<local 1>")
                lab.abort(rid)
            lab.step()
            for rid in batch[1::3]:
                lab.abort(rid)
            lab.run()
            n += len(batch)
        gc.collect()
        assert set(per_request_entries(lab).values()) == {0}, per_request_entries(lab)
        assert len(lab.requests) == 64 and len(lab.tracker.finished) <= 64
        # A reused id starts clean: no stale steering script is forced into it.
        lab.add_request(small, max_tokens=12, request_id="again")
        lab.steer("again", "<local 1>")
        lab.abort("again")
        lab.add_request(small, max_tokens=12, request_id="again")
        lab.run()
        assert "<local" not in lab.requests["again"]["text"]
        assert not lab.request_state("again").ever_masked
    finally:
        lab.keep_finished = lab.tracker.keep_finished = lab.tracker.keep_warnings = 256
