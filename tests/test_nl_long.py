"""The paper's task shape for training (issue 58): long texts cut into ~2,048-token segments by
the paper's segmenter with the answer in one segment, or a two-part question's in two
(nl_long), and two-document questions (nl_pairs: one attribute of two entities, or two
attributes of two entities of two domains; the paper's one focus block per fact). For every
sample: the tag effects it lists are what the real tag machine reads from its tokens, each
focused document or segment holds its value, the eval reads back the chunks and the answer, the
segments are the segmenter's, held-out domains stay held out, and the training mask is the
oracle's matrix of the hook's history. Also Gemma 3's chat template as nl_task reads it."""

import json

import pytest

from da_lab.core.paper import MAX_TOKENS, segment_context
from da_lab.core.tags import Directive, Mode, TagStream
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_long as L
from da_lab.training.data import nl_pairs as NP
from da_lab.training.data import nl_task as N
from da_lab.training.data.task import HELDOUT, TRAIN, rng_for
from da_lab.training.eval.evaluate import answer_text

SMALL = {"context": (900, 1400), "n_chunks": (4, 10)}
LONG = (4000, 6500)           # SmolLM2's tokenizer takes 7,680 prompt tokens


@pytest.fixture(scope="module")
def tok():
    return N.tokens()


@pytest.fixture(scope="module")
def pairs(tok):
    out = []
    for i in range(16):
        kind, proto = ("pair", "cross")[i % 2], ("paper", "card")[i // 8]
        out.append(NP.make_pair_sample(rng_for(4, TRAIN, i), kind=kind, tok=tok, protocol=proto,
                                       **SMALL))
    out += [NP.make_pair_sample(rng_for(4, HELDOUT, i), heldout=True, split="heldout",
                                kind=("pair", "cross")[i % 2], tok=tok, **SMALL)
            for i in range(6)]
    out.append(NP.make_pair_sample(rng_for(4, TRAIN, 99), tok=tok, form="joint", **SMALL))
    return out


@pytest.fixture(scope="module")
def longs(tok):
    out = [L.make_long_sample(rng_for(6, TRAIN, i), kind=("single", "multi")[i % 2], tok=tok,
                              tokens=LONG) for i in range(6)]
    out += [L.make_long_sample(rng_for(6, HELDOUT, i), heldout=True, split="heldout",
                               kind=("single", "multi")[i % 2], tok=tok, tokens=LONG)
            for i in range(4)]
    return out


def _effects(tokens, tok, n_chunks):
    """(output index, directive in force from there on) at every change, read by the tag
    machine from the decoded output one token more at a time."""
    out, last = [], Directive()
    for k in range(len(tokens)):
        stream = TagStream(n_chunks=n_chunks)
        stream.feed(tok.decode(tokens[: k + 1]))
        if stream.directive != last:
            out.append((k, stream.directive))
            last = stream.directive
    return out


def _focus_blocks(s):
    """(chunks, stated fact) of each focus block of a paper reply, in order."""
    text = N.tokens().decode(s.response_ids)
    out = []
    for part in text.split("<focus")[1:]:
        head, body = part.split(">", 1)
        chunks = tuple(int(c) for c in head.split('"')[1].split(","))
        out.append((chunks, body.split("</focus>")[0]))
    return out


def _check_reply(s, tok):
    """What every sample must satisfy: listed effects = the tag machine's; the eval reads back
    the union of the focused chunks and the answer; the answer is right by the eval's rule."""
    nc = s.prompt.layout.n_chunks
    proto = s.meta["protocol"]
    text = tok.decode(s.response_ids)
    assert _effects(s.response_ids, tok, nc) == list(s.all_tags), text
    directive, answer = answer_text(text, nc, proto)
    assert directive == s.directive and directive.mode is Mode.FOCUS, text
    assert N.answer_correct(answer, s), (answer, s.keys)


def test_two_document_samples_focus_each_fact_where_it_is(tok, pairs):
    assert {s.meta["pair_kind"] for s in pairs} == {"pair", "cross"}
    for s in pairs:
        _check_reply(s, tok)
        docs = s.meta["documents"]
        assert len(s.directive.chunks) == 2 and s.meta["holders"] == list(s.directive.chunks)
        if s.meta["protocol"] == "card":
            assert tok.decode(s.response_ids).startswith(f"<focus C{s.directive.chunks[0]},")
            continue
        blocks = _focus_blocks(s)
        if s.meta["form"] == "joint":
            assert [b[0] for b in blocks] == [s.directive.chunks]
            continue
        # one block per fact, in the question's order, each in its own document
        assert [b[0] for b in blocks] == [(c,) for c in s.meta["asked_chunks"]]
        for (chunks, fact), value in zip(blocks, s.meta["values"], strict=True):
            assert N.holders([docs[chunks[0] - 1]], [value]) == [1], (fact, value)
            assert N.holders([fact], [value]) == [1]
        # the asked values sit nowhere else
        assert all(N.holders([d], s.meta["values"]) == [] for k, d in enumerate(docs, 1)
                   if k not in s.directive.chunks)


def test_cross_questions_ask_two_domains_and_pairs_one(pairs):
    for s in pairs:
        doms = {d for d, _ in s.meta["asked"]}
        assert len(doms) == (2 if s.meta["pair_kind"] == "cross" else 1)


def test_held_out_domains_stay_held_out(pairs, longs):
    train, held = G.registry()
    for s in pairs + longs:
        doms = set(s.meta["entity_domains"]) | set(s.meta.get("hay_domains", ()))
        assert doms <= (set(held) if s.meta["split"] == "heldout" else set(train)), doms
        assert {d for d, _ in s.meta.get("asked", [])} <= (set(held) if s.meta["split"] ==
                                                          "heldout" else set(train))


def test_long_texts_are_the_segmenters_and_the_answer_sits_where_the_tag_says(tok, longs):
    assert {s.kind for s in longs} == {"single", "multi"}
    for s in longs:
        _check_reply(s, tok)
        segments = segment_context(s.meta["text"], tok.encode)
        assert list(s.prompt.chunks) == [N.clean_document(x) for x in segments]
        assert len(segments) >= 2 and all(len(tok.encode(x)) <= MAX_TOKENS for x in segments)
        docs = s.meta["documents"]
        assert s.meta["holders"] == list(s.directive.chunks)
        if s.kind == "single":
            assert len(s.directive.chunks) == 1
            continue
        # a two-part question: its two facts in two different segments, each focused alone
        blocks = _focus_blocks(s)
        assert len(s.directive.chunks) == 2 and len(blocks) == 2
        for (chunks, _), value in zip(blocks, s.meta["values"], strict=True):
            assert N.holders(docs, [value]) == list(chunks)


def test_the_training_mask_is_the_oracle_of_the_hook_history(tok, pairs, longs):
    import torch

    from da_lab.checks.oracle import mask_matrix
    from da_lab.core.layout import BLOCK_SIZE
    from da_lab.training.trainer import train as R

    part = [pairs[0], pairs[1], pairs[-1], longs[1]]
    b = R.collate(part, tok.pad_id, BLOCK_SIZE)
    dense = R.dense_mask(torch.from_numpy(b["row_seg"]), torch.from_numpy(b["seg_visible"]),
                         b["ids"].shape[1], BLOCK_SIZE)[:, 0].numpy()
    for k, s in enumerate(part):
        n = len(s.ids)
        ref = mask_matrix(n, R.hook_history(s.prompt.layout, s.all_tags, n), BLOCK_SIZE)
        assert (dense[k, :n, :n] == ref).all()


def test_finetune_batches_mix_long_steps_and_two_document_samples(tok):
    from da_lab.models.tiny import model_path
    from da_lab.training.trainer.nl_batches import make_batch

    job = {"seed": 0, "step": 1, "batch": 4, "tok": str(model_path("smollm2")),
           "batch_tokens": 14000, "context": (900, 1400), "chunks": (4, 10), "drill_p": 0.0,
           "drill_turns": (2, 3), "mix": (0.15, 0.3), "paper": 0.5}
    plain = make_batch(job)
    assert (make_batch({**job, "long": 0.0, "pairs": 0.0})["ids"] == plain["ids"]).all()
    long_job = {**job, "long": 1.0, "long_tokens": LONG, "long_multi": 0.5}
    rows = [tok.decode(r, skip_special_tokens=False) for r in make_batch(long_job)["ids"]]
    assert rows and all("Magic Chunk 2:" in t and "<answer>" in t for t in rows)
    assert len(make_batch(long_job)["ids"][0]) > 3500
    paired = [tok.decode(r) for r in make_batch({**job, "pairs": 1.0})["ids"]]
    assert all(", and " in t.split("Question:")[1] for t in paired)


def _gemma_like_folder(tmp_path):
    """A folder with a small tokenizer given Gemma's turn tokens and Gemma 3's chat template
    (models/gemma3.py), so the template is checked without building the 270M model."""
    from tokenizers import AddedToken, Tokenizer

    from da_lab import ASSETS
    from da_lab.models import gemma3

    t = Tokenizer.from_file(str(ASSETS / "tokenizer.json"))
    t.add_special_tokens([AddedToken(x, special=True) for x in
                          ("<bos>", "<pad>", "<start_of_turn>", "<end_of_turn>")])
    t.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": gemma3.CHAT_TEMPLATE, "eos_token": "<end_of_turn>",
        "pad_token": "<pad>", "bos_token": "<bos>", "model_max_length": 32768}))
    return tmp_path


def test_gemma3_chat_template_frames_and_turns(tmp_path):
    g = N.ChatTokens(_gemma_like_folder(tmp_path))
    assert g.frame(None) == ("<bos><start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n")
    # a system message opens the first user turn, as Gemma 3's template writes it
    assert g.frame("Be brief.")[0] == "<bos><start_of_turn>user\nBe brief.\n\n"
    assert g.turn() == ("\n<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n")
    assert g.max_prompt == 32768 - 512
    s = G.sample(5, 0, G.HELDOUT, protocol="paper", turns=2, tok=g, **SMALL)
    text = g.decode(s.ids, skip_special_tokens=False)
    assert text.startswith("<bos><start_of_turn>user\nYou are a helpful assistant.\n\nMagic Chunk")
    assert "<end_of_turn>\n<start_of_turn>user\nQuestion: " in text
    assert text.endswith("</local><end_of_turn>")
    # SmolLM2's turn frame is what nl_gen wrote before it read the template
    assert N.tokens().turn() == ("\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
