"""Feel the speed: decode step times under GLOBAL and under FOCUS at a long context, measured
now, on this machine, with the CPU default (or whatever engine the Lab starts).

    python -m da_lab.bench.speed [--chunk-blocks 14] [--steps 60] [--out FILE.json]
                                                 -> one JSON document on stdout (and in FILE)

Decode steps 20-30 of each mode run under torch's profiler: where a step's time goes (the
attention kernel's share of it, the other ops, the Python around them).

Runs in its own process when called from a notebook (`measure()`), so the notebook's live Lab
keeps running: vLLM allows one in-process engine per process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

PROFILED = (20, 30)     # decode steps [a, b) of each mode run under torch's profiler


def _where_time_goes(prof, n_steps: int, wall_ms: float) -> dict:
    """Per decode step: the profiled wall time, the attention ops' own CPU time (vLLM's CPU
    backend names its ops cpu_attn* / cpu_attention*), all torch ops' (the rest of a step is
    Python: scheduling, the hook, sampling, outputs), and the five ops that cost most."""
    ops = [(e.key, e.self_cpu_time_total / 1e3 / n_steps) for e in prof.key_averages()]
    attn = sum(ms for k, ms in ops if "attn" in k.lower() or "attention" in k.lower())
    step = wall_ms / n_steps
    top = sorted(ops, key=lambda x: -x[1])[:5]
    return {"steps": n_steps, "step_ms": round(step, 3), "attention_ms": round(attn, 3),
            "attention_share": round(attn / step, 4),
            "torch_ops_ms": round(sum(ms for _, ms in ops), 3),
            "top_ops_ms": [[k, round(ms, 3)] for k, ms in top]}


def time_modes(chunk_blocks: int = 14, steps: int = 60) -> dict:
    from torch.profiler import ProfilerActivity, profile

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
            da_id = lab.add_request(prompt, tags=tags, max_tokens=steps)
            ms, read, prof, prof_ms = [], [], None, 0.0
            for rec in lab:
                r = rec.request(da_id)
                if r and r.mode == name and r.query_len == 1:
                    ms.append(rec.wall_s * 1e3)
                    read.append(r.blocks_read)
                    if len(ms) > PROFILED[0] and prof is not None:
                        prof_ms += rec.wall_s * 1e3
                    if len(ms) == PROFILED[0]:      # the next steps run profiled
                        prof = profile(activities=[ProfilerActivity.CPU])
                        prof.__enter__()
                    elif len(ms) == PROFILED[1] and prof is not None:
                        prof.__exit__(None, None, None)
                        out["modes"].setdefault(name, {})["profile"] = _where_time_goes(
                            prof, PROFILED[1] - PROFILED[0], prof_ms)
            out["modes"].setdefault(name, {}).update(step_ms=ms, blocks_read=read)
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
    ap.add_argument("--out", help="also write the result, with the command, date and the "
                    "machine's load, to this JSON file (bench/results/speed-cpu-<date>.json)")
    args = ap.parse_args()
    from da_lab.engine.env import json_stdout

    load0 = os.getloadavg()
    with json_stdout() as out:         # engine logs to stderr, the JSON alone to stdout
        doc = time_modes(args.chunk_blocks, args.steps)
        out.write(json.dumps(doc) + "\n")
    if args.out:
        doc = {"command": "python -m da_lab.bench.speed " + " ".join(sys.argv[1:]),
               "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "host": {"cpus": os.cpu_count(), "load_avg_before": load0,
                        "load_avg_after": os.getloadavg()}, **doc}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
