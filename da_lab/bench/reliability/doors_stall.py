"""Issue 57's server cases of the doors run (doors.py), on its `da-lab serve --api-key` with
DA_LAB_TRACE set:

  stall        a plain 8-token request alone, beside a plain 100-token neighbour, and beside
               the F1 request (790 one-token chunks, every other one hidden, `<focus
               C1-C790>` for 100 tokens), in 7 interleaved rounds, while /da/requests/ID and
               /da/state are asked every 0.25 s; the adversary's 1 MB layout (510k hidden
               entries) must be a 400
  flags        a director with allowed_token_ids or bad_words (F11), truncate_prompt_tokens
               with a layout without prompt_len (F12): each must be a 400, never a 200 whose
               tokens the request did not ask for
  unknown      /da/requests/unknown and ?ranks=all must be 404
  reused_id    one da_id twice in a row (prompts of different lengths): after the server's
               stop, the trace must hold both runs, each with its own entry and every token
               (`trace_after_stop`, called once the server is stopped)

Counted into the run's totals: 5xx, unflagged_changes (a 200 where a 400 was due), the
neighbour's slowdown beside the F1 request (goal: at most 2x alone), files_lost (a trace that
does not load, or misses a run or a token).
"""

from __future__ import annotations

import json
import statistics
import threading
import time

ROUNDS = 7


def _plain_time(d, ids: list[int]) -> float:
    t0 = time.perf_counter()
    r = d.http.post(d.url + "/v1/completions", json={
        "model": d.model, "prompt": ids, "max_tokens": 8, "ignore_eos": True,
        "temperature": 0})
    d.n["errors_5xx"] += r.status_code >= 500
    return time.perf_counter() - t0


def _hostile_body(d, k: int, plain: bool = False) -> dict:
    ids = d.seed.token_ids
    spans = [[a, a + 1] for a in range(10, 800)]
    body = {"model": d.model, "prompt": ids, "max_tokens": 100, "ignore_eos": True,
            "temperature": 0}
    if not plain:
        body["vllm_xargs"] = {
            "da_layout": json.dumps({"block_size": 32, "chunk_spans": spans,
                                     "hidden": list(range(2, 791, 2))}),
            "da_director": json.dumps([[0, "<focus C1-C790>"]]), "da_id": f"stall-{k}"}
    return body


def _beside(d, k: int, plain_neighbour: bool) -> tuple[float, dict]:
    """The plain request's time while the neighbour runs, and what /da/* answered meanwhile."""
    seen: dict = {"polls": 0, "statuses": {}, "slowest_poll_s": 0.0}
    done = threading.Event()

    def neighbour():
        r = d.http.post(d.url + "/v1/completions", json=_hostile_body(d, k, plain_neighbour))
        d.n["errors_5xx"] += r.status_code >= 500
        seen["neighbour_status"] = r.status_code
        done.set()

    def poll():
        while not done.is_set():
            for path in (f"/da/requests/stall-{k}", "/da/state"):
                t0 = time.perf_counter()
                r = d.http.get(d.url + path)
                seen["slowest_poll_s"] = max(seen["slowest_poll_s"], time.perf_counter() - t0)
                seen["polls"] += 1
                seen["statuses"][str(r.status_code)] = seen["statuses"].get(
                    str(r.status_code), 0) + 1
                d.n["errors_5xx"] += r.status_code >= 500
            time.sleep(0.25)

    threads = [threading.Thread(target=neighbour), threading.Thread(target=poll)]
    for t in threads:
        t.start()
    time.sleep(1.0)                     # the neighbour is in the engine by now
    took = _plain_time(d, d.seed.token_ids[:40])
    for t in threads:
        t.join()
    return took, seen


