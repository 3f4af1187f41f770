"""Predict, then run (da_lab/predict.py): the one line a lesson's exercise prints."""

from da_lab.predict import check


def test_no_guess_asks_for_one(capsys):
    assert check(None, 18, "the blocks FOCUS reads") is False
    assert capsys.readouterr().out.startswith("predict first: set PREDICT to the blocks")


def test_a_right_and_a_wrong_guess(capsys):
    assert check(18, 18, "the blocks FOCUS reads", "1 + 14 + 1 + 2") is True
    assert capsys.readouterr().out == "✓ right: the blocks FOCUS reads is 18 (1 + 14 + 1 + 2)\n"
    assert check("17", 18, "the blocks FOCUS reads") is False
    assert "✗ you said '17'; the blocks FOCUS reads is 18" in capsys.readouterr().out
    assert check(" focus", "FOCUS", "the mode") is True      # modes and tags: any case
    assert check("<focus C3>", "<focus C4>", "the tag") is False
    assert check("many", 3, "n") is False                     # not a number: wrong, no crash
