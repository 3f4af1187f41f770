"""Training samples in the paper's protocol (nl_gen.make_sample(protocol="paper"), nl_paper):
the Magic Chunk prompt of unpadded spans, a reply that focuses, closes, ends in <local> with the
answer in <answer>; the tag effects the sample lists are what the real tag machine reads from
its tokens, the eval reads back the sample's chunks and answer, and the training mask is the
oracle's matrix of the hook's history for those tags."""

import pytest

from da_lab.core.tags import Directive, Mode, TagStream
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.eval.evaluate import answer_text

SMALL = {"context": (900, 1400), "n_chunks": (4, 10)}


@pytest.fixture(scope="module")
def tok():
    return N.tokens()


@pytest.fixture(scope="module")
def samples(tok):
    out = [G.sample(5, i, G.HELDOUT, protocol="paper", **SMALL) for i in range(30)]
    out += [G.sample(5, i, G.HELDOUT, "heldout", protocol="paper", **SMALL) for i in range(20)]
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


def test_the_prompt_is_the_papers_and_every_kind_is_drawn(samples):
    assert {s.kind for s in samples} == {"single", "multi", "local"}
    for s in samples:
        lay = s.prompt.layout
        assert lay.unaligned and lay.n_chunks == s.meta["n_chunks"]
        assert s.meta["protocol"] == "paper"
        text = N.tokens().decode(s.prompt.token_ids)
        assert "Magic Chunk 1:" in text and "Instructions:" in text and "Question:" in text


def test_the_listed_tag_effects_are_what_the_tag_machine_reads(tok, samples):
    for s in samples:
        got = _effects(s.response_ids, tok, s.prompt.layout.n_chunks)
        assert got == list(s.all_tags), tok.decode(s.response_ids)
        assert s.all_tags[0] == (s.tag_close, s.directive)
        modes = [d.mode for _, d in s.all_tags]
        # focus (when a chunk is needed), back to global, then <local> ... </local>
        assert modes[-2:] == [Mode.LOCAL, Mode.GLOBAL]
        assert modes[:-2] == ([] if s.kind == "local" else [Mode.FOCUS, Mode.GLOBAL])


def test_the_eval_reads_back_the_chunks_and_a_correct_answer(tok, samples):
    for s in samples:
        text = tok.decode(s.response_ids)
        directive, answer = answer_text(text, s.prompt.layout.n_chunks, "paper")
        assert directive == s.directive and answer == s.answer
        assert s.kind == "local" or N.answer_correct(answer, s), (answer, s.keys)


def test_focus_states_the_fact_and_local_commits_to_it(tok, samples):
    """Under FOCUS the reply states the asked fact, holding the named documents' value; under
    LOCAL the answer repeats it, so it is read from the response, not the hidden chunks."""
    focused = 0
    for s in samples:
        text = tok.decode(s.response_ids)
        committed = text.split("<answer>", 1)[1].split("</answer>")[0]
        assert committed == s.answer, (text, s.answer)
        if s.kind == "local":
            assert "<focus" not in text
            continue
        stated = text.split(">", 1)[1].split("</focus>")[0]
        docs = [s.meta["documents"][c - 1] for c in s.directive.chunks]
        assert stated == s.answer, text
        assert len(N.holders(docs, list(s.meta["values"]))) == len(docs), docs
        focused += 1
    assert focused >= 25


