"""Content, not position (issue 58): does the tag follow the evidence when the documents move?

`da-lab eval --permute` runs every prompt twice through one engine: as it is, and with its
documents (the paper's Magic Chunks, or a long text's segments) in another order, the one(s)
the answer needs always moved to another place. A model that reads the documents to choose its
tag names the needed document wherever it now stands; one that learned a position ("the
second chunk is usually it") keeps naming the same place.

    agreement       of the prompts whose original reply focused on some chunk(s) K, the share
                    whose permuted reply focuses exactly on pi(K), where those documents went
                    (right or wrong: the tag moved with the content it named)
    stayed          of the same prompts, the share whose permuted reply names K again although
                    the documents there are now others (position, not content)
    both_right      of the prompts that need a document, the share right in both orders
    permuted_tag_accuracy, permuted_da_answer_accuracy, original_tag_accuracy

The permutation of prompt i is drawn from SeedSequence([seed, PERMUTE_STREAM, i]), redrawn until
every needed document moves; prompts that need no document, or have one document, are left
out. Both runs are `evaluate.run_eval` on prompts files (eval_prompts: generated prompts are
written as their records, which rebuild the same prompt tokens), one Lab for both; the
original run is the usual eval (its summary, ablations, base model), the permuted run its DA
and all-blocks requests only. The result is the usual eval document plus "permutation" (the
summary above) and "permuted_rows".
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from da_lab.core.tags import Directive, Mode
from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval import eval_tasks as E
from da_lab.training.eval.evaluate import _file_info, answer_text, mean, run_eval

PERMUTE_STREAM = 11


def permutation(n: int, needed, rng, tries: int = 100) -> list[int] | None:
    """pi as a list: document k (1-based) goes to place pi[k - 1]; every needed document moves
    (None when that can't be: fewer than two documents)."""
    if n < 2:
        return None
    for _ in range(tries):
        pi = [int(x) + 1 for x in rng.permutation(n)]
        if all(pi[k - 1] != k for k in needed):
            return pi
    # A needed document that never moved in `tries` draws (n = 2 with both needed cannot
    # fail): a cyclic shift moves every document.
    return [k % n + 1 for k in range(1, n + 1)]


def permute_record(rec: dict, pi: list[int]) -> dict:
    """The prompts-file record with its documents in pi's order and its needs moved along."""
    docs = [""] * len(rec["documents"])
    for k, d in enumerate(rec["documents"], start=1):
        docs[pi[k - 1] - 1] = d
    return dict(rec, id=rec["id"] + "~perm", documents=docs,
                needs=[pi[k - 1] for k in rec["needs"]])


def records(samples, seed: int) -> list[tuple[dict, dict, list[int]]]:
    """(original record, permuted record, pi) for every sample that needs a document and has
    two or more."""
    out = []
    for i, s in enumerate(samples):
        rec = P.record(s, s.meta.get("set"), s.meta.get("id") or f"{seed}:{i}")
        proto = s.meta.get("protocol", "card")
        if proto != "card":
            rec["protocol"] = proto
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            [seed, PERMUTE_STREAM, i])))
        pi = permutation(len(rec["documents"]), rec["needs"], rng) if rec["needs"] else None
        if pi is not None:
            out.append((rec, permute_record(rec, pi), pi))
    return out


def _declared(row: dict, protocol: str):
    return answer_text(row["text"], row["n_chunks"], protocol)[0]


