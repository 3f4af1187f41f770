"""The natural-language DA retrieval task for SmolLM2 (da_lab.training.nl_task): seeds and
streams, held-out names, whole-block chunks in SmolLM2's chat template, the reply, the answer
check, and the training mask (the hook's, via da_lab.training.train)."""

import re

import pytest

from da_lab.core.layout import BLOCK_SIZE
from da_lab.core.tags import Directive, Mode
from da_lab.training import nl_task as N
from da_lab.training import nl_words as W
from da_lab.training.task import first_tag

SMALL = {"context": 1024, "n_chunks": (8, 10)}


@pytest.fixture(scope="module")
def tok():
    return N.tokens()


@pytest.fixture(scope="module")
def samples(tok):
    return [N.sample(3, i, N.HELDOUT, **SMALL) for i in range(60)]


def test_sample_is_a_pure_function_of_seed_stream_and_index(tok):
    a, b = N.sample(5, 7, **SMALL), N.sample(5, 7, **SMALL)
    assert a.ids == b.ids and a.answer == b.answer and a.meta == b.meta
    assert N.sample(5, 8, **SMALL).ids != a.ids
    assert N.sample(6, 7, **SMALL).ids != a.ids
    assert N.sample(5, 7, N.HELDOUT, **SMALL).ids != a.ids


def test_held_out_names_are_disjoint_from_training_names(tok):
    for part in ("FIRST_NAMES", "SURNAMES", "TOWN_STEMS"):
        pool = getattr(W, part)
        assert not set(W.split(pool, True)) & set(W.split(pool, False))
        assert set(W.split(pool, True)) | set(W.split(pool, False)) == set(pool)

    def parts(name):
        if " " in name:
            return set(name.split(" "))
        return {next(s for s in W.TOWN_STEMS if name.startswith(s))}

    train = set().union(*(parts(n) for i in range(30) for n in N.sample(1, i, **SMALL)
                          .meta["names"]))
    held = set().union(*(parts(n) for s in N.held_out(30, **SMALL) for n in s.meta["names"]))
    assert train and held and not train & held


def test_chunks_are_whole_blocks_in_the_chat_template(tok, samples):
    from transformers import AutoTokenizer

    from da_lab.engine.models import model_path

    hf = AutoTokenizer.from_pretrained(model_path("smollm2"))
    before, after = tok.frame(N.SYSTEM)
    for s in samples[:12]:
        lay, ids = s.prompt.layout, s.prompt.token_ids
        assert lay.prompt_len == len(ids) and lay.n_chunks == s.meta["n_chunks"]
        for c in range(1, lay.n_chunks + 1):
            r = lay.chunk_range(c)
            text = tok.decode(ids[r.start * BLOCK_SIZE: r.stop * BLOCK_SIZE])
            assert text.startswith(f"Document C{c}: ") and text.rstrip("\n") == text.strip()
        assert lay.head_blocks * BLOCK_SIZE + sum(lay.chunk_blocks) * BLOCK_SIZE < len(ids)
        text = tok.decode(ids, skip_special_tokens=False)
        assert text.startswith(before + N.INTRO) and text.endswith(after)
        content = text[len(before): len(text) - len(after)]
        assert content.endswith("Question: " + s.meta["question"])
        msgs = [{"role": "system", "content": N.SYSTEM}, {"role": "user", "content": content}]
        assert hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == text


def test_sizes_cover_one_to_seven_thousand_tokens_in_8_to_32_chunks(tok):
    ss = [N.sample(2, i) for i in range(12)] + [N.sample(2, 0, context=7168)]
    for s in ss:
        assert N.CHUNKS[0] <= s.meta["n_chunks"] <= N.CHUNKS[1]
        assert 800 <= s.prompt.layout.prompt_len <= N.MAX_PROMPT
    assert max(s.prompt.layout.prompt_len for s in ss) > 6000
    assert min(s.prompt.layout.prompt_len for s in ss) < 3000