def test_the_training_mask_is_the_oracle_of_the_hook_history(tok, samples):
    import torch

    from da_lab.checks.oracle import mask_matrix
    from da_lab.core.layout import BLOCK_SIZE
    from da_lab.core.mask import kept_blocks
    from da_lab.training.trainer import train as R

    part = [s for s in samples if s.kind == "multi"][:2] + samples[:3]
    part += [G.sample(5, 1, G.HELDOUT, protocol="paper", turns=3, **SMALL)]   # a paper drill
    b = R.collate(part, tok.pad_id, BLOCK_SIZE)
    dense = R.dense_mask(torch.from_numpy(b["row_seg"]), torch.from_numpy(b["seg_visible"]),
                         b["ids"].shape[1], BLOCK_SIZE)[:, 0].numpy()
    for k, s in enumerate(part):
        n = len(s.ids)
        ref = mask_matrix(n, R.hook_history(s.prompt.layout, s.all_tags, n), BLOCK_SIZE)
        assert (dense[k, :n, :n] == ref).all()
        # Under the focus a block the mask hides is hidden; after </focus> it is back.
        if s.directive.mode is Mode.FOCUS:
            P0 = s.prompt.layout.prompt_len
            kept = set(kept_blocks(s.directive, s.prompt.layout, P0 + s.tag_close + 1, 1))
            col = min(set(range(P0 // BLOCK_SIZE)) - kept) * BLOCK_SIZE
            assert not dense[k, P0 + s.tag_close, col] and dense[k, P0 + s.tag_close - 1, col]
            assert dense[k, P0 + s.all_tags[1][0], col]


def test_paper_drills_ask_again_in_the_papers_tags(tok):
    """A paper drill: each follow-up turn is given (the paper's "Question: ... Response:"), each
    reply is learned and written in the paper's tags; the listed effects are what the tag
    machine reads from the whole output, and every reply's value is in the documents named."""
    with pytest.raises(ValueError, match="protocol"):
        G.sample(5, 0, G.HELDOUT, protocol="xml", **SMALL)
    focused = 0
    for i in range(12):
        s = G.sample(5, i, G.HELDOUT, protocol="paper", turns=3, **SMALL)
        assert len(s.meta["drills"]) == 2 and len(s.written) == len(s.response_ids)
        given = tok.decode([t for t, w in zip(s.response_ids, s.written, strict=True) if not w],
                           skip_special_tokens=False)
        learned = tok.decode([t for t, w in zip(s.response_ids, s.written, strict=True) if w],
                             skip_special_tokens=False)
        assert given.count("Question: ") == 2 and given.count("Response:") == 2
        assert "<" not in given.replace("<|im_start|>", "").replace("<|im_end|>", "")
        assert learned.count("<answer>") == 3 and learned.count("<|im_end|>") == 3
        assert "Question:" not in learned and "<global>" not in learned
        assert _effects(s.response_ids, tok, s.prompt.layout.n_chunks) == list(s.all_tags)
        for d in s.meta["drills"]:
            assert f"<answer>{d['reply']}</answer>" in learned
            if d["chunks"]:
                focus = f'<focus magic_chunks="{",".join(map(str, d["chunks"]))}">{d["reply"]}'
                assert focus in learned
                docs = [s.meta["documents"][c - 1] for c in d["chunks"]]
                assert len(N.holders(docs, d["values"])) == len(docs), (docs, d)
                focused += 1
    assert focused >= 12


def test_finetune_mixes_in_the_share_asked_and_replays_card_runs(tok):
    from da_lab.models.tiny import model_path
    from da_lab.training.trainer.finetune import make_batch

    job = {"seed": 0, "step": 1, "batch": 6, "tok": str(model_path("smollm2")),
           "batch_tokens": 12000, "context": (900, 1400), "chunks": (4, 10), "drill_p": 0.5,
           "drill_turns": (2, 3), "mix": (0.15, 0.3)}
    card = make_batch(job)
    assert (make_batch({**job, "paper": 0.0})["ids"] == card["ids"]).all()   # no extra draw
    paper = make_batch({**job, "paper": 1.0})
    texts = [tok.decode(row, skip_special_tokens=False) for row in paper["ids"]]
    assert all("Magic Chunk 1:" in t and "<answer>" in t for t in texts)
    assert all(t.count("<|im_start|>assistant") == 1 for t in texts)     # one turn
    assert not any("Magic Chunk" in tok.decode(row) for row in card["ids"])
    # --paper-drills: the card's drill share, now with follow-ups in the paper's tags
    drilled = [tok.decode(row, skip_special_tokens=False)
               for row in make_batch({**job, "paper": 1.0, "paper_drills": True})["ids"]]
    assert all("Magic Chunk 1:" in t and "<focus C" not in t for t in drilled)
    turns = [t.count("<|im_start|>assistant") for t in drilled]
    assert 1 in turns and max(turns) > 1, turns


def test_the_engines_decode_positions_come_back_from_the_replies(tok, tmp_path):
    """da_lab/bench/models/cost_at_block_size.py replays a committed eval's replies through the tag
    machine and the layout: at the run's own 32-token blocks it must give back, row by row, the
    KV positions the H100 engine counted; a smaller block reads no more."""
    import json

    from da_lab.bench.models.cost_at_block_size import row_positions
    from da_lab.training.eval import eval_prompts as P
    from da_lab.training.eval.evaluate import load_document

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    doc = load_document(root / "bench/results/eval-smollm2-h100-2026-12-06-paper-hand-written"
                                ".json.gz")
    lines = []      # the file's lines as the run had them (smollm2_gpu.sh `prompts`)
    for line in (root / "bench/data/handwritten-prompts.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec.update(protocol="paper", set="paper/hand-written/" + rec["set"])
        lines.append(json.dumps(rec))
    (tmp_path / "p.jsonl").write_text("\n".join(lines) + "\n")
    by_id = {s.meta["id"]: s for s in P.samples(tmp_path / "p.jsonl")}
    assert len(doc["rows"]) == len(by_id) == 66
    for row in doc["rows"]:
        s = by_id[row["id"]]
        at32 = row_positions(row, s, tok, 32)
        assert at32 == (row["decode_kv_read"], row["decode_kv_full"]), row["id"]
        r16, f16 = row_positions(row, s, tok, 16)
        r1, f1 = row_positions(row, s, tok, 1)
        assert f16 == f1 == at32[1] and r1 <= r16 <= at32[0]


def _shown(lay, k: int, n: int) -> bool:
    """Does a block that FOCUS on chunk k keeps (span rounded outward) hold part of chunk n?"""
    bs, (a, b) = lay.block_size, lay.spans[k - 1]
    return lay.spans[n - 1][0] < -(-b // bs) * bs and lay.spans[n - 1][1] > a // bs * bs


def test_paper_misses_finds_where_a_written_value_lives(samples):
    from da_lab.bench.models.paper_misses import holder

    def neighbour_shown(x):
        k = x.directive.chunks[0]
        return next((n for n in (k - 1, k + 1) if 1 <= n <= x.prompt.layout.n_chunks
                     and _shown(x.prompt.layout, k, n)), None)
    s = next(x for x in samples if x.kind == "single" and x.prompt.layout.n_chunks >= 5
             and neighbour_shown(x))
    docs, k = s.meta["documents"], s.directive.chunks[0]
    row = {"tag_written": f'<focus magic_chunks="{k}">', "question": "What is it?"}
    assert holder(dict(row, answer=f"{s.meta['values'][0]}."), s) == "the focused document"
    assert holder(dict(row, answer="Zyxwvut Qqqq."), s) == "no document, as written"

    def only_in(i):         # a word of document i that no other document holds
        return next(w for w in sorted(set(docs[i - 1].replace(",", "").split()), key=len,
                                      reverse=True)
                    if w.isalpha() and not any(w.lower() in t.lower() for j, t in
                                               enumerate(docs, 1) if j != i))
    far = next(i for i in range(1, len(docs) + 1) if abs(i - k) > 1)
    assert holder(dict(row, answer=only_in(far) + "."), s) == "another chunk, hidden by FOCUS"
    assert holder(dict(row, answer=only_in(neighbour_shown(s)) + "."), s) == (
        "a neighbour a 32-token block shows in part")
