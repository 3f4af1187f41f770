"""`da-lab` command line: run the seed DA scenario on a live engine and print what the hook did."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from da_lab.engine.env import quiet_stdout as _quiet_stdout
from da_lab.lesson import SEED_TAGS  # the seed scenario's script (da_lab/lesson.py)


def demo_rows(records, da_id: str) -> list[dict]:
    """The demo's per-step rows for one request, from live or replayed step records."""
    rows = []
    for rec in records:
        h = rec.request(da_id)
        if h is None or not h.hooked:
            continue
        rows.append({"step": rec.step, "mode": h.mode, "tag_buffer": h.tag_buffer,
                     "text": h.new_text or "", "blocks_total": h.blocks_total,
                     "blocks_read": h.blocks_read})
    return rows


def demo_flags(records, da_id: str) -> list[dict]:
    """Warnings that change what the request's tokens mean (engine/results.py FLAG_KINDS)."""
    from da_lab.engine.results import FLAG_KINDS

    flags = []
    for rec in records:
        for w in rec.warnings:
            if isinstance(w, dict) and w.get("req") == da_id and w.get("kind") in FLAG_KINDS \
                    and all(f["kind"] != w["kind"] for f in flags):
                flags.append({"kind": w["kind"], "step": w.get("step"),
                              "message": w.get("detail", "")})
    return flags


def _emit(doc: dict, as_json: bool, out) -> None:
    if as_json:
        out.write(json.dumps(doc) + "\n")
        out.flush()
        return
    print(f"{doc['engine']} on {doc['device']}, runner {doc['runner']}, model {doc['model']}")
    print(f"{'step':>4}  {'mode':<6}  {'tag buffer':<16}  {'blocks':>6}  {'read':>4}  text")
    for r in doc["steps"]:
        print(f"{r['step']:>4}  {r['mode']:<6}  {r['tag_buffer']!r:<16}  {r['blocks_total']:>6}"
              f"  {r['blocks_read']:>4}  {r['text']!r}")
    for f in doc.get("flags", ()):
        print(f"FLAG {f['kind']} (step {f['step']}): {f['message']}")


_PROVENANCE = ("vllm", "device", "model", "runner", "block_size")


def _doc(prov: dict, rows: list[dict], flags: list[dict] = ()) -> dict:
    missing = [k for k in _PROVENANCE if k not in prov]
    if missing:
        raise ValueError(f"the header's provenance lacks {', '.join(missing)}")
    return {"engine": prov["vllm"], "device": prov["device"], "model": prov["model"],
            "runner": prov["runner"], "block_size": prov["block_size"], "steps": rows,
            "flags": list(flags)}


def _bad_live_args(args, record_to: str | None) -> str | None:
    """What is wrong with demo/record's arguments, found before an engine starts."""
    if args.max_tokens < 1:
        return f"--max-tokens must be at least 1, not {args.max_tokens}"
    if getattr(args, "chunk_blocks", 2) < 1:
        return f"--chunk-blocks must be at least 1, not {args.chunk_blocks}"
    if args.max_model_len is not None and args.max_model_len < 1:
        return f"--max-model-len must be at least 1, not {args.max_model_len}"
    if record_to:
        from da_lab.trace.format import TraceError, format_of

        try:
            format_of(Path(record_to))
        except TraceError as e:
            return f"--out: {e}"
        from da_lab.outputs import file_problem

        problem = file_problem(record_to)
        if problem:
            return f"--out: {problem}"
    return None