def stall(d) -> dict:
    huge = {"da_layout": json.dumps({"block_size": 32, "chunk_spans": [[a, a + 1] for a in
                                                                       range(10, 890)],
                                     "hidden": [1] * 510_000}, separators=(",", ":"))}
    r = d.send("/v1/completions", {"model": d.model, "prompt": d.seed.token_ids,
                                   "max_tokens": 8, "vllm_xargs": huge})
    refused_1mb = r is not None and r.status_code == 400
    d.n["unflagged_changes"] += not refused_1mb
    # Rounds of (alone, beside a plain neighbour, beside the F1 request), interleaved so the
    # machine's load (shared, 2 cores) drifts over all three alike; medians compared.
    alone, benign, hostile, polls = [], [], [], []
    for k in range(ROUNDS):
        alone.append(_plain_time(d, d.seed.token_ids[:40]))
        benign.append(_beside(d, 100 + k, True)[0])
        took, seen = _beside(d, k, False)
        hostile.append(took)
        polls.append(seen)
    med = statistics.median
    return {"refused_1mb_hidden_layout": refused_1mb, "rounds": ROUNDS,
            "plain_alone_s": [round(x, 3) for x in alone],
            "plain_beside_plain_s": [round(x, 3) for x in benign],
            "plain_beside_f1_s": [round(x, 3) for x in hostile],
            "slowdown_beside_f1": round(med(hostile) / med(alone), 2),
            "slowdown_beside_plain": round(med(benign) / med(alone), 2),
            "f1_over_plain_neighbour": round(med(hostile) / med(benign), 2),
            "da_polls_during_f1": polls}


def flags(d) -> dict:
    from da_lab.core.wire import director_to_wire, layout_to_wire

    vx = {"da_layout": layout_to_wire(d.seed.layout, with_prompt_len=False),
          "da_director": director_to_wire([(0, "<focus C3>")])}
    out = {}
    for name, extra in (("allowed_token_ids", {"allowed_token_ids": list(range(50, 90))}),
                        ("bad_words", {"bad_words": ["focus"]})):
        r = d.send("/v1/completions", {"model": d.model, "prompt": d.seed.token_ids,
                                       "max_tokens": 12, "vllm_xargs": dict(vx), **extra})
        out[name] = None if r is None else r.status_code
    r = d.send("/v1/completions", {"model": d.model, "prompt": d.seed.token_ids,
                                   "max_tokens": 12, "truncate_prompt_tokens": 400,
                                   "vllm_xargs": {"da_layout": vx["da_layout"]}})
    out["truncate_prompt_tokens"] = None if r is None else r.status_code
    d.n["unflagged_changes"] += sum(v == 200 for v in out.values())
    return out


def unknown(d) -> dict:
    out = {p: d.http.get(d.url + p).status_code
           for p in ("/da/requests/unknown-57", "/da/requests/unknown-57?ranks=all")}
    d.n["errors_5xx"] += sum(v >= 500 for v in out.values())
    d.n["wrong_status"] += sum(v != 404 for v in out.values())
    return out


def reused_id(d) -> dict:
    """Two runs under one da_id, one after the other; the tokens each got, for the trace."""
    from da_lab.core.layout import seed_texts

    long = d.client.prompt(seed_texts()[1] + seed_texts()[1][:4], "What is the value of "
                                                                   "key 31?")
    runs = []
    for p, tags in ((d.seed, [(2, "<focus C3>")]), (long, [(2, "<local>")])):
        reply = d.client.send(p, tags=tags, max_tokens=20, ignore_eos=True,
                              request_id="reused-57")
        runs.append({"prompt_len": len(p.token_ids), "tokens": reply.token_ids})
    return {"runs": runs}


def trace_after_stop(path, reused: dict) -> dict:
    """The server's trace once it stopped: loads whole, and holds each run of the reused id."""
    from da_lab.trace import TraceError, load

    try:
        tr = load(path)
    except TraceError as e:
        return {"loads": False, "error": str(e)[:300], "files_lost": 1}
    added = {a["req"]: a for r in tr for a in r.added}
    names = ["reused-57", "reused-57#2"]
    got = [[t for r in tr for h in r.requests if h.req == n for t in (h.new_token_ids or [])]
           for n in names]
    whole = all(n in added and added[n]["prompt_len"] == run["prompt_len"]
                and g == run["tokens"] for n, g, run in zip(names, got, reused["runs"],
                                                            strict=True))
    return {"loads": True, "records": len(tr.records), "requests_added": len(added),
            "reused_id_runs_whole": whole, "files_lost": int(not whole)}
