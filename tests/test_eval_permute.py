"""Content, not position (da_lab.training.eval.eval_permute): the permutation moves every needed
document, the permuted prompt's right tag and documents move with it, and the scoring tells a
model that follows the evidence from one that keeps naming a place."""

import numpy as np
import pytest

from da_lab.training.eval import eval_permute as EP
from da_lab.training.eval import eval_prompts as P

LINE = {"documents": ["Alpha is red.", "Beta is blue.", "Gamma is green.", "Delta is black.",
                      "Epsilon is white."],
        "question": "What colour is Gamma?", "answer": ["green"], "needs": [3],
        "wrong": ["red", "blue"], "id": "q1", "protocol": "paper"}


def _rng(i=0):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, 11, i])))


def test_the_permutation_moves_every_needed_document():
    for n in range(2, 9):
        for i in range(20):
            needed = [1 + (i % n)] + ([1 + (i + 1) % n] if n > 2 and i % 3 == 0 else [])
            pi = EP.permutation(n, needed, _rng(i))
            assert sorted(pi) == list(range(1, n + 1))
            assert all(pi[k - 1] != k for k in needed)
    assert EP.permutation(1, [1], _rng()) is None
    assert EP.permutation(2, [1, 2], _rng()) == [2, 1]
    assert EP.permutation(6, [2], _rng(3)) == EP.permutation(6, [2], _rng(3))   # seeded


def test_the_permuted_prompt_moves_the_documents_and_the_right_tag(tmp_path):
    pi = [4, 5, 1, 2, 3]
    twin = EP.permute_record(dict(LINE), pi)
    assert twin["id"] == "q1~perm" and twin["needs"] == [1]
    assert twin["documents"][0] == "Gamma is green." and sorted(twin["documents"]) == sorted(
        LINE["documents"])
    s, t = P.to_sample(dict(LINE, _line=1)), P.to_sample(dict(twin, _line=1))
    assert s.tag == '<focus magic_chunks="3">' and t.tag == '<focus magic_chunks="1">'
    assert t.meta["holders"] == [1]
    assert len(s.prompt.token_ids) == len(t.prompt.token_ids)      # the same texts, moved


def test_records_skip_prompts_that_need_no_document(tmp_path):
    import json

    lines = [LINE, dict(LINE, id="q2", needs=[], answer=[]), dict(LINE, id="q3", needs=[5])]
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = EP.records(P.samples(f), seed=0)
    assert [r["id"] for r, _, _ in got] == ["q1", "q3"]
    for r, t, pi in got:
        assert t["needs"] == [pi[k - 1] for k in r["needs"]] and t["needs"] != r["needs"]
        assert r["protocol"] == t["protocol"] == "paper"


def _row(chunk, right):
    text = (f'<focus magic_chunks="{chunk}">Gamma is green.</focus>\n<local><answer>Gamma is '
            'green.</answer></local>')
    return {"text": text, "n_chunks": 5, "tag_correct": right, "correct": right}


@pytest.mark.parametrize("model", ["content", "position", "wrong-but-content"])
def test_scoring_tells_content_from_position(model):
    pi = [4, 5, 1, 2, 3]                  # the needed document 3 goes to place 1
    if model == "content":
        o, t = _row(3, True), _row(1, True)
    elif model == "position":
        o, t = _row(3, True), _row(3, False)
    else:                                 # named document 2 both times, wherever it went
        o, t = _row(2, False), _row(5, False)
    got = EP.score([o], [t], [pi], ["paper"])
    assert got["n"] == got["focused_n"] == 1
    assert got["agreement"] == (0.0 if model == "position" else 1.0)
    assert got["stayed"] == (1.0 if model == "position" else 0.0)
    assert got["both_right"] == (1.0 if model == "content" else 0.0)
    assert "moved with the evidence" in EP.line(got)


def test_a_two_block_reply_is_scored_as_both_documents():
    """The paper's two focus blocks (one per fact) count as one tag naming both documents."""
    pi = [2, 1, 4, 3, 5]
    two = ('<focus magic_chunks="1">A.</focus>\n<focus magic_chunks="3">B.</focus>\n'
           '<local><answer>A, and B.</answer></local>')
    moved = two.replace('"1"', '"X"').replace('"3"', '"4"').replace('"X"', '"2"')
    o = {"text": two, "n_chunks": 5, "tag_correct": True, "correct": True}
    t = {"text": moved, "n_chunks": 5, "tag_correct": True, "correct": True}
    assert EP.score([o], [t], [pi], ["paper"])["agreement"] == 1.0
    half = dict(t, text=two.replace('"3"', '"4"'))          # only the second one moved
    assert EP.score([o], [half], [pi], ["paper"])["agreement"] == 0.0
