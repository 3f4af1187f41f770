"""A model's bf16 gain, measured on the CPU: the numbers the logprob verdict's bound is derived
from (docs/correctness.md, "The logprob verdict").

    python -m da_lab.checks.bf16_gain --model tiny \
        --case bench/results/gpu-tests-2026-11-30-final/tiny-v1-eager.json
    python -m da_lab.checks.bf16_gain --model llama-1b-dummy --case ...llama-1b-dummy-v1-eager.json

A committed GPU run's token streams and mask histories (its seed-prompt scenarios) are replayed
through the float32 references (masked, unmasked, one block off) and the bfloat16 one, which
stands in for a bf16 engine: its top-20 are the "engine's" top-k. Reported: the gain
g = r16 / u (d of the bf16 reference per unit of logit scale and of unit roundoff) beside the
depth law's 2.3 sqrt(10 L / 3), and the logprob verdict with each reference as the candidate.
llama-1b-dummy is built here from the GPU run's seed with this machine's generator (same
distribution, other numbers), into its own folder.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from da_lab.checks.logprob_verdict import (
    TOPK,
    UNIT_ROUNDOFF,
    lp_rows,
    renorm,
    replay,
    score_logprobs,
)

KEEP = ("passed", "positions", "informative", "informative_masked", "masked_steps",
        "bound_violations", "bound_violations_masked", "d", "d_over_bound", "bound",
        "margin", "margin_over_bound", "r16", "bf16_gain")


def _model(name: str) -> str:
    if name == "tiny":
        from da_lab.models.tiny import model_path

        return str(model_path("da-tiny-v1"))
    if name == "llama-1b-dummy":
        from da_lab.models.dummy import build

        return str(build(name, folder="/tmp/da_lab-llama-1b-dummy-cpu", device="cpu"))
    return name


def _prompt(path: str):
    from transformers import AutoTokenizer

    from da_lab.core.layout import BLOCK_SIZE, build_prompt, seed_texts

    tok = AutoTokenizer.from_pretrained(path)

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    head, chunks, tail = seed_texts(12)
    return build_prompt(enc, head, chunks, tail, filler_id=enc("\n")[0],
                        bos_id=tok.bos_token_id, block_size=BLOCK_SIZE, chunk_blocks=2)


def measure(path: str, case_file: str, names: list[str] | None) -> dict:
    """The bf16-reference-as-engine case of `case_file`'s seed-prompt requests, scored."""
    import torch

    from da_lab.checks.oracle import load_reference

    torch.set_float32_matmul_precision("highest")
    prompt = _prompt(path)
    bs = prompt.layout.block_size
    src = json.loads(Path(case_file).read_text())["requests"]
    names = names or [n for n in ("focus_local_global", "focus_only", "local_1") if n in src]
    docs = {n: {"tokens": src[n]["tokens"], "forced": src[n]["forced"],
                "history": src[n]["history"], "prompt_len": len(prompt.token_ids)}
            for n in names}
    bf16 = load_reference(path, dtype="bfloat16")
    b16 = {n: replay(bf16, prompt.token_ids, d, bs, float32=False) for n, d in docs.items()}
    del bf16
    for n, d in docs.items():            # the bf16 reference's top-k, as an engine's
        rows = b16[n]["masked"].double()
        ids = rows.topk(TOPK + 1, dim=1).indices.tolist()
        d["topk"] = [[k, list(renorm(rows[i, k].tolist()))] for i, k in enumerate(ids)]
    ref = load_reference(path)
    for n, d in docs.items():
        d["lp_refs"] = lp_rows(d, replay(ref, prompt.token_ids, d, bs, float32=True))
        d["lp_refs"].update(lp_rows(d, b16[n]))
    cfg = ref.config
    case = {"engine_dtype": "bfloat16", "requests": docs,
            "inner_dim": max(cfg.hidden_size, getattr(cfg, "intermediate_size", 0) or 0)}
    out = {c: {k: v for k, v in score_logprobs(case, c).items() if k in KEEP}
           for c in ("masked", "one_block_off", "unmasked")}
    layers = cfg.num_hidden_layers
    return {"model": path, "case": case_file, "requests": names, "layers": layers,
            "bf16_gain": out["masked"]["bf16_gain"],
            "depth_law_gain_a1": round(2.3 * math.sqrt(10 * layers / 3), 2),
            "unit_roundoff": UNIT_ROUNDOFF["bfloat16"], "verdict": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.checks.bf16_gain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="tiny, llama-1b-dummy or a model folder")
    ap.add_argument("--case", required=True, help="a gpu_tests case file (raw folder)")
    ap.add_argument("--requests", help="comma-separated request names (default: the seed "
                                       "prompt's three)")
    ap.add_argument("--out", help="write the JSON here too")
    args = ap.parse_args(argv)
    res = measure(_model(args.model), args.case,
                  args.requests.split(",") if args.requests else None)
    text = json.dumps(res, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
