"""`da-lab eval --prompts FILE.jsonl`: the eval on a user's own documents and questions.

One JSON object per line (blank lines are skipped):

    {"id": "q1",                              optional; default "<file>:<line>"
     "documents": ["text", ...],              the documents, C1, C2, ... in this order
     "question": "Who coaches Kilbride Albion?",
     "answer": ["Mara Olsen"],                the values the answer must name, in order
     "needs": [3],                            1-based documents the answer needs; [] = none
                                              (then <local> is the right tag)
     "wrong": ["Tomas Novak"],                optional: values that must not appear
     "set": "sports clubs",                   optional: a group the summary reports apart
     "protocol": "paper"}                     optional: "card" (default) or "paper"

The prompt is `nl_task.user_prompt(documents, question)`, exactly what notebook 06 sends; with
"protocol": "paper", the paper's Magic Chunk prompt (Ho et al. 2026) of unpadded spans instead
(`nl_task.paper_user_prompt`), whose right tag is `<focus magic_chunks="3">` and whose answer is
read inside `<answer>...</answer>`. The right tag is `<focus C3>` for needs [3], `<focus C2,C5>`
for [2, 5], `<local>` for []. An answer
is right when the first sentence after the tag names exactly the `answer` values, in order,
among answer + wrong (`nl_task.answer_correct`): naming a wrong value, or the right ones in
another order, is wrong; answer [] (chit-chat) is right unless a wrong value appears.

A malformed line stops the eval before any engine starts, with one line naming the file, the
line and the field (`PromptFileError`).

`python -m da_lab.training.eval.eval_prompts --n N --split train|heldout --set NAME [--protocol
paper]` writes generated held-out prompts in this format (stdout), so generated sets and
hand-written files run through one path (`records`; `to_sample(record(s))` rebuilds the same
prompt tokens).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from da_lab.core.tags import Directive, Mode, tag_text
from da_lab.training.data import nl_task as N
from da_lab.training.data.task import Sample

REQUIRED = ("documents", "question", "answer", "needs")
OPTIONAL = ("id", "wrong", "set", "protocol")
PROTOCOLS = ("card", "paper")


class PromptFileError(ValueError):
    """A line of a prompts file that can't be used, said in one line."""


def _strings(v, field: str, empty_ok: bool) -> str | None:
    if not isinstance(v, list):
        return f"field '{field}' must be a list of strings"
    if not v and not empty_ok:
        return f"field '{field}' must not be empty"
    for i, x in enumerate(v):
        if not isinstance(x, str) or not x.strip():
            return f"field '{field}' item {i + 1} must be a non-empty string"
    return None


def check(rec) -> str | None:
    """What is wrong with one parsed line (None when nothing is)."""
    if not isinstance(rec, dict):
        return "a line must be a JSON object"
    for k in REQUIRED:
        if k not in rec:
            return f"field '{k}' is missing"
    extra = sorted(set(rec) - set(REQUIRED) - set(OPTIONAL))
    if extra:
        return f"field '{extra[0]}' is not known (fields: {', '.join(REQUIRED + OPTIONAL)})"
    for k in ("id", "set"):
        if k in rec and (not isinstance(rec[k], str) or not rec[k].strip()):
            return f"field '{k}' must be a non-empty string"
    if not isinstance(rec["question"], str) or not rec["question"].strip():
        return "field 'question' must be a non-empty string"
    if rec.get("protocol", "card") not in PROTOCOLS:
        return f"field 'protocol' must be one of {', '.join(PROTOCOLS)}"
    bad = (_strings(rec["documents"], "documents", False)
           or _strings(rec["answer"], "answer", True)
           or ("wrong" in rec and _strings(rec["wrong"], "wrong", True)))
    if bad:
        return bad
    needs, n = rec["needs"], len(rec["documents"])
    if not isinstance(needs, list) or not all(type(x) is int for x in needs):
        return "field 'needs' must be a list of document numbers (integers)"
    if len(set(needs)) != len(needs):
        return "field 'needs' repeats a document"
    out = [x for x in needs if not 1 <= x <= n]
    if out:
        return f"field 'needs': document {out[0]} is not among the {n} documents (1..{n})"
    if needs and not rec["answer"]:
        return "field 'answer' must name the expected values when 'needs' names documents"
    both = {N.normalise(x) for x in rec["answer"]} & {N.normalise(x) for x in
                                                       rec.get("wrong", [])}
    if both:
        return f"field 'wrong' holds an expected value ({sorted(both)[0]!r})"
    return None