def test_reply_is_tag_then_one_sentence_and_names_the_right_chunks(tok, samples):
    kinds = {s.kind for s in samples}
    assert kinds == {"single", "multi", "local"}
    for s in samples:
        reply = tok.decode(s.response_ids, skip_special_tokens=False)
        assert reply == f"{s.tag} {s.answer}<|im_end|>"
        assert tok.decode(s.response_ids[s.tag_close:s.tag_close + 1]).endswith(">")
        d, end = first_tag(reply, s.prompt.layout.n_chunks)
        assert d == s.directive and end == len(s.tag)
        if s.kind == "local":
            assert s.directive == Directive(Mode.LOCAL)
            continue
        assert len(s.directive.chunks) == (1 if s.kind == "single" else 2)
        for c in s.directive.chunks:
            assert s.prompt.chunks[c - 1].startswith(f"Document C{c}: ")
        for v in s.meta["values"]:
            assert any(v in s.prompt.chunks[c - 1] for c in s.directive.chunks)
        # Only the chunks asked about hold the asked values of that attribute: reading a wrong
        # chunk gives a wrong answer.
        assert s.meta["holders"] == list(s.directive.chunks)


def test_distractors_are_near_duplicates_in_other_chunks(tok, samples):
    def near(a, b):
        if " " in a:
            return a != b and bool(set(a.split(" ")) & set(b.split(" ")))
        stem = next(x for x in W.TOWN_STEMS if a.startswith(x))
        return a != b and b.startswith(stem) and " " not in b

    def homes(s, name):
        pat = re.compile(r"\b" + re.escape(name) + r"\b")
        return {k for k, text in enumerate(s.prompt.chunks, 1) if pat.search(text)}

    for s in samples:
        for t in s.meta["targets"]:
            home = homes(s, t)
            assert len(home) == 1 and home <= set(s.directive.chunks)
            dups = [n for n in s.meta["names"] if near(t, n)]
            assert dups, (t, s.meta["names"])
            for n in dups:
                assert homes(s, n) and not homes(s, n) & home


def test_answers_normalise_and_match_exactly(tok, samples):
    assert N.normalise("<focus C3> The answer is 12,400!") == "answer is 12400"
    assert N.normalise("An  Editor's  desk.") == "editor s desk"
    for s in samples:
        assert N.answer_correct(s.answer, s), (s.answer, s.keys)
        assert N.answer_correct(f"{s.tag} {s.answer}<|im_end|>", s)
        assert not N.answer_correct("I do not know.", s)
    single = next(s for s in samples if s.kind == "single" and len(s.meta["candidates"]) > 2)
    right = s_value = single.meta["values"][0]
    wrong = next(c for c in single.meta["candidates"] if c != N.normalise(right))
    assert N.answer_correct(f"It is {s_value}.", single)
    assert not N.answer_correct(f"It is {wrong}.", single)
    assert not N.answer_correct(f"It is {s_value} or {wrong}.", single)
    multi = next(s for s in samples if s.kind == "multi")
    a, b = multi.meta["values"]
    assert N.answer_correct(f"{a} and {b}.", multi)
    assert not N.answer_correct(f"{b} and {a}.", multi) or N.normalise(a) == N.normalise(b)
    # Only the first sentence counts.
    assert not N.answer_correct(f"Not sure. {a} and {b}.", multi)


def test_plain_prompt_is_the_documents_without_padding(tok, samples):
    s = samples[0]
    text = tok.decode(N.plain_prompt(s, tok), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert "\n\n\n" not in text and "Answer in one sentence." in text
    assert all(c.strip() in text for c in s.prompt.chunks)


def test_training_mask_equals_the_oracle_mask_of_the_hook_history(tok, samples):
    import torch

    from da_lab.checks.oracle import mask_matrix
    from da_lab.training import train as R

    part = [s for s in samples if s.kind == "multi"][:1] + samples[:2]
    b = R.collate(part, tok.pad_id, BLOCK_SIZE)
    dense = R.dense_mask(torch.from_numpy(b["row_seg"]), torch.from_numpy(b["seg_visible"]),
                         b["ids"].shape[1], BLOCK_SIZE)[:, 0].numpy()
    for k, s in enumerate(part):
        n = len(s.ids)
        ref = mask_matrix(n, R.hook_history(s.prompt.layout, s.all_tags, n), BLOCK_SIZE)
        assert (dense[k, :n, :n] == ref).all()
        P = s.prompt.layout.prompt_len
        targets = b["targets"][k]
        assert (targets[: P - 1] == -100).all() and (targets[P - 1: n - 1] >= 0).all()
