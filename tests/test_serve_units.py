"""The serving pieces that need no server: the wire form, the edge's rewrite, `da-lab serve`'s
defaults, and reading a trace while it is written."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from da_lab.core.layout import Layout
from da_lab.core.wire import (
    director_to_wire,
    layout_to_wire,
    parse_director,
    parse_layout,
)

LAY = Layout(32, 1, (2, 3), 200)


def test_layout_wire_round_trip_and_relative_prompt_len():
    assert parse_layout(layout_to_wire(LAY), 200, block_size=32) == LAY
    assert parse_layout(LAY.to_dict()) == LAY                      # the engine's form too
    relative = layout_to_wire(LAY, with_prompt_len=False)
    assert "prompt_len" not in json.loads(relative)
    assert parse_layout(relative, 250).prompt_len == 250


@pytest.mark.parametrize("value, prompt_len, says", [
    ("{", 200, "not valid JSON"),
    ("[1, 2]", 200, "must be a JSON object"),
    (json.dumps({"block_size": 32, "head_blocks": 1}), 200, "missing field(s) chunk_blocks"),
    (json.dumps({**LAY.to_dict(), "chunks": 3}), 200, "unknown field(s) chunks"),
    (json.dumps({**LAY.to_dict(), "head_blocks": True}), 200, "whole number"),
    (json.dumps({**LAY.to_dict(), "chunk_blocks": [2, 0]}), 200, "at least 1"),
    (json.dumps({**LAY.to_dict(), "chunk_blocks": []}), 200, "non-empty list"),
    (layout_to_wire(LAY), 210, "prompt_len is 200 but the prompt has 210"),
    (layout_to_wire(LAY, with_prompt_len=False), 160, "outside the prompt"),
    (layout_to_wire(LAY, with_prompt_len=False), None, "no prompt_len"),
])
def test_bad_layouts_name_the_problem(value, prompt_len, says):
    with pytest.raises(ValueError, match=None) as e:
        parse_layout(value, prompt_len, block_size=32)
    assert says in str(e.value)


def test_layout_for_another_block_size_is_refused():
    with pytest.raises(ValueError, match="block size 16"):
        parse_layout(layout_to_wire(LAY), 200, block_size=16)


def test_director_wire():
    wire = director_to_wire([(4, "<focus C2>"), (0, [7, 8])])
    assert parse_director(wire, 2) == [(0, [7, 8]), (4, "<focus C2>")]
    for bad, says in (("[[0, \"<focus C3>\"]]", "unknown chunk C3"),
                      ("[[0, \"<nope>\"]]", "not a DA tag"), ("[[-1, \"<local>\"]]", "negative"),
                      ("[[0, []]]", "non-empty list"), ("{\"a\": 1}", "JSON list"),
                      ("[[true, \"<local>\"]]", "[output_index, tag]")):
        with pytest.raises(ValueError) as e:
            parse_director(bad, 2)
        assert says in str(e.value), (bad, str(e.value))


class _Tok:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 50 for c in text]


def _params(extra, n=1, max_tokens=16):
    return NS(extra_args=extra, n=n, max_tokens=max_tokens)


def test_the_edge_gives_the_engine_its_form_in_a_copy_and_leaves_plain_requests_alone():
    from da_lab.serve.edge import Edge, EdgeError

    edge = Edge(block_size=32, vocab_size=100, disabled=None, tokenizer=_Tok())
    prompt = {"type": "token", "prompt_token_ids": list(range(200))}
    plain = _params(None)
    assert edge.admit(prompt, plain, "r0") == (plain, None) and plain.extra_args is None
    other = _params({"session_id": "x"})
    assert edge.admit(prompt, other, "r0") == (other, None)
    assert other.extra_args == {"session_id": "x"}
    wire = {"da_layout": layout_to_wire(LAY, with_prompt_len=False),
            "da_director": director_to_wire([(1, "<local>")])}
    p = _params(dict(wire))
    mine, da_id = edge.admit(prompt, p, "cmpl-1-0")
    assert p.extra_args == wire                 # the caller's dict is never written
    assert mine is not p and da_id == "cmpl-1-0"
    assert mine.extra_args == {"da_layout": LAY.to_dict(), "da_id": "cmpl-1-0",
                               "da_director": [[1, _Tok().encode("<local>")]]}
    with pytest.raises(EdgeError, match="n=1"):
        edge.admit(prompt, _params({"da_layout": layout_to_wire(LAY)}, n=2), "r")
    with pytest.raises(EdgeError, match="close before the last"):
        edge.admit(prompt, _params({"da_layout": layout_to_wire(LAY), "da_director":
                                    director_to_wire([(10, "<local>")])}, max_tokens=12), "r")
    off = Edge(block_size=32, vocab_size=100, disabled="sliding window", tokenizer=None)
    with pytest.raises(EdgeError, match="DA is off on this server.*sliding window"):
        off.admit(prompt, _params({"da_layout": layout_to_wire(LAY)}), "r")
    assert edge.rejected == {"prompt": 1, "director": 1} and off.rejected == {"disabled": 1}


def test_one_running_request_per_da_id_and_a_prompt_list_gets_one_id_per_prompt():
    """vLLM gives every prompt of a list one shared vllm_xargs dict: each prompt gets its own
    id and its own layout (its own prompt_len); an id a running request holds is refused and
    free again once that request's stream is gone, even if it never started."""
    import asyncio
    import gc

    from da_lab.serve.edge import Edge, EdgeError

    edge = Edge(block_size=32, vocab_size=100, disabled=None, tokenizer=_Tok())
    shared = {"da_layout": layout_to_wire(LAY, with_prompt_len=False), "da_id": "mine"}
    got = [edge.admit({"prompt_token_ids": list(range(n))}, _params(shared), f"c-{k}")
           for k, n in enumerate((200, 205, 230))]
    assert [d for _, d in got] == ["mine", "mine-1", "mine-2"]
    assert [m.extra_args["da_layout"]["prompt_len"] for m, _ in got] == [200, 205, 230]
    assert "prompt_len" not in shared["da_layout"]
    with pytest.raises(EdgeError, match="still running") as e:
        edge.admit({"prompt_token_ids": list(range(200))}, _params(dict(shared)), "c-9")
    assert "mine" in str(e.value) and edge.rejected == {"id": 1}
    auto = [edge.admit({"prompt_token_ids": list(range(200))},
                       _params({"da_layout": layout_to_wire(LAY)}), f"cmpl-x-{k}")[1]
            for k in range(2)]
    assert auto == ["cmpl-x-0", "cmpl-x-1"]

    async def engine():
        yield 1
        yield 2

    async def consume(gen):
        return [x async for x in gen]

    held = [edge.ids.hold(d, engine()) for _, d in got]
    assert asyncio.run(consume(held[0])) == [1, 2]        # a stream that ran to its end
    del held[1]                                           # a stream never started
    gc.collect()
    assert edge.ids.live == {"mine-2", *auto}
    again, d = edge.admit({"prompt_token_ids": list(range(200))}, _params(dict(shared)), "c-7")
    assert d == "mine"                 # free again: a new request (a new dict) takes it


