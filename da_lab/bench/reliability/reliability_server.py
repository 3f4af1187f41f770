"""The server half of the reliability run (da_lab/bench/reliability/reliability.py): a real
`da-lab serve` with an
API key and a small KV cache, met the way a crowd of clients would meet it.

  prompt_lists   completions whose `prompt` is a list of 2-4 prompts of different lengths
                 with one layout (and, every other time, one da_id): every prompt must come
                 back with its own DA stats
  reused_ids     pairs of concurrent requests under one da_id: the second is a 400, the first
                 runs to its end with the tokens of its solo run
  leavers        64 streams at once, half of them left by their client inside the director's
                 tag: no DA state may be left, and the server still serves
  preemption     requests that outgrow the cache together, so vLLM preempts some: every one
                 whose tokens differ from its solo run must carry the recompute flag
  auth           every /da/* route without the key must be a 401

Counted: server_deaths (the process exited, /health failed, or a 5xx), unflagged_mismatches,
tracebacks (in the server's log), unauthenticated_da_routes. The goal is 0 for each.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

KEY = "sk-reliability"
AUTH = {"Authorization": f"Bearer {KEY}"}


class Crowd:
    def __init__(self, url: str, model: str, prompts, encode, pad: int) -> None:
        import httpx

        self.url, self.model, self.prompts, self.encode, self.pad = url, model, prompts, \
            encode, pad
        self.http = httpx.Client(timeout=600, headers=AUTH)
        self.errors_5xx = 0

    def post(self, body: dict):
        r = self.http.post(self.url + "/v1/completions", json={"model": self.model,
                                                               "temperature": 0, **body})
        self.errors_5xx += r.status_code >= 500
        return r

    def stats(self, da_id: str) -> dict:
        r = self.http.get(f"{self.url}/da/requests/{da_id}")
        self.errors_5xx += r.status_code >= 500
        return r.json() if r.status_code == 200 else {}

    def body(self, p, tags, max_tokens: int, da_id: str | None = None, **extra) -> dict:
        from da_lab.core.wire import director_to_wire, layout_to_wire

        vx = {"da_layout": layout_to_wire(p.layout, with_prompt_len=False)}
        if tags:
            vx["da_director"] = director_to_wire(tags)
        if da_id:
            vx["da_id"] = da_id
        return {"prompt": p.token_ids, "max_tokens": max_tokens, "ignore_eos": True,
                "return_token_ids": True, "vllm_xargs": vx, **extra}

    def solo(self, p, tags, max_tokens: int) -> list[int]:
        r = self.post(self.body(p, tags, max_tokens))
        return r.json()["choices"][0]["token_ids"] if r.status_code == 200 else []


def prompt_lists(c: Crowd, n: int, rng: random.Random) -> dict:
    bad = 0
    for k in range(n):
        base = rng.choice(c.prompts)
        group = [base.token_ids + c.encode(" please" * j) for j in range(rng.randint(2, 4))]
        body = c.body(base, [(2, "<local>")], 8, da_id=f"list-{k}" if k % 2 else None)
        body["prompt"] = group
        r = c.post(body)
        if r.status_code != 200:
            bad += 1
            continue
        ids = ([f"list-{k}"] + [f"list-{k}-{j}" for j in range(1, len(group))] if k % 2
               else [f"{r.json()['id']}-{j}" for j in range(len(group))])
        got = [c.stats(i) for i in ids]
        bad += sum(s.get("prompt_len") != len(g) or s.get("mode_switches") != ["local"]
                   for s, g in zip(got, group, strict=True))
    return {"requests": n, "wrong": bad}


def reused_ids(c: Crowd, n: int, rng: random.Random) -> dict:
    wrong = refused = 0
    tags = [(3, "<focus C2>")]
    for k in range(n):
        p = rng.choice(c.prompts)
        want = c.solo(p, tags, 48)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(c.post, c.body(p, tags, 48, da_id=f"same-{k}"))
            time.sleep(0.05)
            second = pool.submit(c.post, c.body(p, tags, 48, da_id=f"same-{k}"))
            a, b = first.result(), second.result()
        codes = sorted((a.status_code, b.status_code))
        refused += codes == [200, 400] and "still running" in (a.text + b.text)
        ok_first = [r for r in (a, b) if r.status_code == 200]
        # Either the second was refused while the first ran, or the first had finished.
        wrong += not (codes in ([200, 400], [200, 200]) and all(
            r.json()["choices"][0]["token_ids"] == want for r in ok_first))
    return {"pairs": n, "refused_while_running": refused, "wrong": wrong}


def _leave_inside_tag(url: str, body: dict, after_chunks: int) -> None:
    import httpx

    with httpx.stream("POST", url + "/v1/completions", json=body, headers=AUTH,
                      timeout=600) as r:
        for k, _ in enumerate(r.iter_lines()):
            if k >= after_chunks:
                return                   # the client goes away mid-stream


def leavers(c: Crowd, n: int, rng: random.Random) -> dict:
    tag = c.encode("<focus C1,") + [c.pad] * 400 + c.encode("C2>")
    bodies = []
    for k in range(n):
        b = c.body(rng.choice(c.prompts), [(2, tag)], len(tag) + 12, da_id=f"leaver-{k}",
                   stream=True, model=c.model, temperature=0)
        bodies.append((b, 6 + rng.randint(0, 40) if k % 2 else 10 ** 6))
    threads = [threading.Thread(target=_leave_inside_tag, args=(c.url, b, m))
               for b, m in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    deadline = time.monotonic() + 60
    state = {}
    while time.monotonic() < deadline:
        state = c.http.get(c.url + "/da/state").json()["ranks"][0]
        if not state["live_requests"]:
            break
        time.sleep(0.5)
    left = sum(state.get(k, 0) for k in ("live_requests", "refused_live", "pending_outputs",
                                         "unconsumed_steps", "live_scripts"))
    mid = sum("aborted_mid_tag" in c.stats(f"leaver-{k}").get("flags", ()) for k in range(n))
    return {"streams": n, "left_mid_tag": mid, "state_left": left}


def preemption(c: Crowd, n: int, rng: random.Random) -> dict:
    scripts = [[(1, "<local>")], [(2, "<focus C3,C7>")], [(6, "<focus C2>"), (20, "<global>")],
               []]
    jobs = [(rng.choice(c.prompts), scripts[k % 4]) for k in range(n)]
    with ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(lambda kj: c.post(c.body(kj[1][0], kj[1][1], 160,
                                                      da_id=f"crowd-{kj[0]}")),
                             enumerate(jobs)))
    flagged = unflagged = differ = 0
    for k, ((p, tags), r) in enumerate(zip(jobs, outs, strict=True)):
        if r.status_code != 200:
            continue
        flags = c.stats(f"crowd-{k}").get("flags", [])
        flagged += "recompute_under_mask" in flags
        if r.json()["choices"][0]["token_ids"] != c.solo(p, tags, 160):
            differ += 1
            unflagged += "recompute_under_mask" not in flags
    return {"requests": n, "differ_from_solo": differ, "flagged": flagged,
            "unflagged_mismatches": unflagged}


def auth(url: str) -> dict:
    import httpx

    paths = ["/da/status", "/da/state", "/da/requests/crowd-0", "/da/requests/none"]
    open_ = [p for p in paths if httpx.get(url + p, timeout=60).status_code != 401]
    return {"routes": len(paths), "open": open_}


def run(model: str, n_lists: int = 40, n_pairs: int = 16, n_leavers: int = 64,
        n_crowd: int = 24, num_blocks: int = 64) -> dict:
    import httpx

    from da_lab.client.prompt import ServerTokenizer
    from da_lab.client.transport import Transport
    from da_lab.core.layout import build_prompt, seed_texts
    from da_lab.serve.server_process import ServerProcess

    rng = random.Random(0)
    res: dict = {"num_blocks": num_blocks}
    with tempfile.TemporaryDirectory() as d:
        srv = ServerProcess(Path(d) / "server.log",
                            ["--model", model, "--api-key", KEY,
                             "--num-gpu-blocks-override", str(num_blocks),
                             "--max-model-len", str((num_blocks - 2) * 32)],
                            env=dict(os.environ))
        try:
            http = httpx.Client(timeout=600, headers=AUTH)
            name = http.get(srv.url + "/v1/models").json()["data"][0]["id"]
            tok = ServerTokenizer(Transport(srv.url, AUTH, 600), name)
            prompts = [build_prompt(tok.encode, f"Variant {k}. " + head, chunks, tail,
                                    filler_id=tok.encode("\n")[0], chunk_blocks=2)
                       for k, (head, chunks, tail) in enumerate(
                           seed_texts(rng.randint(7, 9)) for _ in range(8))]
            c = Crowd(srv.url, name, prompts, tok.encode, _pad_id(model))
            for case, fn, n in (("prompt_lists", prompt_lists, n_lists),
                                ("reused_ids", reused_ids, n_pairs),
                                ("leavers", leavers, n_leavers),
                                ("preemption", preemption, n_crowd)):
                t0 = time.perf_counter()
                res[case] = dict(fn(c, n, rng), wall_s=round(time.perf_counter() - t0, 1))
            res["auth"] = auth(srv.url)
            res["errors_5xx"] = c.errors_5xx
            res["health_after"] = httpx.get(srv.url + "/health", timeout=60).status_code
        finally:
            alive = srv.alive()
            log = srv.log()
            srv.stop()
    res["server_deaths"] = int(not alive or res.get("health_after") != 200
                               or res.get("errors_5xx", 1) > 0)
    res["tracebacks"] = log.count("Traceback")
    res["unflagged_mismatches"] = res.get("preemption", {}).get("unflagged_mismatches", -1)
    res["unauthenticated_da_routes"] = len(res.get("auth", {}).get("open", [None]))
    return res


def _pad_id(model: str) -> int:
    """A token that decodes to no text: the director's tag holds hundreds of them, so a
    client leaving mid-stream lands inside the tag however loaded the machine is."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
