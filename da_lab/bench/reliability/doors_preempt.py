"""Issue 57 F2 on a real server (part of the doors run, doors.py): the eval's A/B on a
`da-lab serve` of 48 KV blocks. D is a DA request (<local> from output 0, 400 tokens); R is a
plain request whose prompt is D's prompt plus D's solo output. R goes first, D right after; R
runs to the engine's max_model_len, so together they outgrow the cache while both run: vLLM
preempts D (the newer), and D resumes once R is done, with R's blocks (K/V computed without
D's mask, under the hashes of D's own tokens) in the prefix cache. Every D whose tokens differ
from its solo run must carry the recompute flag.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

KEY = "sk-doors"


def ab(model: str, trials: int = 8, num_blocks: int = 48, n_out: int = 400) -> dict:
    from da_lab.client import DAClient
    from da_lab.core.layout import seed_texts
    from da_lab.serve.server_process import ServerProcess

    max_len = (num_blocks - 2) * 32
    res: dict = {"num_blocks": num_blocks, "max_model_len": max_len, "trials": trials,
                 "d_tokens": n_out}
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "server.log",
                            ["--model", model, "--api-key", KEY,
                             "--num-gpu-blocks-override", str(num_blocks),
                             "--max-model-len", str(max_len)],
                            env=dict(os.environ))
        try:
            c = DAClient(srv.url, api_key=KEY)
            rows = []
            for k in range(trials):
                # A prompt a few tokens longer each trial: the preemption lands at another
                # offset within a block (at a block boundary the old code took every position
                # from R's blocks and recomputed none: no flag).
                d = c.prompt(seed_texts()[1], "What is the value of key 31?" + " Please." * k)
                solo = c.send(d, tags=[(0, "<local>")], max_tokens=n_out, ignore_eos=True)
                rows.append(dict(_trial(c, d, solo.token_ids, k, max_len),
                                 prompt_len=len(d.token_ids)))
            c.close()
        finally:
            alive = srv.alive()
            log = srv.log()
            srv.stop()
    differ = [r for r in rows if r["differs"]]
    # vLLM's own shutdown race (doors.py says which), apart from every other traceback.
    vllm_dead = log.count("AsyncLLM output_handler failed")
    # A D that resumed recomputes past its prompt and is flagged: the flag counts the
    # preemptions (0 would mean the case was not exercised).
    res.update(flagged=sum(r["flagged"] for r in rows), differ_from_solo=len(differ),
               unflagged_mismatches=sum(not r["flagged"] for r in differ),
               errors=sum(r["error"] is not None for r in rows), rows=rows,
               server_alive=alive, tracebacks=log.count("Traceback") - vllm_dead,
               shutdown_vllm_engine_dead_tracebacks=vllm_dead)
    return res


def _trial(c, d, solo: list[int], k: int, max_len: int) -> dict:
    from da_lab.client.transport import ServerError

    row: dict = {"error": None}
    plain = d.token_ids + solo

    def r_run():
        try:
            c.send(plain, max_tokens=max_len - len(plain), ignore_eos=True)
        except ServerError as e:
            row["error"] = f"R: {e}"

    t = threading.Thread(target=r_run)
    t.start()
    time.sleep(0.5)                       # R is scheduled first
    try:
        reply = c.send(d, tags=[(0, "<local>")], max_tokens=len(solo), ignore_eos=True,
                       request_id=f"ab-{k}")
        row["differs"] = reply.token_ids != solo
        row["first_difference"] = next((i for i, (a, b) in enumerate(
            zip(reply.token_ids, solo, strict=False)) if a != b), None)
        row["flagged"] = "recompute_under_mask" in reply.stats.get("flags", [])
    except ServerError as e:
        row.update(error=f"D: {e}", differs=False, flagged=False)
    t.join()
    return row
