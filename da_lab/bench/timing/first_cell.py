"""Lesson 06's first cell on the CPU, per model: a fresh Python process imports torch and vLLM,
finds the model's folder in the cache (`model_path`) and starts the engine the way the cell does
(float32, 32-token blocks, eager, 160 KV blocks), and says how long each part took.

    python -m da_lab.bench.timing.first_cell --models smollm2-da,gemma3 --repeats 2 \\
        --out bench/results/first-cell-06-cpu-<date>.json

Two ways to start: `lab` is the cell itself (`one_lab(model_path(name), num_blocks=160)`: the
DA hook loaded as vLLM's plugin), `plain` is vLLM alone with the same arguments
(VLLM_PLUGINS=none); a hybrid model (Gemma 3) runs both since the hook masks its global
layers (issue 55; before, the hook refused sliding-window layers). Each start runs in its own
process, the models taken in turn, with the 1-minute load average at its start and end (the
2 cores are shared: the load says how busy they were).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

T0 = time.perf_counter()


def child(model: str, mode: str) -> dict:
    """One first cell in this process (a fresh one): its parts' seconds."""
    load0 = os.getloadavg()[0]
    import torch  # noqa: F401
    import vllm  # noqa: F401

    t_import = time.perf_counter()
    from da_lab.models.tiny import model_path

    folder = model_path(model)
    t_path = time.perf_counter()
    if mode == "lab":
        from da_lab.engine.one_lab import one_lab

        lab = one_lab(folder, num_blocks=160)
        llm_s = lab.start_s
        lab.shutdown()
    else:
        from vllm import LLM

        from da_lab.engine import validate

        t = time.perf_counter()
        llm = LLM(model=str(folder), dtype="float32", block_size=32, seed=0,
                  enforce_eager=True, num_gpu_blocks_override=160,
                  max_model_len=validate.max_model_len(str(folder), 160, 32, None),
                  enable_prefix_caching=True)
        llm_s = time.perf_counter() - t
        del llm
    t_end = time.perf_counter()
    return {"model": model, "mode": mode, "import_s": round(t_import - T0, 2),
            "model_path_s": round(t_path - t_import, 2), "llm_start_s": round(llm_s, 2),
            "cell_s": round(t_end - T0, 2),
            "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.timing.first_cell",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2-da,gemma3")
    ap.add_argument("--modes", default="lab,plain",
                    help="lab (the cell, with the hook) and/or plain (vLLM alone)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("FIRST_CELL " + json.dumps(child(*args.child)), flush=True)
        return 0
    runs = []
    for _ in range(args.repeats):
        for model in args.models.split(","):
            for mode in args.modes.split(","):
                env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0",
                           HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
                if mode == "plain":
                    env["VLLM_PLUGINS"] = "none"
                t = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "da_lab.bench.timing.first_cell",
                                    "--child", model, mode], env=env, capture_output=True,
                                   text=True, timeout=1800)
                line = next((x for x in p.stdout.splitlines() if x.startswith("FIRST_CELL ")),
                            None)
                rec = (json.loads(line[11:]) if line else
                       {"model": model, "mode": mode, "error": p.stderr[-2000:]})
                rec["process_s"] = round(time.perf_counter() - t, 2)
                runs.append(rec)
                print(json.dumps(rec), flush=True)
    doc = {"command": "python -m da_lab.bench.timing.first_cell " + " ".join(
        sys.argv[1:] if argv is None else argv),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": len(os.sched_getaffinity(0)), "runs": runs}
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
