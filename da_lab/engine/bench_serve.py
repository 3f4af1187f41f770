"""vLLM's own serving benchmark (`vllm bench serve`), run the way its CLI runs it.

    python -m da_lab.engine.bench_serve --backend vllm --base-url ... [vllm bench serve options]

da_lab/bench/timing/serve_gpu.py calls this instead of the `vllm` console script, which needs vLLM's
dist metadata (the GPU bundle carries vLLM's Python tree without it). Every release it supports
(0.26 ... 0.33) keeps the argument parser in vllm.utils.argparse_utils (needs_engine.py).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as run
    from vllm.utils.argparse_utils import FlexibleArgumentParser as Parser

    parser = Parser()
    add_cli_args(parser)
    run(parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
