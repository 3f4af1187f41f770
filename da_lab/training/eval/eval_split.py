"""Split one `da-lab eval --prompts` document into one document per group of sets.

A prompts file may hold several sets at once (one engine run for all of them): "in-domain",
"held-out-domains", "hand-written/lighthouses", ... A group is a set's name up to its first "/"
("hand-written"), or up to its second under "paper/" (the same sets in the paper's protocol,
smollm2_gpu.sh PAPER_SETS=1: "paper/hand-written", written as "paper-hand-written"). Each
group's document is the eval document with that group's rows only and its summary recomputed by
the same function (evaluate.summary), so its numbers are exactly what `da-lab eval` would print
for those rows.

    python -m da_lab.training.eval.eval_split EVAL.json [--out-dir DIR] [--stem NAME]
        -> DIR/NAME-<group>.json for every group
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from da_lab.training.eval.evaluate import KEYS, load_document, summary

SUMMARY = (*KEYS, "foreign_word_rate", "ablation_n", "refused_runs", "wrong_tag_chance",
           "by_kind", "by_set")


def group_of(set_name: str | None) -> str:
    parts = (set_name or "ungrouped").split("/")
    return "/".join(parts[:2]) if parts[0] == "paper" and len(parts) > 1 else parts[0]


def split(doc: dict) -> dict[str, dict]:
    """{group: eval document of its rows}."""
    groups: dict[str, list[dict]] = {}
    for r in doc["rows"]:
        groups.setdefault(group_of(r.get("set")), []).append(r)
    out = {}
    for name, rows in groups.items():
        s = summary([dict(r, _fractions=_fractions(r)) for r in rows])
        part = dict(doc, rows=rows, group=name, split_from=doc.get("command"))
        part.update({k: s[k] for k in SUMMARY})
        out[name] = part
    return out


def _fractions(row: dict) -> list[float]:
    """A row keeps only the mean of its per-step fractions; one value per row then stands
    for its steps (the group's blocks-read fraction is a mean over rows, not steps)."""
    f = row.get("blocks_read_fraction_after_tag")
    return [] if f is None else [f]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.eval.eval_split",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("doc")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--stem", default=None)
    args = ap.parse_args(argv)
    src = Path(args.doc)
    doc = load_document(src)
    out_dir = Path(args.out_dir) if args.out_dir else src.parent
    stem = args.stem or src.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, part in split(doc).items():
        f = out_dir / f"{stem}-{name.replace('/', '-')}.json"
        f.write_text(json.dumps(part, indent=1) + "\n")
        print(f"{f}: n={part['n']} tag {part['tag_accuracy']:.3f} DA answer "
              f"{part['da_answer_accuracy']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
