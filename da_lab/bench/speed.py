"""Feel the speed: decode step times under GLOBAL and under FOCUS at a long context, measured
now, on this machine, with the CPU default (or whatever engine the Lab starts).

    python -m da_lab.bench.speed [--chunk-blocks 14] [--steps 60]   -> one JSON document on stdout

Runs in its own process when called from a notebook (`measure()`), so the notebook's live Lab
keeps running: vLLM allows one in-process engine per process.
"""

from __future__ import annotations

import argparse
import json
import sys


def time_modes(chunk_blocks: int = 14, steps: int = 60) -> dict:
    from da_lab.core.layout import build_prompt, seed_texts
    from da_lab.engine.lab import Lab

    head, chunks, tail = seed_texts()
    n_blocks = 1 + 12 * chunk_blocks + 1 + -(-steps // 32) + 2
    lab = Lab(num_blocks=n_blocks + 1, max_model_len=n_blocks * 32, record_rows=False)
    try:
        prompt = build_prompt(lab.encode, head, chunks, tail, filler_id=lab.encode("\n")[0],
                              bos_id=lab.tokenizer.bos_token_id, chunk_blocks=chunk_blocks)
        out = {"context_tokens": len(prompt.token_ids), "engine": lab.engine_name,
               "runner": lab.runner_class, "modes": {}}
        for name, tags in (("global", []), ("focus", [(0, "<focus C3>")])):
            rid = lab.add_request(prompt, tags=tags, max_tokens=steps)
            ms, read = [], []
            for rec in lab:
                r = rec.request(rid)
                if r and r.mode == name and r.query_len == 1:
                    ms.append(rec.wall_s * 1e3)
                    read.append(r.blocks_read)
            out["modes"][name] = {"step_ms": ms, "blocks_read": read}
        return out
    finally:
        lab.shutdown()


def measure(chunk_blocks: int = 14, steps: int = 60) -> dict:
    """time_modes() in a fresh process (the caller may hold a live Lab)."""
    from da_lab.engine.child import run_json

    return run_json(["-m", "da_lab.bench.speed", "--chunk-blocks", str(chunk_blocks),
                     "--steps", str(steps)], timeout=900, what="speed run")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chunk-blocks", type=int, default=14)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    from da_lab.engine.env import json_stdout

    with json_stdout() as out:         # engine logs to stderr, the JSON alone to stdout
        out.write(json.dumps(time_modes(args.chunk_blocks, args.steps)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