def test_serve_defaults_leave_what_the_user_set():
    from da_lab.serve.launch import defaults, plugins_env

    assert defaults([], False, "0.32.0") == ["--block-size", "32", "--dtype", "float32",
                                            "--enforce-eager"]
    assert defaults(["--dtype=bfloat16", "--block-size", "64", "-O", "3"], False, None) == []
    assert defaults([], True, "0.26.0") == ["--block-size", "32", "--disable-cascade-attn"]
    assert plugins_env("a,b") == "a,b,da_lab" and plugins_env("da_lab") == "da_lab"
    # unset: every installed general plugin, da_lab among them (in entry-point order)
    from importlib.metadata import entry_points

    assert set(plugins_env(None).split(",")) == \
        {e.name for e in entry_points(group="vllm.general_plugins")} | {"da_lab"}


def test_a_trace_can_be_read_while_it_is_written(tmp_path):
    from da_lab.core.record import RequestStep, StepRecord
    from da_lab.trace import TraceError
    from da_lab.trace.tail import TraceTail
    from da_lab.trace.writer import TraceWriter

    path = tmp_path / "growing.jsonl.gz"
    tail = TraceTail(path)
    assert tail.read() == [] and tail.header is None            # not there yet
    w = TraceWriter(path, {"provenance": {"block_size": 32}})
    for k in range(2):
        w.write(StepRecord(k, requests=[RequestStep(f"r{k}")]))
    got = tail.read()
    assert [r.step for r in got] == [0, 1] and tail.header["provenance"]["block_size"] == 32
    assert tail.read() == [] and not tail.ended
    w.write(StepRecord(2))
    w.close()
    assert [r.step for r in tail.read()] == [2] and tail.ended
    with pytest.raises(TraceError, match="only .jsonl.gz"):
        TraceTail(tmp_path / "x.parquet")


@pytest.mark.parametrize("constraint", [{"allowed_token_ids": [1, 2, 3]},
                                        {"bad_words": ["focus"]}])
