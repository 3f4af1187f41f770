"""The generalising DA retrieval task for SmolLM2 (da_lab.training.data.nl_gen over nl_domains,
nl_values, nl_docs, nl_local; the prompt and answer rule in nl_task): seeds and streams, the
domain split and held-out names, whole-block chunks in SmolLM2's chat template built by the one
shared prompt function, replies in the question's own words with values copied from the
documents, near-duplicate distractors, prose of varied shape, no-document questions, drills,
and the training mask (the hook's, via da_lab.training.trainer.train)."""

import re

import pytest

from da_lab.core.layout import BLOCK_SIZE
from da_lab.core.tags import Directive, Mode
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.data import nl_values as V
from da_lab.training.data import nl_words as W
from da_lab.training.data.nl_domains import question_forms
from da_lab.training.data.nl_gen import registry
from da_lab.training.data.task import first_tag

SMALL = {"context": (900, 1400), "n_chunks": (4, 10)}


@pytest.fixture(scope="module")
def tok():
    return N.tokens()


@pytest.fixture(scope="module")
def samples(tok):
    return [G.sample(3, i, G.HELDOUT, **SMALL) for i in range(80)]


@pytest.fixture(scope="module")
def extra_samples(tok):
    """Training samples that ask about a training-only domain (domains_extra)."""
    ss = [G.sample(3, i, split="train+extra", **SMALL) for i in range(160)]
    return [s for s in ss if s.meta["domain"] in G.extra()]


@pytest.fixture(scope="module")
def heldout_domains(tok):
    return [G.sample(3, i, G.HELDOUT, "heldout", **SMALL) for i in range(60)]


def test_sample_is_a_pure_function_of_seed_stream_split_and_index(tok):
    a, b = G.sample(5, 7, **SMALL), G.sample(5, 7, **SMALL)
    assert a.ids == b.ids and a.answer == b.answer and a.meta == b.meta
    assert G.sample(5, 8, **SMALL).ids != a.ids
    assert G.sample(6, 7, **SMALL).ids != a.ids
    assert G.sample(5, 7, G.HELDOUT, **SMALL).ids != a.ids
    assert G.sample(5, 7, split="heldout", **SMALL).ids != a.ids


def test_many_domains_and_whole_domains_held_out(samples, heldout_domains):
    train, held = registry()
    assert len(train) >= 20 and len(held) >= 5 and not set(train) & set(held)
    # the issue's own held-out domains are never trained on
    assert {"product", "moon", "club", "recipe", "company"} <= set(held)
    kinds = {a.kind for d in train.values() for a in d.attrs}
    assert kinds == {"person", "place", "year", "date", "quantity", "price", "count", "phrase"}
    for s in samples:
        assert set(s.meta["entity_domains"]) <= set(train)
    for s in heldout_domains:
        assert set(s.meta["entity_domains"]) <= set(held)
        assert s.kind == "local" or s.meta["domain"] in held
    assert len({s.meta["domain"] for s in samples if s.meta["domain"]}) >= 15


def test_held_out_names_and_values_are_disjoint_from_training_ones(samples):
    for k, pool in V.POOLS_RAW.items():
        assert not set(W.split(pool, True)) & set(W.split(pool, False)), k
    words_of = lambda held: set().union(*(set(v) for k, v in V.pools(held).items()  # noqa
                                          if k not in ("STEM", "SYL")))
    train_only = words_of(False) - words_of(True)
    held_stems = V.pools(True)["STEM"]
    for s in samples:
        vals = s.meta["values"] if s.kind != "local" else []   # "Lisbon": the GK answer
        words = {w for n in s.meta["names"] + vals for w in re.findall(r"\w+", n)}
        assert not words & train_only, (s.meta["names"], words & train_only)
    towns = [n for s in samples for n in s.meta["names"] if re.fullmatch(r"[A-Z][a-z]+", n)]
    assert towns and all(any(t.startswith(x) for x in held_stems) for t in towns
                         if any(t.startswith(x) for x in V.POOLS_RAW["STEM"]))


