"""The long-text needle task (training/eval_needle.py, issue 40): one text of 4k-7k tokens
segmented by the paper's rules, the asked fact at the depth asked, in exactly the segment the
line's `needs` names; lines `da-lab eval --prompts` accepts, in the paper's protocol."""

import pytest

from da_lab.core.paper import MAX_TOKENS, segment_context
from da_lab.training.data import nl_task as N
from da_lab.training.eval.eval_needle import DEPTHS, needle_lines
from da_lab.training.eval.eval_prompts import check, to_sample


@pytest.fixture(scope="module")
def lines():
    return needle_lines(10)


def test_lines_are_prompts_the_eval_takes(lines):
    tok = N.tokens()
    for rec in lines:
        assert check(rec) is None and rec["protocol"] == "paper" and rec["set"] == "needle"
        s = to_sample(rec, tok)
        assert s.prompt.layout.unaligned and s.prompt.layout.n_chunks == len(rec["documents"])
        assert s.prompt.layout.prompt_len <= N.MAX_PROMPT
        assert list(s.directive.chunks) == rec["needs"]


def test_the_text_is_long_and_segmented_by_the_papers_rules(lines):
    tok = N.tokens()
    for rec in lines:
        text = "".join(rec["documents"])
        assert 4000 <= len(tok.encode(text)) <= 7100
        assert segment_context(text, tok.encode) == rec["documents"]    # a fixed point
        assert all(len(tok.encode(d)) <= MAX_TOKENS for d in rec["documents"])
        assert len(rec["documents"]) >= 2


def test_the_answer_sits_in_the_named_segment_at_the_depth_asked(lines):
    for k, rec in enumerate(lines):
        holders = N.holders(rec["documents"], rec["answer"])
        assert holders == rec["needs"], (holders, rec["needs"])
        text = "".join(rec["documents"])
        at = N.normalise(text).find(N.normalise(rec["answer"][0])) / len(N.normalise(text))
        assert abs(at - DEPTHS[k % len(DEPTHS)]) < 0.2, (at, rec["id"])
    assert {rec["needs"][0] for rec in lines} >= {1, 2}      # the depths move the segment
