"""Benchmark: `Lab.step()` throughput on the CPU default, recording off and on, and trace size.

    .venv/bin/python -m da_lab.bench.timing.lab_cpu > bench/results/lab_cpu.txt
    .venv/bin/python -m da_lab.bench.timing.lab_cpu --model smollm2-da --steps 300 \
        > bench/results/lab_cpu_smollm2-da.txt

One seed-scenario request (focus, local, global tags) decoded for --steps steps per
configuration, in one process, back to back: (1) stock-like engine loop `engine.step()` with the
hook loaded but no record kept beyond the hook's own, (2) `Lab.step()` not recording, (3)
`Lab.step()` recording a .jsonl.gz trace. Reports steps/s and trace bytes per 1,000 steps.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

from da_lab.engine.env import LOG_TO_STDERR, apply_env

apply_env(LOG_TO_STDERR)          # before vLLM is imported


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--model", help="a model name (da_lab.models.tiny) or folder; default: "
                                    "the lab's default model")
    args = ap.parse_args()
    from da_lab.cli import SEED_TAGS
    from da_lab.engine.lab import Lab
    from da_lab.models.tiny import model_path

    lab = Lab(model_path(args.model) if args.model else None)
    prompt = lab.seed_prompt()
    n = min(args.steps, lab.max_model_len - len(prompt.token_ids))
    res = {}
    tmp = tempfile.mkdtemp()
    for name in ("engine_step", "lab_step", "lab_step_recording"):
        path = os.path.join(tmp, "t.jsonl.gz")
        if name == "lab_step_recording":
            lab.record(path)
        lab.add_request(prompt, tags=SEED_TAGS, max_tokens=n)
        lab.step()                                 # prefill, not timed
        t0 = time.perf_counter()
        k = 0
        while lab.has_unfinished():
            if name == "engine_step":
                lab.engine.step()
                lab.session.discard_steps()
            else:
                lab.step()
            k += 1
        res[name] = k / (time.perf_counter() - t0)
        if name == "lab_step_recording":
            lab.stop_recording()
            res["bytes_per_1000_steps"] = os.path.getsize(path) * 1000 / (k + 1)
    model, engine, cores = lab.model, lab.engine_name, len(os.sched_getaffinity(0))
    lab.shutdown()
    print(f"# {engine}, model {Path(model).name} ({model}), float32, {cores} CPU cores; one "
          f"seed-scenario request, {n} decode steps per configuration")
    print(f"engine.step() loop (hook on, no lab records): {res['engine_step']:7.1f} steps/s")
    print(f"Lab.step(), not recording:                    {res['lab_step']:7.1f} steps/s")
    print(f"Lab.step(), recording .jsonl.gz:              {res['lab_step_recording']:7.1f} steps/s")
    print(f"trace size: {res['bytes_per_1000_steps'] / 1024:.1f} KiB per 1,000 steps "
          f"(staged rows, slot mapping, KV changes)")


if __name__ == "__main__":
    main()
