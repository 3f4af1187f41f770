"""The long reliability run (issue 14): fuzzed tag streams, many concurrent requests on the
default 64-block cache against the masked oracle, many request lifecycles with per-request
state and RSS checked, and the malformed API/CLI calls.

    PYTHONPATH=. DA_LAB_MODEL=da-tiny-v1 python -m da_lab.bench.reliability.reliability [--quick]

Writes bench/results/reliability-<date>.json with the counts `crashes`, `stalls`,
`unflagged_mismatches`, `leaked_entries`, `tracebacks`, `server_deaths` and
`unauthenticated_da_routes` beside what was run (the server cases: reliability_server.py). The
goal is 0 for each. da-tiny-v1 (random weights, writes no tags of its own) is the model: the
director's tags are then the only masks, as in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

for k, v in {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
             "VLLM_CPU_KVCACHE_SPACE": "1", "DA_LAB_MODEL": "da-tiny-v1"}.items():
    os.environ.setdefault(k, v)

PIECES = ["<focus C3,C7>", "<local>", "<global>", "<local 2>", "<focus C1-C4>", "<focus C13>",
          "<", ">", "<<", "<foc", "<loc", "<glo", "us ", "C", ",", "-", " ", "\n", "x", "é",
          "12", "0", "<local 0>", "<focus c2 , C5>", "<global >", "<focus>", "<local x>"]


def fuzz(n_streams: int, seed: int = 0) -> dict:
    """Random streams fed whole and at random split points: 0 crashes, identical events."""
    from da_lab.core.tags import TagStream

    rng = random.Random(seed)
    crashes = differ = splits = 0

    def events(parts: list[str]) -> list[dict]:
        ts = TagStream(n_chunks=12)
        out = [e.to_dict() for p in parts for e in ts.feed(p)]
        return out + [{"buffer": ts.buffer, "directive": ts.directive.to_dict()}]

    for _ in range(n_streams):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
        try:
            whole = events([text])
            for _ in range(3):
                cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), rng.randint(1, 6))))
                parts = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)], strict=True)]
                splits += 1
                differ += events(parts) != whole
        except Exception:   # noqa: BLE001 - counted: the goal is none
            crashes += 1
    return {"streams": n_streams, "splits": splits, "crashes": crashes,
            "events_differ": differ}


def concurrent(lab, reference, n: int, max_tokens: int) -> dict:
    """`n` DA requests at once on the lab's cache, each checked against the masked oracle."""
    from da_lab.checks.oracle import check
    from da_lab.core.layout import build_prompt, seed_texts

    head, chunks, tail = seed_texts()
    filler = lab.encode("\n")[0]
    prompts = [build_prompt(lab.encode, f"Variant {k}. " + head, chunks, tail, filler_id=filler,
                            bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2)
               for k in range(4)]
    scripts = [[], [(2, "<focus C3,C7>")], [(1, "<local>")], [(3, "<local 1>"), (12, "<global>")]]
    lab.llm.reset_prefix_cache()
    da_ids = [lab.add_request(prompts[k % 4], tags=scripts[(k // 4) % 4], max_tokens=max_tokens)
            for k in range(n)]
    steps, budget = 0, 40 * n * max_tokens
    while lab.has_unfinished() and steps < budget:
        lab.step()
        steps += 1
    stalls = int(lab.has_unfinished())
    flagged = unflagged = matched = recomputed = 0
    for k, da_id in enumerate(da_ids):
        res, st = lab.result(da_id), lab.request_state(da_id)
        if not res["finished"] or st is None:
            continue
        r = check(reference, prompts[k % 4].token_ids, res["token_ids"], st.mask_history,
                  lab.block_size, forced=lab.requests[da_id]["forced"])
        flagged += res["recomputed_under_mask"]
        recomputed += any(s > 0 and e - s > 1 for s, e, _ in st.mask_history)
        if not r.mismatches_masked:
            matched += 1
        elif not res["recomputed_under_mask"]:
            unflagged += 1
    # And the cache: a plain request per prompt must equal the unmasked reference.
    cache_wrong = 0
    for p in prompts:
        da_id = lab.add_request(p, max_tokens=16)
        lab.run()
        cache_wrong += bool(check(reference, p.token_ids, lab.requests[da_id]["token_ids"], [],
                                  lab.block_size).mismatches_masked)
    return {"requests": n, "max_tokens": max_tokens, "num_blocks": lab.num_blocks,
            "steps": steps, "stalls": stalls, "matched_oracle": matched, "flagged": flagged,
            "recomputed": recomputed,
            "unflagged_mismatches": unflagged, "plain_after_wrong": cache_wrong}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def lifecycles(lab, n: int) -> dict:
    """`n` requests: steer-then-abort, abort after a step, run to the end; state and RSS."""
    from da_lab.checks.lifecycles import one_round
    from da_lab.core.layout import build_prompt, seed_texts
    from da_lab.engine.results import per_request_entries

    head, chunks, tail = seed_texts(2)
    small = build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                         bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2)
    done, rss, crashes = 0, [], 0
    while done < n:
        try:
            done += one_round(lab, small, short_tokens=3)
        except Exception:   # noqa: BLE001 - counted
            crashes += 1
            done += 30
        if done % 1500 == 0 or done >= n:
            rss.append(round(rss_mb(), 1))
    entries = per_request_entries(lab)
    return {"lifecycles": done, "crashes": crashes, "entries": entries,
            "leaked_entries": sum(entries.values()), "rss_mb": rss,
            "rss_growth_mb_after_first_1500": round(rss[-1] - rss[0], 1)}


def bad_api_calls(lab) -> dict:
    """Each must raise ValueError with a message; anything else counts as a traceback."""
    import dataclasses

    from da_lab.core.layout import build_prompt, seed_texts

    seed = lab.seed_prompt()
    head, chunks, tail = seed_texts()
    p16 = build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                       block_size=16)

    def plen(n):
        return dataclasses.replace(seed, layout=dataclasses.replace(seed.layout, prompt_len=n))

    lab.add_request(seed, max_tokens=4, request_id="busy")
    calls = [lambda: lab.add_request(p16), lambda: lab.add_request(plen(1400)),
             lambda: lab.add_request(plen(805)), lambda: lab.add_request(seed, max_tokens=0),
             lambda: lab.add_request(seed, tags=[(-5, "<local>")]),
             lambda: lab.add_request(seed, tags=[(500, "<local>")], max_tokens=20),
             lambda: lab.add_request(seed, max_tokens=10**6), lambda: lab.add_request([]),
             lambda: lab.add_request(seed, request_id="busy"), lambda: lab.abort("nope"),
             lambda: lab.steer("nope", "<local>"), lambda: lab.result("nope")]
    bad = 0
    for call in calls:
        try:
            call()
            bad += 1
        except ValueError as e:
            bad += not str(e)
        except Exception:   # noqa: BLE001 - counted
            bad += 1
    lab.run()
    return {"calls": len(calls), "tracebacks": bad}


def bad_cli_calls(workdir: Path) -> dict:
    """Each must exit non-zero with one `da-lab:` line and no traceback."""
    calls = [["demo", "--max-tokens", "0"], ["record", "--out", str(workdir / "x.txt")],
             ["record", "--out", str(workdir / "t.jsonl.gz"), "--chunk-blocks", "0"],
             ["demo", "--max-model-len", "0"], ["replay", str(workdir / "missing.jsonl.gz")],
             ["replay", str(workdir / "ok.jsonl.gz"), "--request", "nope"]]
    from da_lab.trace import TraceWriter

    with TraceWriter(workdir / "ok.jsonl.gz", {"provenance": {
            "vllm": "v", "device": "cpu", "model": "m", "runner": "r", "block_size": 32}}) as w:
        w.write({"step": 0, "added": [{"req": "r0"}], "requests": []})
    bad = 0
    for args in calls:
        out = subprocess.run([sys.executable, "-m", "da_lab.cli", *args], capture_output=True,
                             text=True, timeout=600)
        msgs = [x for x in out.stderr.splitlines() if x.startswith("da-lab:")]
        bad += out.returncode == 0 or "Traceback" in out.stderr or len(msgs) != 1
    return {"calls": len(calls), "tracebacks": bad}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=100_000)
    ap.add_argument("--concurrent", type=int, default=64)
    ap.add_argument("--lifecycles", type=int, default=10_000)
    ap.add_argument("--concurrent-tokens", type=int, default=224,
                    help="output tokens per concurrent request: long enough that the running "
                         "requests outgrow the 64 blocks and vLLM preempts some")
    ap.add_argument("--out", default=None, help="default bench/results/reliability-<date>.json")
    ap.add_argument("--no-server", action="store_true",
                    help="skip the server cases (da_lab/bench/reliability/reliability_server.py)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res: dict = {"command": " ".join(["python", "-m", "da_lab.bench.reliability.reliability",
                                      *sys.argv[1:]])}
    res["fuzz"] = fuzz(args.streams)
    from da_lab.checks.oracle import load_reference
    from da_lab.engine.lab import Lab
    from da_lab.models.tiny import build_tiny_model

    lab = Lab(build_tiny_model())
    try:
        res["provenance"] = lab.provenance()
        res["concurrent"] = concurrent(lab, load_reference(lab.model), args.concurrent,
                                       args.concurrent_tokens)
        res["lifecycles"] = lifecycles(lab, args.lifecycles)
        res["bad_api"] = bad_api_calls(lab)
    finally:
        lab.shutdown()
    with tempfile.TemporaryDirectory() as d:
        res["bad_cli"] = bad_cli_calls(Path(d))
    if not args.no_server:
        from da_lab.bench.reliability import reliability_server

        res["server"] = reliability_server.run(str(build_tiny_model()))
    res.update(crashes=res["fuzz"]["crashes"] + res["fuzz"]["events_differ"]
               + res["lifecycles"]["crashes"],
               stalls=res["concurrent"]["stalls"],
               unflagged_mismatches=res["concurrent"]["unflagged_mismatches"]
               + res["concurrent"]["plain_after_wrong"],
               leaked_entries=res["lifecycles"]["leaked_entries"],
               tracebacks=res["bad_api"]["tracebacks"] + res["bad_cli"]["tracebacks"]
               + res.get("server", {}).get("tracebacks", 0),
               server_deaths=res.get("server", {}).get("server_deaths"),
               unauthenticated_da_routes=res.get("server", {}).get("unauthenticated_da_routes"),
               wall_s=round(time.perf_counter() - t0, 1))
    if "server" in res:
        res["unflagged_mismatches"] += res["server"]["unflagged_mismatches"]
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out or Path(__file__).parents[1] / "results" / f"reliability-{day}.json")
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("crashes", "stalls", "unflagged_mismatches",
                                          "leaked_entries", "tracebacks", "server_deaths",
                                          "unauthenticated_da_routes", "wall_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
