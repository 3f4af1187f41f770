"""One Lab per kernel (engine/one_lab.py): a notebook's second Run All gets the running engine
back, idle, instead of vLLM's "one engine per process" refusal."""

import pytest

from da_lab.engine.one_lab import _key, one_lab


def test_a_second_ask_with_the_same_arguments_reuses_the_running_lab_idle(lab, tiny_model,
                                                                          capsys):
    from da_lab.engine.lab import Lab
    from da_lab.lesson import add_lesson_request

    with pytest.raises(RuntimeError, match="already running"):
        Lab(tiny_model)                      # what Run All met the second time
    first = add_lesson_request(lab, max_tokens=40)
    for _ in range(3):
        lab.step()
    assert lab.has_unfinished()
    again = one_lab(tiny_model)
    assert again is lab
    assert "reusing the engine" in capsys.readouterr().out
    assert not lab.has_unfinished() and lab.requests == {}
    # the same lesson as the first time: same id, same prompt, and it runs
    second = add_lesson_request(lab, max_tokens=40)
    assert second.da_id == first.da_id and second.text == first.text
    recs = [lab.step() for _ in range(3)]
    assert recs[0].added and recs[0].added[0]["req"] == second.da_id
    assert len(lab.requests[second.da_id]["token_ids"]) == 3
    lab.abort(second.da_id)


def test_other_arguments_give_another_key(lab, tiny_model):
    assert _key(tiny_model, {}) == lab.start_key
    assert _key(tiny_model, {"progress": True}) == lab.start_key     # how it reports, not what
    assert _key(tiny_model, {"num_blocks": lab.num_blocks + 1}) != lab.start_key
    assert _key(tiny_model, {"max_num_seqs": 4}) != lab.start_key