def test_a_director_with_a_token_constraint_is_refused_like_a_grammar(constraint):
    """Issue 57 F11: the director's forced tag tokens overrode allowed_token_ids and bad_words
    and answered 200; grammars were refused. Both are a 400 now; a layout alone may keep them."""
    from da_lab.serve.edge import Edge, EdgeError

    edge = Edge(block_size=32, vocab_size=100, disabled=None, tokenizer=_Tok())
    prompt = {"type": "token", "prompt_token_ids": list(range(200))}
    wire = {"da_layout": layout_to_wire(LAY, with_prompt_len=False),
            "da_director": director_to_wire([(1, "<local>")])}
    name = next(iter(constraint))
    with pytest.raises(EdgeError, match=f"can't be combined with {name}"):
        edge.admit(prompt, NS(extra_args=dict(wire), n=1, max_tokens=16, **constraint), "r1")
    alone = NS(extra_args={"da_layout": wire["da_layout"]}, n=1, max_tokens=16, **constraint)
    assert edge.admit(prompt, alone, "r2")[1] == "r2"
    assert edge.rejected == {"constrained_output": 1}


def test_truncation_with_a_layout_without_prompt_len_is_refused():
    """Issue 57 F12: truncate_prompt_tokens cut the prompt after the client placed its chunks;
    a layout without prompt_len then took the cut prompt's length and its spans named other
    tokens (HTTP 200). Refused before the request runs; with prompt_len the edge refuses a
    cut prompt as a length mismatch."""
    from da_lab.serve.gate import precheck

    rel = {"da_layout": layout_to_wire(LAY, with_prompt_len=False)}
    said = precheck(NS(vllm_xargs=rel, truncate_prompt_tokens=150), 32)
    assert said is not None and said[0] == "truncation" and "prompt_len" in said[1]
    assert precheck(NS(vllm_xargs={"da_layout": layout_to_wire(LAY)},
                       truncate_prompt_tokens=150), 32) is None
    assert precheck(NS(vllm_xargs=rel, truncate_prompt_tokens=None), 32) is None
    with pytest.raises(ValueError, match="prompt_len is 200 but the prompt has 150"):
        parse_layout(layout_to_wire(LAY), 150, block_size=32)


class _Engine:
    """Stands in for vLLM's engine client: `collective_rpc` answers `answer(op)` after
    `delay` seconds (a worker busy with a long step answers late)."""

    def __init__(self, answer, delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay

    async def collective_rpc(self, method, args=()):
        import asyncio

        await asyncio.sleep(self.delay)
        return self.answer(args[0])


def _routes(engine):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from da_lab.serve.endpoint import DAEndpoints

    plugin = DAEndpoints()
    plugin.engine_client, plugin.app = engine, FastAPI()
    plugin.app.include_router(plugin._router())
    return TestClient(plugin.app, raise_server_exceptions=False)


def test_da_routes_answer_503_with_a_reason_when_the_engine_is_busy(monkeypatch):
    """Issue 57 F1: a request whose steps took seconds held the worker, and /da/requests/ID and
    /da/state answered a bare 500 (a TimeoutError traceback in the log) after the RPC's 10 s.
    Now a 503 with a JSON reason and Retry-After, and the log has no traceback."""
    from da_lab.serve import endpoint

    monkeypatch.setattr(endpoint, "RPC_TIMEOUT_S", 0.05)
    busy = _routes(_Engine(lambda op: [None], delay=5))
    for path in ("/da/requests/x", "/da/requests/x?ranks=all", "/da/state"):
        r = busy.get(path)
        assert r.status_code == 503, (path, r.status_code, r.text)
        assert "did not answer within" in r.json()["error"] and r.headers["Retry-After"]

    def gone(op):
        raise RuntimeError("EngineDeadError: the engine core died")

    r = _routes(_Engine(gone)).get("/da/state")
    assert r.status_code == 503 and "EngineDeadError" in r.json()["error"]


def test_an_unknown_request_is_404_on_every_rank_view():
    """Issue 57: /da/requests/unknown?ranks=all answered 200 {"ranks": [null]}."""
    known = {"id": "a", "steps": 3}
    routes = _routes(_Engine(lambda op: [None, None]))
    for path in ("/da/requests/nope", "/da/requests/nope?ranks=all"):
        assert routes.get(path).status_code == 404, path
    r = _routes(_Engine(lambda op: [known, known])).get("/da/requests/a?ranks=all")
    assert r.status_code == 200 and r.json() == {"ranks": [known, known]}


def test_the_server_trace_names_each_run_of_an_id_once():
    """Issue 57 F5: runs of one da_id are ID, ID#2, ...; a client's own id that looks like
    one of those never takes a name already given."""
    from da_lab.hook.trace import ServerTrace

    t = ServerTrace("unused.jsonl.gz", book=None)
    assert [t._name(f"r{k}", "x") for k in range(3)] == ["x", "x#2", "x#3"]
    assert t._name("r3", "x#2") == "x#2#2" and t._name("r4", "x#4") == "x#4"
    assert t._name("r5", "x") == "x#5"
