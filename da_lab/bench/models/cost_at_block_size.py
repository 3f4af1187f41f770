"""The decoding attention cost an eval's replies would have at another KV block size.

    python -m da_lab.bench.models.cost_at_block_size EVAL.json.gz PROMPTS.jsonl [--block-size 16 \
        ...]

The cost is a pure function of the prompt's layout, the block size and the tags in the reply
(core/cost.py over the mask history the hook keeps, training/masks.hook_history). So for each
row of a `da-lab eval` document this re-tokenizes the reply, replays its tags through the tag
machine, and counts the KV positions each decode step reads at each block size. At the eval's
own block size that must give back the positions the engine recorded; the tool says for how
many rows it does. At another size it is the cost of the *same replies*: a run at that size
can write other tokens (a smaller block shows less of a neighbouring chunk), so only a run
measures both the cost and the answers there (`da-lab eval --block-size`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict

from da_lab.core.cost import cost, decode_positions
from da_lab.core.layout import BLOCK_SIZE
from da_lab.core.tags import TagStream
from da_lab.training.data import nl_task as N
from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval.evaluate import load_document
from da_lab.training.trainer.masks import hook_history


def timeline(ids: list[int], tok, n_chunks: int) -> list:
    """((output index of the token that changed the directive, the directive), ...): what the
    hook decides from, fed one token's text at a time as the engine detokenizes it."""
    stream, out, prev = TagStream(n_chunks), [], None
    text_so_far = ""
    for k in range(len(ids)):
        text = tok.decode(ids[: k + 1], skip_special_tokens=True)
        stream.feed(text[len(text_so_far):])
        text_so_far = text
        if stream.directive != prev:
            out.append((k, stream.directive))
            prev = stream.directive
    return out


def reply_ids(text: str, tok) -> list[int]:
    """The reply's tokens as the model writes them: each tag, and each run of text between
    tags, encoded on its own (how the training replies were built, training/nl_paper.py), then
    the end of turn."""
    return [i for piece in re.split(r"(<[^<>]*>)", text) if piece
            for i in tok.encode(piece)] + [tok.eos_id]


def row_positions(row: dict, sample, tok, block_size: int) -> tuple[int, int]:
    """(positions read, positions in full) of one row's decode steps at `block_size`."""
    lay = sample.prompt.layout.at_block_size(block_size)
    ids = reply_ids(row["text"], tok)
    tags = timeline(ids, tok, lay.n_chunks)
    # Decode steps query outputs 0 .. n-2 (the last output, end of turn, is never fed back).
    hist = hook_history(lay, tags, lay.prompt_len + len(ids) - 1)
    return decode_positions(hist, block_size, lay.prompt_len)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.models.cost_at_block_size",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("eval", help="a da-lab eval document (.json or .json.gz)")
    ap.add_argument("prompts", help="the prompts file it ran (its sha256 is checked)")
    ap.add_argument("--block-size", type=int, nargs="+", default=[16])
    a = ap.parse_args(argv)
    from da_lab.models.cache import file_sha256

    doc = load_document(a.eval)
    want = (doc.get("prompts") or {}).get("sha256")
    if want and file_sha256(a.prompts) != want:
        print(f"{a.prompts} is not the file {a.eval} ran (sha256 differs)", file=sys.stderr)
        return 2
    # A file may hold a prompt twice under one id (both dialects): the set tells them apart.
    by_id = {(s.meta.get("id"), s.meta.get("set")): s for s in P.samples(a.prompts)}
    tok = N.tokens()
    own = doc.get("block_size") or BLOCK_SIZE      # documents before 2026-12-07 ran at 32
    sizes = [own] + [b for b in a.block_size if b != own]
    sums: dict = defaultdict(lambda: [0, 0])
    same = 0
    for row in doc["rows"]:
        s = by_id[(row["id"], row.get("set"))]
        for bs in sizes:
            r, f = row_positions(row, s, tok, bs)
            for key in ("all", row["kind"]):
                sums[(key, bs)][0] += r
                sums[(key, bs)][1] += f
            if bs == own:
                same += (r, f) == (row["decode_kv_read"], row["decode_kv_full"])
    print(f"{a.eval}: {len(doc['rows'])} rows; at its own {own}-token blocks the replay gives "
          f"the engine's positions for {same} of them")
    for key in ("all", "single", "multi", "local"):
        if (key, own) in sums:
            print(f"  {key:6s} " + "  ".join(
                f"{bs}: {cost(*sums[(key, bs)])}" for bs in sizes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
