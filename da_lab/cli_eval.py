"""`da-lab eval`: held-out tag and answer accuracy of a model that writes its own tags, through
the engine with the DA hook (generated prompts, or the user's own with --prompts)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from da_lab.engine.env import quiet_stdout as _quiet_stdout


def _not_a_file(path: str) -> str | None:
    """What `path` is when it is not a regular file (a folder, a FIFO, /dev/null...): reading
    a FIFO would block, and "no such file" would be wrong for what exists."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"can't open it ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
    return f"is {kind}, not a prompts file (one JSON object per line)"


def _longest_token(folder: Path) -> int | None:
    """The most characters one token of the model's tokenizer can stand for (its longest
    vocabulary entry: a byte-level piece holds one byte per character), or None."""
    try:
        tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        vocab = tok["model"]["vocab"]
        pieces = list(vocab) if isinstance(vocab, dict) else [v[0] for v in vocab]
        pieces += [a["content"] for a in tok.get("added_tokens") or ()]
        return max(len(p) for p in pieces) if pieces else None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _prompts_too_long(path: str, model) -> str | None:
    """A line of the prompts file whose documents and question are more characters than the
    model's positions can hold however they are tokenized: found before anything is tokenized
    (a 60 MB line took 172 s to tokenize only to be refused)."""
    from da_lab.engine.validate import model_max_positions
    from da_lab.models.tiny import model_path

    try:
        folder = model_path(model)
    except (OSError, ValueError, RuntimeError):
        return None                 # the eval says what is wrong with the model
    positions, longest = model_max_positions(folder), _longest_token(folder)
    if not positions or not longest:
        return None
    most = positions * longest
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, start=1):
            if len(line) <= most:       # a line's text is at most the line
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                return None             # the loader names the line
            texts = (rec.get("documents") if isinstance(rec, dict) else None) or []
            texts = [t for t in [*texts, rec.get("question")] if isinstance(t, str)]
            chars = sum(len(t) for t in texts)
            if chars > most:
                return (f"--prompts {path}:{i}: its documents and question are {chars:,} "
                        f"characters; the model's {positions:,} positions hold at most "
                        f"{most:,} however they are tokenized")
    return None


def _eval_args(args) -> tuple[dict, str | None]:
    """The eval's generator options, or what is wrong with the arguments (before any engine)."""
    from da_lab.training.eval.eval_base import parse_range

    if args.out:
        from da_lab.outputs import file_problem

        problem = file_problem(args.out, make_parent=True)
        if problem:
            return {}, f"--out {problem}"
    for opt, v in (("--n", args.n), ("--wave", args.wave), ("--max-tokens", args.max_tokens),
                   ("--block-size", args.block_size)):
        if v is not None and v < 1:
            return {}, f"{opt} must be at least 1, not {v}"
    try:
        gen = {k: v for k, v in (("context", parse_range(args.context, "--context")),
                                 ("n_chunks", parse_range(args.chunks, "--chunks"))) if v}
    except ValueError as e:
        return {}, str(e)
    if args.domains:
        gen["split"] = args.domains
    if args.prompts and gen:
        return {}, "--prompts takes its documents from the file: no --context, --chunks, --domains"
    if args.prompts:
        problem = _not_a_file(args.prompts)
        if problem:
            return {}, f"--prompts {args.prompts}: {problem}"
        problem = _prompts_too_long(args.prompts, args.model)
        if problem:
            return {}, problem
    if args.device != "auto":
        import torch

        have = "cuda" if torch.cuda.is_available() else "cpu"
        if have != args.device:
            return {}, (f"--device {args.device}: this machine's vLLM runs on {have} "
                        f"(the engine picks the device it was built for)")
    return gen, None