def score(originals: list[dict], permuted: list[dict], pis: list[list[int]],
          protocols: list[str]) -> dict:
    """The permutation summary (module docstring) of matching row lists."""
    moved, stayed, both, o_tag, p_tag, p_da = [], [], [], [], [], []
    for o, t, pi, proto in zip(originals, permuted, pis, protocols, strict=True):
        d_o, d_t = _declared(o, proto), _declared(t, proto)
        o_tag.append(o["tag_correct"])
        p_tag.append(t["tag_correct"])
        p_da.append(t["correct"])
        both.append(o["tag_correct"] and t["tag_correct"])
        if d_o is not None and d_o.mode is Mode.FOCUS:
            to = Directive(Mode.FOCUS, chunks=tuple(pi[c - 1] for c in d_o.chunks))
            moved.append(d_t == to)
            stayed.append(d_t == d_o and to != d_o)
    return {"n": len(originals), "focused_n": len(moved), "agreement": mean(moved),
            "stayed": mean(stayed), "both_right": mean(both),
            "original_tag_accuracy": mean(o_tag), "permuted_tag_accuracy": mean(p_tag),
            "permuted_da_answer_accuracy": mean(p_da)}


def _write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
    return path


def run(n: int | None, model, *, prompts=None, seed: int | None = None, gen: dict | None = None,
        wave: int | None = None, max_tokens: int | None = None, ablations: bool = False,
        base: bool = True, block_size: int | None = None, async_scheduling: bool = False,
        progress: bool = True) -> dict:
    """`run_eval` on the prompts (a file's, or n generated) and on their permuted twins, one
    engine for both; the original eval's result with "permutation" and "permuted_rows"."""
    from da_lab.core.layout import BLOCK_SIZE
    from da_lab.models.tiny import model_path
    from da_lab.training.eval.eval_engine import start_lab

    tk = E.task_for("auto" if prompts is None else "nl", model, prompts)
    if tk.name == "records":
        raise ValueError("--permute needs a chat model that writes its tags (smollm2-da, "
                         "gemma3-da): the records task has no documents to move")
    seed = (tk.default_seed or 0) if seed is None else seed
    samples = tk.samples(n if n is not None or prompts else 500, seed, dict(gen or {}))
    trip = records(samples, seed)
    if not trip:
        raise ValueError("--permute: no prompt needs a document among two or more")
    max_tokens = max_tokens or tk.max_tokens
    with tempfile.TemporaryDirectory() as d:
        orig = _write(Path(d) / "original.jsonl", [r for r, _, _ in trip])
        twin = _write(Path(d) / "permuted.jsonl", [t for _, t, _ in trip])
        lens = [len(s.prompt.token_ids) for s in P.samples(orig, tok=tk.tok)]
        wave = wave or (64 if _cuda() else 8)
        lab = start_lab(model_path(model), lens, max_tokens, wave, 4 if ablations else 2,
                        async_scheduling, block_size or BLOCK_SIZE)
        try:
            kw = {"wave": wave, "max_tokens": max_tokens, "block_size": block_size,
                  "lab": lab, "progress": progress}
            res = run_eval(None, model, prompts=orig, ablations=ablations, base=base, **kw)
            per = run_eval(None, model, prompts=twin, ablations=False, base=False, **kw)
        finally:
            lab.shutdown()
    res["permutation"] = {"seed": seed, "stream": PERMUTE_STREAM, **score(
        res["rows"], per["rows"], [pi for _, _, pi in trip],
        [r.get("protocol", "card") for r, _, _ in trip])}
    res["permuted_rows"] = [{"id": t["id"], "pi": pi, "tag_written": t["tag_written"],
                             "tag_correct": t["tag_correct"], "correct": t["correct"],
                             "text": t["text"]}
                            for t, (_, _, pi) in zip(per["rows"], trip, strict=True)]
    # What was evaluated: the user's file (the runs read temporary copies of it and its twins)
    res["prompts"] = _file_info(prompts)
    return res


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def line(perm: dict) -> str:
    """The permutation summary as one line (what `da-lab eval --permute` prints)."""
    def f(x):
        return "–" if x is None else f"{x:.3f}"
    return (f"documents permuted (n={perm['n']}, {perm['focused_n']} focused): the tag moved "
            f"with the evidence {f(perm['agreement'])}, stayed in place {f(perm['stayed'])}; "
            f"right in both orders {f(perm['both_right'])} (tag {f(perm['original_tag_accuracy'])}"
            f" -> {f(perm['permuted_tag_accuracy'])})")
