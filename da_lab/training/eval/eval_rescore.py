"""Rescore an eval document with today's answer rule, from the prompts it ran on.

An eval document keeps every run's text, not the prompts' candidate values, so when the answer
rule (`nl_task.answer_correct`) changes, its verdicts are recomputed here from the prompts file
the run used (`smollm2_gpu.sh prompts` writes it again, byte for byte, in seconds). Each row is
matched by id; a row whose prompt no longer has the same question and expected values (the
generator changed since) is left as it was and counted. The summary is recomputed by the eval's
own function, as `eval_split` does.

    python -m da_lab.training.eval.eval_rescore EVAL.json[.gz] PROMPTS.jsonl [PROMPTS2.jsonl ...]
        [--out RESCORED.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval.eval_split import SUMMARY, _fractions
from da_lab.training.eval.eval_tasks import NLTask
from da_lab.training.eval.evaluate import answer_text, load_document, summary

# (row's verdict, the text it judged, whether that text is a whole reply to read the answer of)
VERDICTS = (("correct", "answer", False), ("all_blocks_correct", "all_blocks_text", True),
            ("base_correct", "base_text", False), ("wrong_tag_correct", "wrong_tag_text", True),
            ("hidden_chunk_correct", "hidden_chunk_text", True))


def rescore_row(row: dict, s, correct) -> list[str]:
    """Recompute the row's verdicts in place; the names of those that changed."""
    changed = []
    for key, text_key, whole in VERDICTS:
        text = row.get(text_key)
        if row.get(key) is None or text is None:
            continue                    # a run that did not happen, or was refused
        if whole:
            text = answer_text(text, row["n_chunks"], s.meta.get("protocol", "card"))[1]
        new = correct(text, s)
        if new != row[key]:
            changed.append(f"{key} {row[key]} -> {new}")
            row[key] = new
    return changed


def rescore(doc: dict, samples: dict) -> tuple[dict, list[str]]:
    """(the rescored document, one line per changed verdict, then one for unmatched rows)."""
    task = NLTask()
    rows, report, unmatched = [dict(r) for r in doc["rows"]], [], 0
    for r in rows:
        s = samples.get(r["id"])
        if s is None or list(s.keys) != list(r["expected_values"]) or (
                r.get("question") is not None and s.meta["question"] != r["question"]):
            unmatched += 1
            continue
        for change in rescore_row(r, s, task.correct):
            report.append(f"{r['id']}: {change}: {r.get('answer')!r}")
    if unmatched:
        report.append(f"{unmatched} of {len(rows)} rows have no matching prompt: left as they were")
    out = dict(doc, rows=rows, rescored={"rule": task.answer_rule, "changes": report})
    out.update({k: v for k, v in summary([dict(r, _fractions=_fractions(r)) for r in rows]).items()
                if k in SUMMARY})
    return out, report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.eval.eval_rescore",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("doc")
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--out", default=None, help="write the rescored document here")
    args = ap.parse_args(argv)
    samples = {s.meta["id"]: s for p in args.prompts for s in P.samples(p)}
    doc = load_document(Path(args.doc))
    new, report = rescore(doc, samples)
    print("\n".join(report) or "no verdict changed")
    for k in ("da_answer_accuracy", "all_blocks_answer_accuracy", "wrong_tag_answer_accuracy",
              "hidden_chunk_answer_accuracy"):
        if doc.get(k) is not None:
            print(f"{k}: {doc[k]:.3f} -> {new[k]:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(new, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