def _live(args, record_to: str | None = None) -> int:
    bad = _bad_live_args(args, record_to)
    if bad:
        print(f"da-lab: {bad}", file=sys.stderr)
        return 2
    out = _quiet_stdout() if args.json else sys.stdout
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from da_lab.engine.lab import Lab

    model, extra = args.model, {}
    if model == "llama-8b-dummy":      # Llama-3-8B's shape, dummy weights (config built here)
        from da_lab.models.dummy import prepare_model

        # 16 GB of weights + the KV of a 64k prompt: more than Lab's default 20% of a GPU.
        model, extra = str(prepare_model(model, 131072)), {"load_format": "dummy",
                                                           "gpu_memory_utilization": 0.5}
    chunk_blocks = getattr(args, "chunk_blocks", 2)
    # Room for the prompt (head + 12 chunks + tail) and the response, plus a little slack.
    blocks = max(64, 12 * chunk_blocks + 8 + -(-args.max_tokens // 32))
    try:
        lab = Lab(model, num_blocks=blocks, max_model_len=args.max_model_len, **extra)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"da-lab: {e}", file=sys.stderr)
        return 2
    try:
        prompt = lab.seed_prompt(chunk_blocks=chunk_blocks)
        # The seed tags that fit: each must close before the last output token.
        tags = [(at, t) for at, t in SEED_TAGS
                if at + len(lab.encode(t)) < args.max_tokens]
        da_id = lab.add_request(prompt, tags=tags, max_tokens=args.max_tokens,
                              request_id="seed")
        if record_to:
            lab.record(record_to)
        records = lab.run()
        doc = _doc(lab.provenance(), demo_rows(records, da_id), demo_flags(records, da_id))
    except (ValueError, OSError) as e:     # OSError: the trace's disk filled, say
        print(f"da-lab: {e}", file=sys.stderr)
        return 2
    finally:
        lab.shutdown()
    _emit(doc, args.json, out)
    if record_to:
        print(f"recorded {len(doc['steps'])} steps to {record_to}", file=sys.stderr)
    return 0


def cmd_demo(args) -> int:
    return _live(args)


def cmd_record(args) -> int:
    return _live(args, record_to=args.out)


def cmd_replay(args) -> int:
    """Print a recorded run exactly as `demo` printed it live. Needs no vLLM."""
    from da_lab.trace import TraceError, load

    try:
        tr = load(args.file)
    except TraceError as e:
        print(f"da-lab: {e}", file=sys.stderr)
        return 2
    added = [a["req"] for r in tr for a in r.added]
    da_id = args.request or next(iter(added), None)
    if da_id is None:
        print(f"da-lab: {args.file}: the trace adds no request", file=sys.stderr)
        return 2
    if da_id not in added:
        shown = ", ".join(added[:10]) + (" ..." if len(added) > 10 else "")
        print(f"da-lab: {args.file}: no request {da_id!r} (requests: {shown})", file=sys.stderr)
        return 2
    try:
        doc = _doc(tr.provenance, demo_rows(tr.records, da_id), demo_flags(tr.records, da_id))
    except ValueError as e:
        print(f"da-lab: {args.file}: {e}", file=sys.stderr)
        return 2
    _emit(doc, args.json, sys.stdout)
    return 0


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b) or \
            a.resolve() == b.resolve()
    except OSError:
        return False


def _export_outputs(args) -> list[tuple[str, Path]]:
    """(option, file) for every file export may write that can be named before it runs."""
    from da_lab_widgets.export import FORMATS, NAMES

    outs = [("--html", Path(args.html))] if args.html else []
    if args.out:
        out = Path(args.out)
        outs += [("--animate", out / "run.html")] if args.animate else []
        folders = [out] if args.steps is None else []
        trace = Path(args.trace).resolve()
        if args.steps is not None and trace.parent.name.startswith("step_"):
            folders.append(trace.parent)          # a step folder it may write into
        outs += [("--out", f / f"{n}.{e}") for f in folders for n in NAMES for e in FORMATS]
    return outs


def export_problem(args) -> str | None:
    """Why export must not start: an output that is its input trace, or a page's name held by
    a file that is not a page export wrote (export never overwrites what it did not write)."""
    trace = Path(args.trace)
    for flag, path in _export_outputs(args):
        if _same_file(path, trace):
            return (f"{flag}: {path} is the input trace; writing there would destroy it: "
                    "name another file")
        if path.suffix == ".html" and path.is_file():
            with open(path, "rb") as f:
                head = f.read(1024)
            if PAGE_MARK not in head:
                return (f"{flag}: {path} exists and is not a page `da-lab export` wrote; it "
                        "is left as it is: remove it or name another file")
    return None


# In the <head> of every page export writes (widgets page.py: its title).
PAGE_MARK = "<title>da_lab · ".encode()


def cmd_export(args) -> int:
    """Headless export: the page that plays a trace, and the diagrams as PNG/SVG (Chromium)."""
    from da_lab_widgets.export import main_export

    from da_lab.outputs import file_problem, folder_problem

    problem = export_problem(args)
    if problem:
        print(f"da-lab export: {problem}", file=sys.stderr)
        return 2
    for flag, value, check in (("--out", args.out, folder_problem),
                               ("--html", args.html, file_problem)):
        problem = value and check(value)
        if problem:
            print(f"da-lab export: {flag}: {problem}", file=sys.stderr)
            return 2
    argv = [args.trace] + (["--out", args.out] if args.out else [])
    argv += ["--html", args.html] if args.html else []
    argv += ["--step", str(args.step)] if args.step is not None else []
    argv += ["--steps", args.steps] if args.steps is not None else []
    return main_export(argv + (["--animate"] if args.animate else []))


def cmd_serve(args) -> int:
    from da_lab.serve.launch import cmd_serve as serve

    return serve(args, args.rest)


def cmd_ask(args) -> int:
    from da_lab.client import cmd_ask as ask

    return ask(args)


def cmd_selfcheck(args) -> int:
    from da_lab.checks.selfcheck import main as selfcheck

    return selfcheck(json_out=args.json)


