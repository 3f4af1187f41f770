"""What the paper's Magic Chunk layout leaves visible on the generated eval prompts, before the
model writes anything: the share of prompt tokens outside every chunk (system prompt, headers,
question, instructions) and the share of KV blocks holding at least one of them. A block is read
when any token it holds is visible (spans rounded outward), so the second share is what every
mode reads of the prompt, `<local>` included (docs/models.md, issue 40).

    python -m da_lab.bench.models.paper_layout [--n 200] [--split heldout]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from da_lab.training.data import nl_gen as G


def shares(sample) -> tuple[float, float]:
    """(visible tokens / prompt tokens, blocks holding a visible token / prompt blocks)."""
    lay = sample.prompt.layout
    bs, n = lay.block_size, lay.prompt_len
    visible = np.ones(n, bool)
    for a, b in lay.spans:
        visible[a:b] = False
    blocks = -(-n // bs)
    held = sum(bool(visible[k * bs:(k + 1) * bs].any()) for k in range(blocks))
    return float(visible.mean()), held / blocks


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.models.paper_layout",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--split", default="heldout", choices=["train", "heldout"])
    args = ap.parse_args(argv)
    held = args.split == "heldout"
    samples = [G.make_sample(np.random.default_rng(7_300_000 + i), heldout=held,
                             split=args.split, protocol="paper") for i in range(args.n)]
    got = [shares(s) for s in samples]
    tok, blk = (statistics.mean(x) for x in zip(*got, strict=True))
    print(f"{args.n} {args.split} prompts in the paper's format: {tok:.3f} of the tokens lie "
          f"outside every chunk, {blk:.3f} of the {samples[0].prompt.layout.block_size}-token "
          "blocks hold one of them")


if __name__ == "__main__":
    main()