def load(path: str | Path) -> list[dict]:
    """The records of a prompts file, each checked; the first bad line raises
    PromptFileError naming it."""
    path = Path(path)
    try:
        # Lines end at "\n" only: str.splitlines() also splits at U+2028, U+0085, ..., which
        # a valid JSON string may hold raw.
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise PromptFileError(f"{path}: can't read it ({e})") from None
    out = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptFileError(f"{path}:{i}: not JSON ({e.msg} at column {e.colno})") \
                from None
        except ValueError as e:      # e.g. an integer longer than Python converts
            raise PromptFileError(f"{path}:{i}: not JSON ({e})") from None
        except RecursionError:
            raise PromptFileError(f"{path}:{i}: not JSON (nested too deeply to read)") \
                from None
        bad = check(rec)
        if bad:
            raise PromptFileError(f"{path}:{i}: {bad}")
        out.append(dict(rec, id=rec.get("id", f"{path.name}:{i}"), _line=i))
    if not out:
        raise PromptFileError(f"{path}: no prompts in it")
    return out


def kind_of(needs: list[int]) -> str:
    return "local" if not needs else "single" if len(needs) == 1 else "multi"


def to_sample(rec: dict, tok=None, where: str = "") -> Sample:
    """The eval sample of one record: its prompt (user_prompt), right tag and answer rule."""
    protocol = rec.get("protocol", "card")
    build = N.paper_user_prompt if protocol == "paper" else N.user_prompt
    try:
        prompt = build(rec["documents"], rec["question"], tok)
    except ValueError as e:
        raise PromptFileError(f"{where or rec.get('id')}: field 'documents': {e}") from None
    needs = list(rec["needs"])
    d = Directive(Mode.FOCUS, chunks=tuple(needs)) if needs else Directive(Mode.LOCAL)
    vals, wrong = list(rec["answer"]), list(rec.get("wrong", []))
    texts = [N.clean_document(t) for t in rec["documents"]]
    meta = {"question": " ".join(rec["question"].split()), "values": vals, "wrong": wrong,
            "candidates": sorted({N.normalise(v) for v in vals + wrong} - {""}),
            "n_chunks": prompt.layout.n_chunks, "set": rec.get("set"), "id": rec["id"],
            "documents": texts, "protocol": protocol,
            "holders": sorted(set(N.holders(texts, vals)) | set(needs)) if needs else []}
    return Sample(prompt, [], tag_text(d, protocol), d, "; ".join(vals), kind_of(needs), 0,
                  tuple(N.normalise(v) for v in vals), meta)


def samples(path: str | Path, n: int | None = None, tok=None) -> list[Sample]:
    recs = load(path)[:n]
    return [to_sample(r, tok, f"{path}:{r['_line']}") for r in recs]


def record(s: Sample, set_name: str | None = None, pid: str | None = None) -> dict:
    """A generated sample as a prompts-file line (its documents as plain texts)."""
    vals = list(s.meta["values"])
    keys = {N.normalise(v) for v in vals}
    wrong = [c for c in s.meta.get("wrong_texts", []) if N.normalise(c) not in keys]
    rec = {"id": pid or f"{s.meta.get('split', 'gen')}:{s.meta.get('index', 0)}",
           "documents": list(s.meta["documents"]), "question": s.meta["question"],
           "answer": vals, "needs": list(s.directive.chunks), "wrong": wrong}
    if set_name:
        rec["set"] = set_name
    return rec


def main(argv=None) -> int:
    from da_lab.training.data import nl_gen as G

    ap = argparse.ArgumentParser(prog="python -m da_lab.training.eval.eval_prompts",
                                 description="write generated held-out prompts as JSONL")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--split", choices=("train", "heldout"), default="heldout",
                    help="the domains: train (in-distribution) or heldout (never trained on)")
    ap.add_argument("--seed", type=int, default=G.EVAL_SEED)
    ap.add_argument("--set", default=None, help="the records' set name")
    ap.add_argument("--by-domain", action="store_true",
                    help='set = "<set>/<domain asked about>" ("<set>/no document")')
    ap.add_argument("--protocol", choices=PROTOCOLS, default="card",
                    help="the prompt and tags: card (the design card's) or paper (Ho et al.)")
    ap.add_argument("--generator", choices=("nl_gen", "nl_pairs"), default="nl_gen",
                    help="nl_pairs: two-document questions only (one attribute of two "
                         "entities, or two attributes of two domains' entities)")
    args = ap.parse_args(argv)
    if args.generator == "nl_pairs":
        from da_lab.training.data import nl_pairs as NP
        from da_lab.training.data.task import HELDOUT, rng_for

        gen = [NP.make_pair_sample(rng_for(args.seed, HELDOUT, i), heldout=True,
                                   split=args.split, protocol=args.protocol)
               for i in range(args.n)]
    else:
        gen = G.held_out(args.n, args.seed, split=args.split)
    for i, s in enumerate(gen):
        name = args.set
        if args.by_domain:
            name = f"{args.set or args.split}/{s.meta['domain'] or 'no document'}"
        rec = record(s, name, f"{args.set or args.split}:{args.seed}:{i}")
        if args.protocol != "card":
            rec["protocol"] = args.protocol
        sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