def test_training_person_names_are_partly_invented_held_out_ones_never(tok):
    import numpy as np
    real = set(V.POOLS_RAW["FIRST"]) | set(V.POOLS_RAW["SUR"])
    rng = np.random.default_rng(4)
    made = [V.invented(rng) for _ in range(400)]
    assert not set(made) & real and len(set(made)) > 300
    train = [V.draw(np.random.default_rng(i), "person", None, False)["raw"] for i in range(400)]
    parts = [x for r in train for x in r]
    share = sum(x not in real for x in parts) / len(parts)
    assert abs(share - V.P_INVENTED) < 0.06, share
    held = [V.draw(np.random.default_rng(i), "person", None, True)["raw"] for i in range(200)]
    held_parts = {x for r in held for x in r}
    assert held_parts <= set(W.split(V.POOLS_RAW["FIRST"], True)) | set(
        W.split(V.POOLS_RAW["SUR"], True))
    # a near neighbour keeps one part and changes the other, invented or not
    for i in range(100):
        a = V.draw(np.random.default_rng(i), "person", None, False)
        b = V.draw(np.random.default_rng(1000 + i), "person", None, False, near=a)
        same = [x == y for x, y in zip(a["raw"], b["raw"], strict=True)]
        assert b["text"] != a["text"] and sum(same) == 1


def test_chunks_are_whole_blocks_in_the_chat_template_of_the_shared_prompt(tok, samples):
    from transformers import AutoTokenizer

    from da_lab.models.tiny import model_path

    hf = AutoTokenizer.from_pretrained(model_path("smollm2"))
    before, after = tok.frame(N.SYSTEM)
    for s in samples[:12]:
        lay, ids = s.prompt.layout, s.prompt.token_ids
        assert ids == N.user_prompt(s.meta["documents"], s.meta["question"]).token_ids
        assert lay.prompt_len == len(ids) and lay.n_chunks == s.meta["n_chunks"]
        for c in range(1, lay.n_chunks + 1):
            r = lay.chunk_range(c)
            text = tok.decode(ids[r.start * BLOCK_SIZE: r.stop * BLOCK_SIZE])
            assert text.startswith(f"Document C{c}: ") and text.rstrip("\n") == text.strip()
        text = tok.decode(ids, skip_special_tokens=False)
        assert text.startswith(before + N.INTRO) and text.endswith(after)
        content = text[len(before): len(text) - len(after)]
        assert content.endswith("Question: " + s.meta["question"])
        msgs = [{"role": "system", "content": N.SYSTEM}, {"role": "user", "content": content}]
        assert hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == text


def test_sizes_cover_four_to_32_documents_and_600_to_6000_tokens(tok):
    ss = [G.sample(2, i) for i in range(40)]
    assert all(G.CHUNKS[0] <= s.meta["n_chunks"] <= G.CHUNKS[1] for s in ss)
    assert all(400 <= s.prompt.layout.prompt_len <= N.MAX_PROMPT for s in ss)
    assert max(s.prompt.layout.prompt_len for s in ss) > 4500
    assert min(s.prompt.layout.prompt_len for s in ss) < 1500
    assert {s.meta["n_chunks"] for s in ss} & {4, 5, 6} and max(s.meta["n_chunks"]
                                                                 for s in ss) > 20


def test_reply_is_tag_then_one_sentence_with_the_value_from_the_right_document(tok, samples,
                                                                             extra_samples):
    assert {s.kind for s in samples} == {"single", "multi", "local"}
    for s in samples + extra_samples:
        reply = tok.decode(s.response_ids, skip_special_tokens=False)
        assert reply == f"{s.tag} {s.answer}<|im_end|>"
        assert tok.decode(s.response_ids[s.tag_close:s.tag_close + 1]).endswith(">")
        d, end = first_tag(reply, s.prompt.layout.n_chunks)
        assert d == s.directive and end == len(s.tag)
        if s.kind == "local":
            assert s.directive == Directive(Mode.LOCAL)
            continue
        assert len(s.directive.chunks) == (1 if s.kind == "single" else 2)
        for v in s.meta["values"]:
            assert v in s.answer
            assert any(v in s.meta["documents"][c - 1] for c in s.directive.chunks)
        assert set(s.directive.chunks) <= set(s.meta["holders"])


