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


@pytest.mark.parametrize("prompt, says", [
    ("What is the value of key 3?", "not str; for text use lab.encode"),
    (b"\x01\x02", "not bytes"),
    ([1, 2.5, 3], "must be ints, not float"),
    ([1, True], "must be ints, not bool"),
    (iter([1, 2]), "list of token ids"),
    (None, "not NoneType"),
])
def test_a_prompt_that_is_not_token_ids_is_a_type_error_from_da_lab(lab, prompt, says):
    n = len(lab.requests)
    with pytest.raises(TypeError, match=None) as e:
        lab.add_request(prompt, max_tokens=4)
    assert says in str(e.value) and "vllm" not in e.traceback[-1].path.as_posix(), e.value
    assert len(lab.requests) == n and not lab.has_unfinished()


@pytest.mark.parametrize("tags, says", [
    ([(1.7, "<local>")], "output index 1.7 must be a whole number"),
    ([(True, "<local>")], "output index True"),
    ([(2, None)], "must be tag text"),
    ([(2, "")], "must be tag text"),
    ([(2, 7)], "must be tag text"),
    ([(2,)], "each tag is (output index, tag text)"),
])
def test_a_director_tag_at_a_float_index_or_without_text_is_refused(lab, tags, says):
    n = len(lab.requests)
    with pytest.raises(ValueError) as e:
        lab.add_request(lab.seed_prompt(), tags=tags, max_tokens=20)
    assert says in str(e.value), e.value
    assert len(lab.requests) == n and not lab.has_unfinished()


AFTER_SHUTDOWN = """
import json, sys
from da_lab.engine.lab import Lab
lab = Lab(sys.argv[1])
p = lab.seed_prompt()
lab.shutdown()
out = {}
for name, call in [("step", lambda: lab.step()), ("add_request", lambda: lab.add_request(p)),
                   ("run", lambda: lab.run()), ("has_unfinished", lambda: lab.has_unfinished()),
                   ("record", lambda: lab.record(sys.argv[2])),
                   ("steer", lambda: lab.steer("x", "<local>"))]:
    try:
        call()
        out[name] = "no error"
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
lab.shutdown()               # twice is fine
print("RESULT " + json.dumps(out))
"""


def test_the_lab_after_shutdown_says_it_was_shut_down(tiny_model, tmp_path):
    """Each call once raised AttributeError: 'NoneType' object has no attribute ... (its own
    process: this one's Lab is shared by the other tests)."""
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", AFTER_SHUTDOWN, tiny_model,
                        str(tmp_path / "t.jsonl.gz")], capture_output=True, text=True,
                       timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and line, r.stderr[-3000:]
    for name, said in json.loads(line[0][7:]).items():
        assert said.startswith("RuntimeError: this Lab has been shut down"), (name, said)
    assert not (tmp_path / "t.jsonl.gz").exists()