def _add_serving(sub) -> None:
    """`serve` (vLLM's OpenAI server with the DA plugins) and `ask` (the client)."""
    s = sub.add_parser("serve", allow_abbrev=False,
                       help="start vLLM's OpenAI server with the DA plugins; other options go "
                            "to vLLM (`vllm serve --help`)")
    s.add_argument("--model", help="embedded model name (default: the lab's default model), "
                                   "llama-8b-dummy, or a local model folder")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="0: any free port")
    s.set_defaults(fn=cmd_serve)
    a = sub.add_parser("ask", help="send chunks + a question to a DA server; print the reply")
    a.add_argument("--server", required=True, help="the server's URL, e.g. http://127.0.0.1:8000")
    a.add_argument("--chunks", nargs="+", required=True, metavar="FILE",
                   help="one text file per chunk, in order (C1, C2, ...)")
    a.add_argument("--question", required=True)
    a.add_argument("--json", action="store_true",
                   help='one JSON document: {"text", "tags", "stats", ...}')
    a.add_argument("--max-tokens", type=int, default=64)
    a.add_argument("--system", help="system prompt / scaffold head (default: the one the lab's "
                                     "models were trained with)")
    a.add_argument("--tag", action="append", default=[], metavar="AT:TAG",
                   help="the director writes TAG at output index AT (repeatable)")
    a.add_argument("--protocol", choices=("card", "paper"), default="card",
                   help="prompt format: the design card's padded chunks (default), or the "
                        "paper's Magic Chunk prompt of unpadded spans (Ho et al. 2026)")
    a.add_argument("--model", help="served model name (default: the server's first)")
    a.add_argument("--api-key", help="the server's --api-key (default: $VLLM_API_KEY)")
    a.add_argument("--timeout", type=_seconds, default=600.0,
                   help="seconds for the whole command (default 600)")
    a.set_defaults(fn=cmd_ask)


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 < v < 10**7:
        raise argparse.ArgumentTypeError(f"{text!r} is no number of seconds > 0")
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="da-lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, fn, help_ in (("demo", cmd_demo, "run the seed scenario live, print each step"),
                            ("record", cmd_record, "run the seed scenario and record a trace")):
        d = sub.add_parser(name, help=help_)
        d.add_argument("--model", help="local Hugging Face model folder (default: the "
                                       "embedded tiny model, built on first use), or "
                                       "llama-8b-dummy (GPU: Llama-3-8B's shape, dummy weights)")
        d.add_argument("--json", action="store_true", help="one JSON document on stdout")
        d.add_argument("--max-tokens", type=int, default=40)
        d.add_argument("--max-model-len", type=int, default=None,
                       help="engine context length (default: what the KV cache holds, at "
                            "most the model's max_position_embeddings)")
        if name == "record":
            d.add_argument("--out", required=True, help="trace file: .jsonl.gz or .parquet")
            d.add_argument("--chunk-blocks", type=int, default=2,
                           help="blocks per chunk (2: the 813-token seed prompt; 170 with "
                                "block size 32: a 65k-token prompt)")
        d.set_defaults(fn=fn)
    e = sub.add_parser("export", help="a trace as one page that plays it (--html), and/or every "
                                      "diagram as PNG and SVG (--out)")
    e.add_argument("trace")
    e.add_argument("--html", metavar="FILE", help="one self-contained page: the player and all "
                                                  "four diagrams; opens offline")
    e.add_argument("--out", help="folder for PNG + SVG of every diagram")
    which = e.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, metavar="N", help="at engine step N (default: last)")
    which.add_argument("--steps", metavar="A:B", help="PNG and SVG of steps A to B, inclusive, "
                                                      "one folder per step")
    e.add_argument("--animate", action="store_true", help="with --out: also OUT/run.html, the "
                                                          "page --html writes")
    e.set_defaults(fn=cmd_export)
    r = sub.add_parser("replay", help="print a recorded trace like `demo` (no vLLM needed)")
    r.add_argument("file")
    r.add_argument("--json", action="store_true", help="one JSON document on stdout")
    r.add_argument("--request", help="request id to show (default: the first one added)")
    r.set_defaults(fn=cmd_replay)
    from da_lab.bench import run as bench

    b = sub.add_parser("bench", help="decode speed: stock vLLM vs DA GLOBAL/FOCUS/LOCAL, "
                                     "each configuration in its own process (JSON + plot)")
    bench.add_arguments(b)
    b.set_defaults(fn=bench.cmd_bench)
    from da_lab.cli_eval import add_eval

    add_eval(sub, argv)
    _add_serving(sub)
    c = sub.add_parser("selfcheck", help="verify DA on this installation: the masked-reference "
                                         "oracle, plain = stock vLLM, the static check; one line")
    c.add_argument("--json", action="store_true", help="the whole check as one JSON document")
    c.set_defaults(fn=cmd_selfcheck)
    args, rest = ap.parse_known_args(argv)
    if rest and args.cmd != "serve":       # `serve` hands the rest to vLLM
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    try:
        code = args.fn(args)
        sys.stdout.flush()      # inside the try: a reader gone by now is a broken pipe too
        return code
    except BrokenPipeError:
        # `da-lab replay ... | head`: the reader left; no traceback. Point stdout at devnull so
        # the interpreter's final flush doesn't raise again (Python's documented recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