def test_replies_use_only_the_questions_words_and_the_values(samples, heldout_domains,
                                                             extra_samples):
    """No reply borrows a word from a template: every word is in the question, the values or
    the plain function words (what `foreign_words` checks in the eval)."""
    for s in samples + heldout_domains + extra_samples:
        if s.kind == "local":
            continue
        assert N.foreign_words(s.answer, s) == []
        def stems(text):        # "serves" for "serve", "opened" for "open"
            return {re.sub(r"(?:ing|ed|es|s|e)$", "", w.lower()) if len(w) > 4 else w.lower()
                    for w in re.findall(r"[A-Za-z]+", text)}

        allowed = stems(s.meta["question"] + " " + " ".join(s.meta["values"]))
        words = stems(s.answer)
        assert words <= allowed | N.PLAIN_WORDS | {"s"}, words - allowed - N.PLAIN_WORDS
    train, _ = registry()
    for d in list(train.values()) + list(G.extra().values()):
        for a in d.attrs:
            assert len(question_forms(a)) >= 2, (d.key, a.key)


def test_training_only_domains_are_drawn_by_training_alone(extra_samples):
    """domains_extra: asked and used as distractors by `split="train+extra"` (finetune
    --extra-domains) only; no eval split draws them; not a held-out domain or a hand-written
    set's subject; no value shared with a held-out domain's pools."""
    import json

    from da_lab.training.data import domains_extra, domains_heldout

    train, held = registry()
    ext = G.extra()
    assert len(ext) >= 8 and not set(ext) & (set(train) | set(held))
    assert {d.key for d in G.domains("train")} == set(train)
    assert {d.key for d in G.domains("train+extra")} == set(train) | set(ext)
    for sp in ("train", "heldout"):
        for i in range(40):
            s = G.sample(3, i, G.HELDOUT, sp, **SMALL)
            assert not set(s.meta["entity_domains"]) & set(ext)
    assert len({s.meta["domain"] for s in extra_samples}) >= 6
    assert {s.kind for s in extra_samples} == {"single", "multi"}
    with open("bench/data/handwritten-prompts.jsonl") as f:
        subjects = {json.loads(line)["set"].rstrip("s") for line in f}
    assert not subjects & ({d.key for d in domains_extra.DOMAINS}
                           | {d.thing for d in domains_extra.DOMAINS})

    def pools(mod):
        return {v for d in mod.DOMAINS for a in d.attrs if isinstance(a.spec, tuple)
                and a.spec and isinstance(a.spec[0], str) for v in a.spec}

    assert pools(domains_extra) and not pools(domains_extra) & pools(domains_heldout)
    # what they teach: small counts of "people", two people of one domain per document
    people = [a for d in domains_extra.DOMAINS for a in d.attrs if a.count == "people"]
    assert people and all(a.spec[1] <= 60 for a in people)
    with pytest.raises(ValueError, match="unknown domain split"):
        G.domains("extra")


def test_targets_have_near_duplicates_in_other_documents(samples):
    def near(a, b):
        if a == b:
            return False
        wa, wb = set(a.split()), set(b.split())
        # a shared word, or a town of the same stem / a word of the same first syllable
        return bool(wa & wb) or any(x[:3] == y[:3] for x in wa for y in wb)

    for s in samples:
        for t in s.meta["targets"]:
            dups = [n for n in s.meta["names"] if near(t, n)]
            assert dups, (t, s.meta["names"])
        # no other document states a target's value of the asked attribute
        if s.kind != "local":
            assert len(s.meta["candidates"]) > len(s.keys)


