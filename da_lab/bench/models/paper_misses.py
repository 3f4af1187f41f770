"""Where the paper's format loses answers the card's keeps: one eval's rows in both dialects
(the same prompts, `smollm2_gpu.sh eval` with PAPER_SETS=1), compared prompt by prompt.

    python -m da_lab.bench.models.paper_misses CARD.json.gz PAPER.json.gz PAPER_PROMPTS.jsonl

For the one-document questions it counts, per dialect, where the focused view (DA) and the
all-blocks view agree and disagree; then, for the paper's wrong answers under the right chunk,
which document holds the value it wrote (matched as written, commas ignored): the focused one,
a neighbour a KV block shows in part (spans rounded outward), another chunk FOCUS hides, or
none. PAPER_PROMPTS is the file the paper rows ran from (eval_prompts --protocol paper), for
the documents and the layout.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from da_lab.training.data.nl_task import PLAIN_WORDS
from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval.evaluate import load_document


def index(pid: str) -> str:
    """A prompt's index in its set: the same prompt's ids differ only by the set's name."""
    return pid.rsplit(":", 1)[1]


def by_prompt(doc: dict) -> dict:
    return {index(r["id"]): r for r in doc["rows"]}


def written_value(answer: str, question: str) -> str:
    """The answer's words that are not the question's (the value it states)."""
    skip = set(re.findall(r"\w+", question.lower())) | PLAIN_WORDS
    return " ".join(w for w in re.findall(r"[\w']+", answer.rstrip(".")) if w.lower() not in skip)


def holder(row: dict, sample) -> str:
    """Which document holds the value a wrong paper answer wrote."""
    docs, lay = sample.meta["documents"], sample.prompt.layout
    k = int(re.search(r'magic_chunks="(\d+)"', row["tag_written"]).group(1))
    val = written_value(row["answer"] or "", row["question"]).lower().replace(",", "")
    hold = [i + 1 for i, t in enumerate(docs) if val and val in t.lower().replace(",", "")]
    if not hold:
        return "no document, as written"
    if k in hold:
        return "the focused document"
    bs, kept = lay.block_size, lay.chunk_range(k)          # the blocks FOCUS keeps, rounded out
    if any(lay.spans[h - 1][0] < kept.stop * bs and lay.spans[h - 1][1] > kept.start * bs
           for h in hold):
        return f"a neighbour a {bs}-token block shows in part"
    return "another chunk, hidden by FOCUS"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.models.paper_misses",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("card")
    ap.add_argument("paper")
    ap.add_argument("paper_prompts")
    a = ap.parse_args(argv)
    card, paper = by_prompt(load_document(a.card)), by_prompt(load_document(a.paper))
    samples = {index(s.meta["id"]): s for s in P.samples(a.paper_prompts)}
    single = [k for k, r in paper.items() if r["kind"] == "single"]
    print(f"{len(single)} one-document prompts in both dialects")
    for name, rows in (("card", card), ("paper", paper)):
        rs = [rows[k] for k in single]
        n = len(rs)
        fixed = sum(r["correct"] and not r["all_blocks_correct"] for r in rs)
        lost = sum(r["all_blocks_correct"] and not r["correct"] for r in rs)
        both = sum(not r["correct"] and not r["all_blocks_correct"] for r in rs)
        print(f"  {name:5s}: right chunk {sum(r['tag_correct'] for r in rs) / n:.3f}, answer "
              f"under DA {sum(r['correct'] for r in rs) / n:.3f}; DA right where all blocks "
              f"were wrong {fixed}, the other way {lost}, both wrong {both}")
    wrong = [paper[k] for k in single if paper[k]["tag_correct"] and not paper[k]["correct"]]
    where = Counter(holder(r, samples[index(r["id"])]) for r in wrong)
    print(f"  the paper's {len(wrong)} wrong answers under the right chunk: the value it wrote "
          "is in")
    for k, v in where.most_common():
        print(f"    {v:3d}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
