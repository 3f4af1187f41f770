"""Lab.add_request / steer / abort refuse bad input with a ValueError naming the field, before
anything reaches the engine."""

import dataclasses

import pytest

from da_lab.core.layout import build_prompt, seed_texts


def prompt_for(lab, block_size):
    head, chunks, tail = seed_texts()
    return build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                        bos_id=lab.tokenizer.bos_token_id, block_size=block_size)


def with_prompt_len(prompt, n):
    return dataclasses.replace(prompt, layout=dataclasses.replace(prompt.layout, prompt_len=n))


def test_validation_refuses_bad_requests(lab):
    seed = lab.seed_prompt()
    assert len(seed.token_ids) == 813
    cases = [
        (dict(prompt=prompt_for(lab, 16)), "block_size"),
        (dict(prompt=with_prompt_len(seed, 1400)), "prompt_len"),
        (dict(prompt=with_prompt_len(seed, 805)), "prompt_len"),
        (dict(prompt=seed, tags=[(-3, "<local>")]), "negative"),
        (dict(prompt=seed, tags=[(50, "<local>")], max_tokens=20), "max_tokens"),
        (dict(prompt=seed, tags=[(18, "<local>")], max_tokens=20), "max_tokens"),
        (dict(prompt=seed, max_tokens=0), "max_tokens"),
        (dict(prompt=seed, max_tokens=5000), "max_model_len"),
        (dict(prompt=[]), "prompt"),
    ]
    n = len(lab.requests)
    for kw, field in cases:
        kw = dict(kw)
        with pytest.raises(ValueError, match=field):
            lab.add_request(kw.pop("prompt"), **kw)
    assert len(lab.requests) == n and not lab.has_unfinished()     # nothing reached vLLM


def test_validation_running_request_id_is_refused(lab):
    seed = lab.seed_prompt()
    lab.add_request(seed, max_tokens=6, request_id="dup")
    with pytest.raises(ValueError, match="request_id 'dup' is still running"):
        lab.add_request(seed, max_tokens=6, request_id="dup")
    lab.run()
    assert len(lab.requests["dup"]["token_ids"]) == 6      # not merged with a second one
    lab.add_request(seed, max_tokens=4, request_id="dup")    # finished: the id may be reused
    lab.run()
    assert len(lab.requests["dup"]["token_ids"]) == 4


def test_validation_abort_and_steer_unknown_ids(lab):
    with pytest.raises(ValueError, match="no request 'nope' to abort"):
        lab.abort("nope")
    with pytest.raises(ValueError, match="no running request 'nope'"):
        lab.steer("nope", "<local>")
    with pytest.raises(ValueError, match="no request 'nope'"):
        lab.result("nope")