def test_prose_varies_in_shape(samples):
    docs = [d for s in samples for d in s.meta["documents"]]
    first = [d.split("\n")[0] for d in docs]
    titled = [d for d in docs if "\n" in d and "." not in d.split("\n")[0][-1:]]
    assert 0.2 < len(titled) / len(docs) < 0.6
    names = [n for s in samples for n in s.meta["names"]]
    late = sum(not any(n in f.split(". ")[0] for n in names) for f in first)
    assert late / len(docs) > 0.1                         # the name is not in the first sentence
    assert sum(" It " in d or d.startswith("It ") for d in docs) / len(docs) > 0.3
    assert sum(", and " in d for d in docs) / len(docs) > 0.2
    assert any(re.search(r"\b\d{4}\b", d) for d in docs)


def test_no_document_questions_are_of_several_kinds(tok):
    from da_lab.training.data.nl_local import local_question

    rng = G.rng_for(1, 0, 0)
    qs = [local_question(rng, False) for _ in range(300)]
    for q, r, vals in qs:
        m = re.match(r"(?:What is|How much is|Compute|Quick sum:) (\d+) (plus|minus|times|"
                     r"divided by) (\d+)", q)
        if m:
            x, op, y = int(m.group(1)), m.group(2), int(m.group(3))
            want = {"plus": x + y, "minus": x - y, "times": x * y,
                    "divided by": x // y if y else None}[op]
            assert vals == [str(want)] and r.endswith(f" is {want}.")
        assert all(v in r for v in vals)
    assert sum(not v for _, _, v in qs) > 20                        # chit-chat
    assert any("alphabetical" in q for q, _, _ in qs) and any("capital" in q for q, _, _ in qs)


def test_answers_normalise_and_match_exactly(tok, samples):
    assert N.normalise("<focus C3> The answer is 12,400!") == "answer is 12400"
    assert N.normalise("An  Editor's  desk.") == "editor s desk"
    for s in samples:
        assert N.answer_correct(s.answer, s), (s.answer, s.keys)
        assert N.answer_correct(f"{s.tag} {s.answer}<|im_end|>", s)
        if s.keys:
            assert not N.answer_correct("I do not know.", s)
    single = next(s for s in samples if s.kind == "single" and len(s.meta["candidates"]) > 2)
    right = single.meta["values"][0]
    wrong = next(c for c in single.meta["candidates"] if c != N.normalise(right))
    assert N.answer_correct(f"It is {right}.", single)
    assert not N.answer_correct(f"It is {wrong}.", single)
    assert not N.answer_correct(f"It is {right} or {wrong}.", single)
    assert N.answer_correct(f"It is Dr. X or {right}.", single)   # "Dr." ends no sentence
    multi = next(s for s in samples if s.kind == "multi")
    a, b = multi.meta["values"]
    assert N.answer_correct(f"{a} and {b}.", multi)
    assert not N.answer_correct(f"{b} and {a}.", multi) or N.normalise(a) == N.normalise(b)
    assert not N.answer_correct(f"Not sure. {a} and {b}.", multi)    # first sentence only


def test_plain_prompt_is_the_documents_without_padding(tok, samples):
    s = samples[0]
    text = tok.decode(N.plain_prompt(s, tok), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert "\n\n\n" not in text and "Answer in one sentence." in text
    assert all(c.strip() in text for c in s.prompt.chunks)


def test_drills_add_question_turns_under_the_hooks_mask(tok):
    s = G.make_sample(G.rng_for(0, 0, 5), turns=3, **SMALL)
    text = tok.decode(s.response_ids, skip_special_tokens=False)
    assert text.count("<|im_start|>user\n<global> Question: ") == 2
    assert [d.mode for _, d in s.tags][1::2] == [Mode.GLOBAL, Mode.GLOBAL]
    for close, _ in s.tags:
        assert tok.decode(s.response_ids[close:close + 1]).endswith(">")
    given = [t for t, w in zip(s.response_ids, s.written, strict=True) if not w]
    assert "Question:" in tok.decode(given) and "<global>" in tok.decode(given)
    learned = tok.decode([t for t, w in zip(s.response_ids, s.written, strict=True) if w],
                         skip_special_tokens=False)
    assert "Question:" not in learned and learned.count("<|im_end|>") == 3


def test_drills_ask_only_facts_their_documents_hold_one_or_two_at_a_time(tok):
    kinds = {0: 0, 1: 0, 2: 0}
    for i in range(40):
        s = G.make_sample(G.rng_for(1, 0, i), turns=3, mix=G.TRAIN_MIX, **SMALL)
        docs, drills = s.meta["documents"], s.meta["drills"]
        assert len(drills) == 2
        focus = [d for _, d in s.tags][2::2]
        for d, tag in zip(drills, focus, strict=True):
            kinds[len(d["chunks"])] += 1
            assert list(tag.chunks) == d["chunks"]
            if not d["chunks"]:
                assert tag.mode is Mode.LOCAL
                continue
            # every value is in a named document, every named document holds one
            assert N.holders([docs[c - 1] for c in d["chunks"]], d["values"])
            for c in d["chunks"]:
                assert N.holders([docs[c - 1]], d["values"]), (c, d)
            for v in d["values"]:
                assert N.holders([docs[c - 1] for c in d["chunks"]], [v]), (v, d)
                assert v in d["reply"]
            if len(d["chunks"]) == 2:
                assert len({N.normalise(v) for v in d["values"]}) == 2
    assert min(kinds.values()) >= 5, kinds


def test_the_training_mix_changes_training_samples_only(tok):
    # held-out prompts (the eval's) keep P_LOCAL / P_MULTI; mix=None is that mix too
    a = G.make_sample(G.rng_for(0, 0, 3), **SMALL)
    assert G.make_sample(G.rng_for(0, 0, 3), mix=(G.P_LOCAL, G.P_MULTI), **SMALL).ids == a.ids
    kinds = [G.make_sample(G.rng_for(0, 0, i), mix=(0.0, 1.0), **SMALL).kind for i in range(8)]
    assert kinds == ["multi"] * 8
    assert G.TRAIN_MIX[1] > G.P_MULTI


def test_training_mask_equals_the_oracle_mask_of_the_hook_history(tok, samples):
    import torch

    from da_lab.checks.oracle import mask_matrix
    from da_lab.training.trainer import train as R

    drill = G.make_sample(G.rng_for(0, 0, 5), turns=3, **SMALL)
    part = [s for s in samples if s.kind == "multi"][:1] + samples[:2] + [drill]
    b = R.collate(part, tok.pad_id, BLOCK_SIZE)
    dense = R.dense_mask(torch.from_numpy(b["row_seg"]), torch.from_numpy(b["seg_visible"]),
                         b["ids"].shape[1], BLOCK_SIZE)[:, 0].numpy()
    for k, s in enumerate(part):
        n = len(s.ids)
        ref = mask_matrix(n, R.hook_history(s.prompt.layout, s.all_tags, n), BLOCK_SIZE)
        assert (dense[k, :n, :n] == ref).all()
        P = s.prompt.layout.prompt_len
        targets = b["targets"][k]
        assert (targets[: P - 1] == -100).all()
        assert ((targets[P - 1: n - 1] >= 0) == list(s.written)).all()


def test_training_only_facts_never_answer_an_eval_question():
    """GK_TRAINING widens what training answers from the model's own knowledge; it must not
    teach a held-out or hand-written local question's answer (or its question)."""
    import json
    from pathlib import Path

    from da_lab.training.data import nl_local as L
    from da_lab.training.data import nl_words as W

    held = [(q, v) for q, _, v in W.split(L.GK, True)]
    hand_file = Path(__file__).resolve().parents[1] / "bench" / "data" / "handwritten-prompts.jsonl"
    hand = [json.loads(line) for line in hand_file.read_text().splitlines() if line.strip()]
    held += [(r["question"], a) for r in hand if not r["needs"] for a in r["answer"]]
    norm = N.normalise
    train_q = {norm(q) for q, _, _ in L.GK_TRAINING}
    train_v = {norm(v) for _, _, v in L.GK_TRAINING}
    for q, v in held:
        assert norm(q) not in train_q and norm(v) not in train_v, (q, v)
    assert all(v in r for _, r, v in L.GK_TRAINING)
    rng = G.rng_for(3, 0, 0)
    asked = {norm(L.local_question(rng, True)[0]) for _ in range(400)}
    assert not asked & train_q
