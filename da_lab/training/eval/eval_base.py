"""The base model's side of `da-lab eval` (nl task): what a user would do without DA.

SmolLM2-135M-Instruct as shipped (`model_path("smollm2")`), every block visible, each
question asked with a plain instruction prompt (`nl_task.plain_prompt`: the model's own chat
template and default system prompt, the documents unpadded, "Answer in one sentence."); the
parent builds those prompts and hands their token ids over.

It needs an engine of its own, and vLLM keeps one in-process engine per process, so it runs in
a child (`base_texts` starts it; `python -m da_lab.training.eval.eval_base ...` is the child) and
hands back one JSON document: the reply of every prompt and the run's provenance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from da_lab.engine.env import LOG_TO_STDERR, apply_env, quiet_stdout


def parse_range(text: str | None, what: str) -> tuple[int, int] | None:
    """"LO,HI" or "N" -> (lo, hi); None stays None; anything else is a clear ValueError."""
    if text is None:
        return None
    try:
        parts = [int(x) for x in str(text).split(",")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or parts[0] < 1 or parts[0] > parts[1]:
        raise ValueError(f"{what} takes N or LO,HI with 1 <= LO <= HI, not {text!r}")
    return parts[0], parts[1]


def base_texts(prompts: list[list[int]], wave: int, max_tokens: int, model: str = "smollm2",
               timeout: float = 7200, async_scheduling: bool = False) -> dict:
    """Run the child on these plain prompts (token ids, handed over in a temporary file); its
    document: {"texts": [...], "engine", "device", "model", "wall_s"}."""
    import tempfile
    from pathlib import Path

    from da_lab.engine.child import run_json

    with tempfile.TemporaryDirectory() as d:
        ids = Path(d) / "prompts.json"
        ids.write_text(json.dumps(prompts))
        argv = ["-m", "da_lab.training.eval.eval_base", "--ids", str(ids), "--wave", str(wave),
                "--max-tokens", str(max_tokens), "--model", model,
                *(["--async-scheduling"] if async_scheduling else [])]
        return run_json(argv, timeout=timeout, what="the base model's all-blocks run")


def run(prompts: list[list[int]], wave: int, max_tokens: int, model: str,
        async_scheduling: bool = False) -> dict:
    from da_lab.models.tiny import model_path
    from da_lab.training.eval.eval_engine import Run, run_batch, scheduling, start_lab

    t0 = time.perf_counter()
    lab = start_lab(model_path(model), [len(p) for p in prompts], max_tokens, wave, 1,
                    async_scheduling)
    try:
        texts: list[str] = []
        for w in range(0, len(prompts), wave):
            part = prompts[w: w + wave]
            outs = run_batch(lab, [Run(str(i), p) for i, p in enumerate(part)], max_tokens)
            texts += [outs[str(i)].text for i in range(len(part))]
        doc = {"texts": texts, "engine": lab.engine_name, "device": lab.device,
               "model": model, "model_folder": lab.model, "runner": lab.runner_class,
               "async_scheduling": scheduling(lab), "engine_start_s": round(lab.start_s, 1)}
    finally:
        lab.shutdown()
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    return doc


def main(argv=None) -> int:
    apply_env(LOG_TO_STDERR)
    out = quiet_stdout()          # fd 1 carries only the document; engine prints go to stderr
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.eval.eval_base")
    ap.add_argument("--ids", required=True, help="JSON file: a list of prompts (token ids)")
    ap.add_argument("--wave", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--async-scheduling", action="store_true")
    args = ap.parse_args(argv)
    from pathlib import Path

    prompts = json.loads(Path(args.ids).read_text())
    doc = run(prompts, args.wave, args.max_tokens, args.model, args.async_scheduling)
    out.write(json.dumps(doc) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
