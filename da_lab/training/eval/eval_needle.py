"""The long-text task of issue 40: one document of several thousand tokens, segmented by the
paper's rules (core/paper.segment_context: ~2,048-token segments at the coarsest natural
boundary), with the fact a question asks at a chosen depth (needle-style), as prompts-file
lines for `da-lab eval --prompts` ("protocol": "paper").

    python -m da_lab.training.eval.eval_needle [--n 10] [--tokens 4000,7000] [--two 10]
        [--model gemma3] > needle.jsonl

Line i of a depth list d1..dk puts the asked entity's paragraph at depth d (0 = the start,
1 = the end) of a text made of one held-out sample's documents (held-out names and values,
held-out domains by default), so the answer sits in exactly one segment: `needs` names it.
Generated locally and deterministically from the seed: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import sys

from da_lab.core.paper import segment_context
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.data.task import rng_for
from da_lab.training.eval.eval_prompts import record

NEEDLE_STREAM = 7            # its own random stream (task.rng_for), apart from TRAIN/HELDOUT
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
TOKENS = (4000, 7000)


def needle_line(seed: int, i: int, depth: float, tokens: tuple[int, int] = TOKENS,
                split: str = "heldout", tok=None) -> dict:
    """One prompts-file line: the text's segments, the question, the answer, the segment
    holding it."""
    tok = tok or N.tokens()
    rng = rng_for(seed, NEEDLE_STREAM, i)
    s = G.make_sample(rng, heldout=True, split=split, kind="single", n_chunks=(16, 32),
                      context=(3000, 4000), tok=tok)
    docs = list(s.meta["documents"])
    needle = docs.pop(s.directive.chunks[0] - 1)
    # Hay from more held-out samples up to the length drawn: paragraphs that neither hold the
    # asked value nor name the asked entity (the answer stays in one place).
    want = int(rng.integers(tokens[0], tokens[1] + 1))
    have = sum(len(tok.encode(d)) for d in docs) + len(tok.encode(needle))
    name = s.meta["targets"][0]
    while have < want:
        more = G.make_sample(rng, heldout=True, split=split, kind="single",
                             n_chunks=(16, 32), context=(3000, 4000), tok=tok)
        for d in more.meta["documents"]:
            if have < want and name not in d and not N.holders([d], list(s.meta["values"])):
                docs.insert(int(rng.integers(len(docs) + 1)), d)
                have += len(tok.encode(d))
    at = round(depth * len(docs))
    docs.insert(at, needle)
    text = "\n\n".join(docs)
    segments = segment_context(text, tok.encode)
    start = text.index(needle)
    ends, pos = [], 0
    for seg in segments:
        pos += len(seg)
        ends.append(pos)
    holder = next(k for k, end in enumerate(ends, 1) if start < end)
    rec = record(s, "needle", f"needle:{seed}:{i}:d{depth}")
    rec.update(documents=segments, needs=[holder], protocol="paper")
    return rec


def needle_lines(n: int, seed: int = G.EVAL_SEED, depths=DEPTHS, **kw) -> list[dict]:
    """n lines, the depths taken in turn."""
    return [needle_line(seed, i, depths[i % len(depths)], **kw) for i in range(n)]


def two_part_lines(n: int, seed: int = G.EVAL_SEED, tokens: tuple[int, int] = TOKENS,
                   split: str = "heldout", tok=None) -> list[dict]:
    """n long-text lines of two-part questions (nl_long: the two facts in two different
    segments, held-out names and values), as prompts-file lines with both segments needed."""
    from da_lab.training.data import nl_long as NL

    out = []
    for i in range(n):
        rng = rng_for(seed, NEEDLE_STREAM + 1, i)
        s = NL.make_long_sample(rng, kind="multi", heldout=True, split=split, tokens=tokens,
                                tok=tok or N.tokens())
        rec = record(s, "needle-two", f"needle-two:{seed}:{i}")
        rec.update(protocol="paper")
        out.append(rec)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.eval.eval_needle",
                                 description="write long-text needle prompts (the paper's "
                                             "protocol) as JSONL")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=G.EVAL_SEED)
    ap.add_argument("--tokens", default=f"{TOKENS[0]},{TOKENS[1]}",
                    help="lo,hi: the text's length in tokens")
    ap.add_argument("--split", choices=("train", "heldout"), default="heldout")
    ap.add_argument("--model", default=None,
                    help="the model whose tokenizer counts the segments' tokens (the paper's "
                         "segmentation is in the model's tokens; default smollm2)")
    ap.add_argument("--two", type=int, default=0,
                    help="also this many two-part questions, the facts in two segments")
    args = ap.parse_args(argv)
    lo, hi = (int(x) for x in args.tokens.split(","))
    tok = None
    if args.model:
        from da_lab.models.tiny import model_path

        tok = N.tokens(str(model_path(args.model)))
    recs = needle_lines(args.n, args.seed, tokens=(lo, hi), split=args.split, tok=tok)
    recs += two_part_lines(args.two, args.seed, (lo, hi), args.split, tok)
    for rec in recs:
        sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
