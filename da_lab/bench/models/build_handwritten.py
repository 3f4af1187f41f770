"""Write bench/data/handwritten-prompts.jsonl from the hand-written sources in
bench/data/handwritten/: one Markdown file of documents per domain ("## doc <key>", then the
text; blank lines inside a document are paragraph breaks) and questions.md ("## q <id>" blocks
of `key: value` lines). Deterministic: a prompt's documents are its `docs` in an order shuffled
with its id as the seed, so the needed document sits anywhere.

    python da_lab/bench/models/build_handwritten.py        # rewrites the .jsonl (committed)

The documents and questions were written by hand for this file, in domains the training
generator (da_lab.training.data.nl_gen) has none of; nothing in the generator was tuned to them.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[3] / "bench" / "data"
SRC = HERE / "handwritten"
OUT = HERE / "handwritten-prompts.jsonl"


def documents() -> tuple[dict[str, str], dict[str, list[str]]]:
    """({key: text}, {file stem: [keys]})."""
    docs: dict[str, str] = {}
    files: dict[str, list[str]] = {}
    for f in sorted(SRC.glob("*.md")):
        if f.name == "questions.md":
            continue
        key = None
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.startswith("## doc "):
                key = line[len("## doc "):].strip()
                if key in docs:
                    sys.exit(f"{f}: document {key!r} defined twice")
                docs[key] = ""
                files.setdefault(f.stem, []).append(key)
            elif key is not None:
                docs[key] += line + "\n"
    return {k: v.strip() for k, v in docs.items()}, files


def questions() -> list[dict]:
    out: list[dict] = []
    for line in (SRC / "questions.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## q "):
            out.append({"id": line[len("## q "):].strip()})
        elif out and ":" in line:
            k, _, v = line.partition(":")
            out[-1][k.strip()] = v.strip()
    return out


def build() -> list[dict]:
    docs, files = documents()
    recs = []
    for q in questions():
        keys: list[str] = []
        for name in (x.strip() for x in q["docs"].split(",")):
            keys += files.get(name, [name] if name in docs else [])
            if name not in files and name not in docs:
                sys.exit(f"{q['id']}: no documents named {name!r}")
        random.Random(q["id"]).shuffle(keys)
        needs = [x.strip() for x in q.get("needs", "").split(",") if x.strip()]
        split = lambda v: [x.strip() for x in v.split(";") if x.strip()]  # noqa: E731
        rec = {"id": q["id"], "set": q["set"], "documents": [docs[k] for k in keys],
               "question": q["question"], "answer": split(q.get("answer", "")),
               "needs": [keys.index(k) + 1 for k in needs],
               "wrong": split(q.get("wrong", ""))}
        recs.append(rec)
    return recs


def main() -> None:
    recs = build()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs),
                   encoding="utf-8")
    print(f"{OUT}: {len(recs)} prompts")


if __name__ == "__main__":
    main()
