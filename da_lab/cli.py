"""`da-lab` command line: run the seed DA scenario on a live engine and print what the hook did."""

from __future__ import annotations

import argparse
import json
import os
import sys

# The seed scenario's script: GLOBAL -> <focus C3,C7> -> <local> -> <global>.
SEED_TAGS = [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")]


def _quiet_stdout():
    """Send everything written to fd 1 (vLLM's logs, C++ warnings) to stderr; return a file
    on the real stdout for the one JSON document."""
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(real, "w")


def demo_rows(lab, rid: str, results) -> list[dict]:
    rows = []
    for res in results:
        h = res.request(rid)
        if h is None:
            continue
        out = res.outputs.get(rid, {})
        rows.append({"step": res.step, "mode": h["mode"], "tag_buffer": h["tag_buffer"],
                     "text": out.get("text", ""), "blocks_total": h["blocks_total"],
                     "blocks_read": h["blocks_read"]})
    return rows


def cmd_demo(args) -> int:
    out = _quiet_stdout() if args.json else sys.stdout
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from .lab import Lab

    try:
        lab = Lab(args.model)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"da-lab: {e}", file=sys.stderr)
        return 2
    try:
        prompt = lab.seed_prompt()
        rid = lab.add_request(prompt, tags=SEED_TAGS, max_tokens=args.max_tokens)
        rows = demo_rows(lab, rid, lab.run())
        doc = {"engine": lab.engine_name, "device": lab.device, "model": lab.model,
               "runner": lab.runner_class, "block_size": lab.block_size, "steps": rows}
    finally:
        lab.shutdown()
    if args.json:
        out.write(json.dumps(doc) + "\n")
        out.flush()
        return 0
    print(f"{doc['engine']} on {doc['device']}, runner {doc['runner']}, model {doc['model']}")
    print(f"{'step':>4}  {'mode':<6}  {'tag buffer':<16}  {'blocks':>6}  {'read':>4}  text")
    for r in rows:
        print(f"{r['step']:>4}  {r['mode']:<6}  {r['tag_buffer']!r:<16}  {r['blocks_total']:>6}"
              f"  {r['blocks_read']:>4}  {r['text']!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="da-lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the seed scenario live and print a per-step table")
    d.add_argument("--model", help="local Hugging Face model folder (default: the embedded "
                                   "tiny model, built on first use)")
    d.add_argument("--json", action="store_true", help="one JSON document on stdout")
    d.add_argument("--max-tokens", type=int, default=40)
    d.set_defaults(fn=cmd_demo)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
