"""DA requests from `vllm bench serve`: the `--extra-body` that puts a layout and a director in
every request.

`vllm bench serve --extra-body JSON` (0.26 and 0.32, benchmarks/serve.py) merges one JSON
object into the body of every request it sends, so that object can carry `vllm_xargs`. One
object for all requests means one layout for prompts whose lengths differ by a few tokens (the
random dataset decodes and re-encodes its prompts). So the layout leaves out "prompt_len" (the
server's edge takes each prompt's own length) and its chunks end two blocks before
`input_len`: every prompt still has a question (tail) after its last chunk. The geometry is
`da-lab bench`'s (da_lab/bench/plan.py bench_layout: 16 chunks; FOCUS on C2,C7 keeps ~15% of
the blocks in the middle of the decode), and the director writes the mode's tag at output 0.

    python -m da_lab.bench.served --input-len 65536 --output-len 256 --mode focus
    vllm bench serve ... --extra-body "$(python -m da_lab.bench.served ...)"
"""

from __future__ import annotations

import argparse
import json

from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_LAYOUT, director_to_wire, layout_to_wire

MODES = ("global", "focus", "local", "global_tag")
# <global> keeps every block, as no tag does; written at output 0 it gives a GLOBAL run the same
# first token as a FOCUS run (text). A random-weights model's own first tokens are often
# partial UTF-8, which vLLM's detokenizer pays for per step until a character completes.
EXTRA_TAGS = {"global_tag": "<global>"}


def extra_body(input_len: int, output_len: int, mode: str = "focus", *, block_size: int = 32,
               fraction: float = 0.15) -> dict:
    from da_lab.bench.plan import TAGS, bench_layout

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    layout = bench_layout(input_len - 2 * block_size, block_size, fraction=fraction,
                          response_tokens=output_len // 2)
    xargs = {EXTRA_LAYOUT: layout_to_wire(layout, with_prompt_len=False)}
    tag = EXTRA_TAGS.get(mode) or TAGS.get(mode)
    if tag:
        xargs[EXTRA_DIRECTOR] = director_to_wire([(0, tag)])
    return {"vllm_xargs": xargs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.served", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input-len", type=int, required=True, help="--random-input-len")
    ap.add_argument("--output-len", type=int, required=True, help="--random-output-len")
    ap.add_argument("--mode", choices=MODES, default="focus",
                    help="global: the layout alone (DA's overhead); focus / local / global_tag: "
                         "the director writes <focus C2,C7> / <local> / <global> at output 0")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--focus-fraction", type=float, default=0.15)
    args = ap.parse_args(argv)
    try:
        body = extra_body(args.input_len, args.output_len, args.mode,
                          block_size=args.block_size, fraction=args.focus_fraction)
    except ValueError as e:
        ap.error(str(e))
    print(json.dumps(body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