def cmd_eval(args) -> int:
    """Held-out tag / answer accuracy of a model that writes its own tags, with the base model
    and the ablations (da_lab.training.eval.evaluate)."""
    out = _quiet_stdout() if args.json else sys.stdout
    from da_lab.engine.env import LOG_TO_STDERR, apply_env
    from da_lab.training.eval.evaluate import document, run_eval, table

    apply_env(LOG_TO_STDERR)
    gen, bad = _eval_args(args)
    if bad:
        print(f"da-lab: {bad}", file=sys.stderr)
        return 2
    try:
        if args.permute:
            from da_lab.training.eval import eval_permute

            res = eval_permute.run(args.n, args.model, prompts=args.prompts, seed=args.seed,
                                   gen=gen, wave=args.wave, max_tokens=args.max_tokens,
                                   ablations=args.ablations, base=not args.no_base,
                                   block_size=args.block_size,
                                   async_scheduling=args.async_scheduling,
                                   progress=not args.json)
        else:
            res = run_eval(args.n, args.model, task=args.task, seed=args.seed, wave=args.wave,
                           max_tokens=args.max_tokens, ablations=args.ablations,
                           base=not args.no_base, gen=gen, prompts=args.prompts,
                           async_scheduling=args.async_scheduling,
                           block_size=args.block_size, progress=not args.json)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        # The layout's refusal, or vLLM naming the sizes its attention backend takes
        # ("MultipleOf(32)" on the CPU), said against the option that caused it.
        said = f"--block-size {args.block_size}: {e}" if args.block_size and \
            "block" in str(e).lower() else str(e)
        print(f"da-lab: {said}", file=sys.stderr)
        return 2
    doc = document(res, "da-lab " + " ".join(sys.argv[1:] if args.argv is None else args.argv))
    if "permutation" in res:       # content, not position: eval_permute
        doc.update(permutation=res["permutation"], permuted_rows=res["permuted_rows"])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    if args.json:
        out.write(json.dumps(doc) + "\n")
        out.flush()
    else:
        print(table(res))
        if "permutation" in res:
            from da_lab.training.eval.eval_permute import line

            print(line(res["permutation"]))
    return 0


def add_eval(sub, argv) -> None:
    ev = sub.add_parser("eval", help="held-out tag and answer accuracy of a model that writes "
                                     "its own tags, through the engine with the DA hook")
    ev.add_argument("--n", type=int, default=None,
                    help="held-out prompts (default 500; with --prompts: all of the file's)")
    ev.add_argument("--prompts", metavar="FILE.jsonl",
                    help="your own documents and questions, one JSON object per line: "
                         '{"documents": [...], "question": "...", "answer": [values], '
                         '"needs": [document numbers], "wrong": [values]?, "id"?, "set"?, '
                         '"protocol"?}; "protocol": "paper" builds the paper\'s Magic Chunk '
                         'prompt, "card" (the default) the design card\'s '
                         "(da_lab/training/eval/eval_prompts.py)")
    ev.add_argument("--domains", choices=("train", "heldout"), default=None,
                    help="nl task: the generator's training domains (default) or the domains "
                         "held out of training")
    ev.add_argument("--model", help="da-tiny-tags, smollm2-da (the fine-tuned SmolLM2), "
                                    "gemma3-da (the fine-tuned Gemma 3 270M), "
                                    "another name of da_lab.models.tiny or a local Hugging "
                                    "Face folder (default: the embedded default model)")
    ev.add_argument("--task", choices=("auto", "records", "nl"), default="auto",
                    help="records (da-tiny-tags' task) or nl (smollm2-da's); auto: by model")
    ev.add_argument("--ablations", action="store_true",
                    help="also run the wrong-tag and hidden-chunk ablations")
    ev.add_argument("--no-base", action="store_true",
                    help="nl task: skip the base model's plain-prompt run (its own engine)")
    ev.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="refuse to run unless the engine runs there (default: auto)")
    ev.add_argument("--async-scheduling", action="store_true",
                    help="GPU: let vLLM schedule a step ahead (a tag then takes effect one step "
                         "later: the first token after it still reads every block)")
    ev.add_argument("--wave", type=int, default=None,
                    help="prompts in flight at once (default 64 on CUDA, 8 on the CPU)")
    ev.add_argument("--max-tokens", type=int, default=None,
                    help="reply length cap (default 24 records, 64 nl)")
    ev.add_argument("--block-size", type=int, default=None,
                    help="tokens per KV block (default 32, the lab's). The paper's unpadded "
                         "chunks are rounded out to whole blocks, so a smaller block reads less "
                         "around each one; the card's chunks need a size that divides 32. A "
                         "GPU engine takes multiples of 16")
    ev.add_argument("--permute", action="store_true",
                    help="also run every prompt with its documents in another order (the "
                         "needed ones moved) and report whether the tag moves with the "
                         "evidence (eval_permute: agreement, stayed, both right)")
    ev.add_argument("--context", help="nl task: prompt tokens, N or LO,HI (default 600,6000)")
    ev.add_argument("--chunks", help="nl task: documents per prompt, N or LO,HI (default 4,32)")
    ev.add_argument("--seed", type=int, default=None, help="held-out seed (default: the "
                                                           "task's EVAL_SEED)")
    ev.add_argument("--json", action="store_true", help="the whole eval document (provenance, "
                                                      "summary, per-prompt rows) on stdout")
    ev.add_argument("--out", metavar="FILE", help="also write that document to FILE")
    ev.set_defaults(fn=cmd_eval, argv=argv)
