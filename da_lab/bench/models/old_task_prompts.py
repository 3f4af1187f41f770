"""Write the previous SmolLM2-DA task (people and towns, `da_lab/training/data/nl_task.py` as of
commit e5c576c, before issue 26) as a `da-lab eval --prompts` file, so a delta can be measured
on the distribution the previous one was trained and evaluated on ("in-distribution" for it).

    python -m da_lab.bench.models.old_task_prompts --n 64 > /tmp/old-task.jsonl
    da-lab eval --model smollm2-da --prompts /tmp/old-task.jsonl --no-base --json --out F

The old generator is read from git history (no copy of it is kept in the tree). Its chunks are
"Document Ck: <text>\\n", the same as nl_task.user_prompt's, so the prompts rebuilt from the
file are token for token the old ones (checked here for every prompt).
"""

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMMIT = "e5c576c"


def old_module():
    src = subprocess.run(["git", "show", f"{COMMIT}:da_lab/training/data/nl_task.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    f = Path(tempfile.mkdtemp()) / "old_nl_task.py"
    f.write_text(src)
    spec = importlib.util.spec_from_file_location("old_nl_task", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    from da_lab.training.data import nl_task as N
    from da_lab.training.eval import eval_prompts as P

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    args = ap.parse_args()
    old = old_module()
    for i, s in enumerate(old.held_out(args.n)):
        docs = [c.split(": ", 1)[1].rstrip("\n") for c in s.prompt.chunks]
        keys = set(s.keys)
        wrong = [c for c in s.meta["candidates"] if c not in keys]
        rec = {"id": f"old-task:{old.EVAL_SEED}:{i}", "set": f"old-task/{s.kind}",
               "documents": docs, "question": s.meta["question"],
               "answer": list(s.meta["values"]), "needs": list(s.directive.chunks),
               "wrong": wrong}
        t = P.to_sample(rec)
        assert t.prompt.token_ids == s.prompt.token_ids, rec["id"]
        assert N.answer_correct(s.answer, t), rec["id"]
        sys.stdout.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
