"""`da-lab eval`: does the model write the right tag, and does it answer under its own mask?

Held-out prompts (a seed stream, and for the nl task entity names, that training never drew)
go through the real vLLM engine with the DA hook. Per prompt, several requests
(eval_engine.run_batch; many prompts in flight per engine step):

    DA            its layout, no director: the model writes its own tag, the hook traps it and
                  hides blocks from the next step on
    all blocks    no layout: every block stays visible (the model may still write its tag)
    base          nl task only: the *base* model (smollm2), every block visible, a plain
                  instruction prompt without DA (eval_base.py, its own engine in a child)
  with ablations, because the tag's own KV is computed while every block is still visible and
  could carry the answer past the mask:
    wrong tag     the director forces a wrong chunk's tag at the tag position (the reply's first
                  tokens): the chunk(s) after the needed one(s) that hold none of the answer
    hidden chunk  the director forces the right tag, but the layout's `hidden` leaves the needed
                  chunk(s) out of what FOCUS keeps (core/mask.py)
The ablations run on the prompts that need a chunk (not the `<local>` ones). The DA request
prefills the prompt; the others hit its blocks in the prefix cache and cost a few decode steps.

Summary (KEYS): n; tag_accuracy (the first tag names exactly the right chunk(s) / `<local>`);
da_answer_accuracy; all_blocks_answer_accuracy; base_all_blocks_answer_accuracy;
wrong_tag_answer_accuracy; hidden_chunk_answer_accuracy (None when not run);
blocks_read_fraction_after_tag (mean over the DA runs' decode steps from the one that trapped
the first tag on, of blocks read / blocks in the row; 1.0 when no tag was ever trapped);
decoding_attention_cost (the paper's metric, Ho et al. 2026: KV positions the DA runs read
during decode / what full attention reads, all prompts' positions together; core/cost.py);
local_accuracy (of the prompts that need no document, the share whose first tag is <local>;
None when there are none). Beside them foreign_word_rate: of the answers to document
questions, the share whose first sentence holds a word that is in neither the documents nor
the question (a word borrowed from a training template: "serves 400 inhabitants"). How an
answer counts as right: eval_tasks.py. `document()` is what `--json` / `--out` write; rows
from a prompts file with "set" fields are also summarised by set.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from datetime import UTC

from da_lab.core.cost import cost, mean_cost, step_positions
from da_lab.core.layout import BLOCK_SIZE
from da_lab.training.data.nl_task import foreign_words
from da_lab.training.data.task import first_tag
from da_lab.training.eval import eval_tasks as E
from da_lab.training.eval.eval_engine import (
    Run,
    fraction_after_tag,
    kept_after_tag,
    run_batch,
    scheduling,
    trapped_from,
)

KEYS = ("n", "tag_accuracy", "da_answer_accuracy", "all_blocks_answer_accuracy",
        "base_all_blocks_answer_accuracy", "wrong_tag_answer_accuracy",
        "hidden_chunk_answer_accuracy", "blocks_read_fraction_after_tag",
        "decoding_attention_cost", "local_accuracy")
# Older name of the per-step fractions (tests and notebooks used it).
_fraction_after_tag = fraction_after_tag


def tag_written(text: str, n_chunks: int) -> str | None:
    """The response up to and including its first tag (None when it writes no tag)."""
    _, offset = first_tag(text, n_chunks)
    return None if offset is None else text[:offset].strip()


def answer_text(text: str, n_chunks: int, protocol: str = "card") -> tuple[object, str]:
    """(the chunks the model declared, its answer). The card's: the first tag's directive (None
    when malformed) and the text after it. The paper's (Ho et al. 2026): the chunks of the
    focus blocks it opened before its first <local> (one block naming "3,7", or one block per
    fact as the paper's Section 2 example: "3" then "7"; else its first tag: <local> when it
    needs no chunk), and the text inside <answer>...</answer> (else after its last tag)."""
    if protocol != "paper":
        directive, offset = first_tag(text, n_chunks)
        rest = text if offset is None else text[offset:]
        return directive, rest.strip()
    from da_lab.core.tags import Directive, EventKind, Mode, TagStream

    events = TagStream(n_chunks=n_chunks).feed(text)
    opened = [e.directive for e in events if e.kind is EventKind.TAG_TRAPPED
              and not e.text.startswith("</")]
    before = opened[:next((i for i, d in enumerate(opened) if d.mode is Mode.LOCAL),
                          len(opened))]
    chunks = [c for d in before if d.mode is Mode.FOCUS for c in d.chunks]
    directive = (Directive(Mode.FOCUS, chunks=tuple(chunks)) if chunks else
                 next((d for d in opened if d.mode is Mode.FOCUS),
                      opened[0] if opened else None))
    m = _ANSWER.search(text)
    rest = m.group(1) if m else text[events[-1].offset if events else 0:]
    return directive, rest.strip()


_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)


def mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _runs(i: int, s, enc, ablations: bool) -> list[Run]:
    """The requests after the DA one for prompt i: all blocks, and with ablations the wrong
    tag and the hidden chunk (forced at output index 0: the tag position)."""
    ids = s.prompt.token_ids
    runs = [Run(f"{i}:all", ids)]
    if ablations:
        wrong, hidden = E.wrong_tag(s), E.hidden_layout(s)
        if wrong is not None:
            runs.append(Run(f"{i}:wrong", ids, s.prompt.layout.to_dict(), [[0, enc(wrong)]]))
        if hidden is not None:
            runs.append(Run(f"{i}:hidden", ids, hidden, [[0, enc(s.tag)]]))
    return runs


def _score(tk, s, pid: str, outs: dict, i: int, base_text: str | None) -> dict:
    """One prompt's row: what was expected, what each run wrote, whether it is right."""
    nc = s.prompt.layout.n_chunks
    da = outs[f"{i}:da"]
    proto = s.meta.get("protocol", "card")
    d_tag, d_ans = answer_text(da.text, nc, proto)
    fr = fraction_after_tag(da.rows)
    after = [r.blocks_read for r in trapped_from(da.rows)]
    row = {"id": pid, "set": s.meta.get("set"), "kind": s.kind, "question": s.meta.get("question"),
           "expected_tag": s.tag, "expected_answer": s.answer,
           "expected_values": tk.expected_values(s), "n_chunks": nc,
           "prompt_tokens": len(s.prompt.token_ids),
           "tag_written": tag_written(da.text, nc), "tag_correct": d_tag == s.directive,
           "text": da.text, "answer": d_ans, "correct": tk.correct(d_ans, s),
           # Borrowed words: the nl task's measure (the records task's answers are its keys).
           "foreign_words": (None if s.kind == "local" or "question" not in s.meta
                             else foreign_words(d_ans, s)),
           "blocks_total": da.rows[-1].blocks_total if da.rows else None,
           "blocks_read_after_tag": round(sum(after) / len(after), 2) if after else None,
           "blocks_read_fraction_after_tag": round(sum(fr) / len(fr), 4) if fr else None,
           "kept_after_tag": kept_after_tag(da.rows)}
    # The paper's metric: KV positions read during decode / what full attention reads.
    row["decode_kv_read"], row["decode_kv_full"] = step_positions(da.rows)
    row["decoding_attention_cost"] = cost(row["decode_kv_read"], row["decode_kv_full"])
    a = outs[f"{i}:all"]
    row.update(all_blocks_text=a.text,
               all_blocks_correct=tk.correct(answer_text(a.text, nc, proto)[1], s))
    row.update(base_text=base_text,
               base_correct=None if base_text is None else tk.correct(base_text, s))
    for name, tag in (("wrong_tag", E.wrong_tag(s)), ("hidden_chunk", s.tag)):
        o = outs.get(f"{i}:{'wrong' if name == 'wrong_tag' else 'hidden'}")
        row[name] = tag if o is not None else None
        row[f"{name}_text"] = None if o is None else o.text
        # A run the hook refused ran unmasked: it says nothing about the ablation, so it is
        # left out of the accuracy and counted apart (summary's refused_runs).
        refused = o is not None and "da_refused" in o.flags
        row[f"{name}_refused"] = refused
        row[f"{name}_correct"] = (None if o is None or refused
                                  else tk.correct(answer_text(o.text, nc, proto)[1], s))
        row[f"{name}_kept_after_tag"] = None if o is None else kept_after_tag(o.rows)
    row["hidden_chunks"] = list(E.needed(s)) if row["hidden_chunk"] else None
    row["wrong_tag_chance"] = tk.chance(s) if row["wrong_tag"] else None
    row["flags"] = sorted({f for k, o in outs.items() if k.split(":")[0] == str(i)
                           for f in o.flags})
    row["_fractions"] = fr
    return row


def _progress(n: int, on: bool):
    if not on:
        return None
    from tqdm import tqdm

    return tqdm(total=n, desc="eval", unit="prompt", file=sys.stderr, mininterval=1.0)


def run_eval(n: int | None = 500, model=None, *, task: str = "auto", seed: int | None = None,
             wave: int | None = None, max_tokens: int | None = None, ablations: bool = False,
             base: bool = True, gen: dict | None = None, lab=None, prompts=None,
             async_scheduling: bool = False, block_size: int | None = None,
             progress: bool = True) -> dict:
    """Evaluate `model` (a name of da_lab.models.tiny or a folder; default: the lab's default
    model) on n held-out prompts of its task, or on the prompts of a file (`prompts`: all of
    them, or the first n). Starts its own engine unless `lab` (an idle Lab on that model) is
    given; the base model (nl task, `base`) runs in a child process first. `gen`: the nl
    generator's context / n_chunks ranges and domain split (default: the training ranges and
    domains); `async_scheduling`: let a GPU engine schedule ahead (eval_engine.start_lab);
    `block_size`: the engine's KV block size, every prompt's layout re-rounded to it.
    Returns KEYS, by_kind, by_set, rows (one per prompt) and the run's provenance and timings."""
    from da_lab.models.tiny import model_path

    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    if n is not None and n < 1:
        raise ValueError(f"--n must be at least 1, not {n}")
    tk = E.task_for(task, model if lab is None else lab.model, prompts)
    gen = dict(gen or {})
    seed = tk.default_seed if seed is None else seed
    samples = tk.samples(n if n is not None or prompts else 500, seed, gen)
    if block_size is not None:
        samples = [_at_block_size(s, block_size) for s in samples]
    max_tokens = max_tokens or tk.max_tokens
    wave = wave or _default_wave()
    phases: dict[str, float] = {}
    base_doc = None
    if base and tk.base_model:
        from da_lab.training.eval.eval_base import base_texts

        t1 = time.perf_counter()
        base_doc = base_texts([tk.plain_prompt(s) for s in samples], wave, max_tokens,
                              tk.base_model, async_scheduling=async_scheduling)
        phases["base_child_s"] = round(time.perf_counter() - t1, 1)
    own = lab is None
    if own:
        from da_lab.training.eval.eval_engine import start_lab

        lab = start_lab(model_path(model), [len(s.prompt.token_ids) for s in samples],
                        max_tokens, wave, 4 if ablations else 2, async_scheduling,
                        block_size or BLOCK_SIZE)
    elif block_size is not None and block_size != lab.block_size:
        raise ValueError(f"block size {block_size}: the Lab given runs {lab.block_size}-token "
                         "blocks")
        phases["engine_start_s"] = round(lab.start_s, 1)
    try:
        rows = _run_waves(lab, tk, samples, seed, wave, max_tokens, ablations, base_doc,
                          phases, progress)
        ran_on = {"engine": lab.engine_name, "device": lab.device, "model": str(model or
                  lab.model), "model_folder": lab.model, "runner": lab.runner_class,
                  "async_scheduling": scheduling(lab)}
    finally:
        if own:
            lab.shutdown()
    res = summary(rows)
    res.update(rows=rows, seed=seed, task=tk.name, answer_rule=tk.answer_rule,
               generator={k: list(v) if isinstance(v, tuple) else v for k, v in gen.items()},
               prompts=_file_info(prompts), block_size=lab.block_size,
               wave=wave, max_tokens=max_tokens, ablations=ablations, phases_s=phases,
               base=None if base_doc is None else {k: v for k, v in base_doc.items()
                                                    if k != "texts"},
               seconds=round(time.perf_counter() - t0, 1), **ran_on,
               # CPU timings depend on what else runs: the 1-minute load, start and end.
               host={"cpus": len(os.sched_getaffinity(0)),
                     "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]})
    return res


def _at_block_size(s, block_size: int):
    """Sample `s` with its layout re-rounded to `block_size`-token blocks."""
    prompt = dataclasses.replace(s.prompt, layout=s.prompt.layout.at_block_size(block_size))
    return dataclasses.replace(s, prompt=prompt)


def _file_info(path) -> dict | None:
    """A prompts file's name and sha256 (what was evaluated, checkably)."""
    if path is None:
        return None
    from da_lab.models.cache import file_sha256

    return {"file": str(path), "sha256": file_sha256(path)}


def _default_wave() -> int:
    """Prompts in flight at once: a GPU batches 64 long prompts easily; on a CPU the prefill
    is the cost and a smaller wave keeps the KV cache (host memory) small."""
    import torch

    return 64 if torch.cuda.is_available() else 8


def _run_waves(lab, tk, samples, seed, wave, max_tokens, ablations, base_doc, phases,
               progress) -> list[dict]:
    rows: list[dict] = []
    bar = _progress(len(samples), progress)
    t_da = t_rest = 0.0
    try:
        for w in range(0, len(samples), wave):
            part = samples[w: w + wave]
            t1 = time.perf_counter()
            outs = run_batch(lab, [Run(f"{i}:da", s.prompt.token_ids, s.prompt.layout.to_dict())
                                   for i, s in enumerate(part)], max_tokens)
            t2 = time.perf_counter()
            rest = [r for i, s in enumerate(part) for r in _runs(i, s, lab.encode, ablations)]
            outs.update(run_batch(lab, rest, max_tokens))
            t_da, t_rest = t_da + t2 - t1, t_rest + time.perf_counter() - t2
            for i, s in enumerate(part):
                base_text = None if base_doc is None else base_doc["texts"][w + i]
                pid = s.meta.get("id") or f"{seed}:{w + i}"
                rows.append(_score(tk, s, pid, outs, i, base_text))
            if bar is not None:
                bar.update(len(part))
    finally:
        if bar is not None:
            bar.close()
    phases["da_runs_s"] = round(t_da, 1)
    phases["other_runs_s"] = round(t_rest, 1)
    return rows


def summary(rows: list[dict]) -> dict:
    """KEYS over all rows, per question kind and per set; pops each row's per-step
    fractions."""
    fractions = [f for r in rows for f in r.pop("_fractions", [])]
    sets = sorted({r["set"] for r in rows if r.get("set")})
    out = {**_acc(rows),
           "blocks_read_fraction_after_tag": mean(fractions) if fractions else 1.0,
           "ablation_n": {k: sum(r[f"{k}_correct"] is not None for r in rows)
                          for k in ("wrong_tag", "hidden_chunk")},
           "refused_runs": {"da": sum("da_refused" in r["flags"] and not r.get(
               "wrong_tag_refused") and not r.get("hidden_chunk_refused") for r in rows),
               **{k: sum(bool(r.get(f"{k}_refused")) for r in rows)
                  for k in ("wrong_tag", "hidden_chunk")}},
           "wrong_tag_chance": mean(r["wrong_tag_chance"] for r in rows),
           "by_kind": {k: _acc([r for r in rows if r["kind"] == k])
                       for k in sorted({r["kind"] for r in rows})}}
    out["by_set"] = {}
    for name in sets:
        part = [r for r in rows if r.get("set") == name]
        out["by_set"][name] = {**_acc(part), "by_kind": {
            k: _acc([r for r in part if r["kind"] == k]) for k in sorted({r["kind"]
                                                                          for r in part})}}
    return out


def _cost(rs: list[dict]) -> float | None:
    """The decoding attention cost of the DA runs of `rs`, all their positions together."""
    return mean_cost((r["decode_kv_read"], r["decode_kv_full"]) for r in rs
                     if r.get("decode_kv_full"))


def _acc(rs: list[dict]) -> dict:
    local = [r for r in rs if r["kind"] == "local"]
    asked = [r for r in rs if r.get("foreign_words") is not None]
    return {"n": len(rs), "tag_accuracy": mean(r["tag_correct"] for r in rs),
            "da_answer_accuracy": mean(r["correct"] for r in rs),
            "all_blocks_answer_accuracy": mean(r["all_blocks_correct"] for r in rs),
            "base_all_blocks_answer_accuracy": mean(r["base_correct"] for r in rs),
            "wrong_tag_answer_accuracy": mean(r["wrong_tag_correct"] for r in rs),
            "hidden_chunk_answer_accuracy": mean(r["hidden_chunk_correct"] for r in rs),
            "local_accuracy": mean(r["tag_correct"] for r in local),
            "foreign_word_rate": mean(bool(r["foreign_words"]) for r in asked),
            "decoding_attention_cost": _cost(rs)}


def document(res: dict, command: str) -> dict:
    """The whole `da-lab eval` document: provenance (command, engine, device, model, date, wall
    time), the summary (KEYS at the top level, then by kind) and one row per prompt."""
    from datetime import datetime

    prov = ("engine", "device", "model", "model_folder", "runner", "async_scheduling",
            "block_size")
    extra = ("foreign_word_rate", "ablation_n", "refused_runs", "wrong_tag_chance", "task",
             "answer_rule", "seed", "generator", "prompts", "wave", "max_tokens", "ablations",
             "phases_s", "host", "base", "by_kind", "by_set")
    return {"command": command, **{k: res[k] for k in prov},
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "wall_s": res["seconds"], **{k: res[k] for k in KEYS},
            **{k: res[k] for k in extra}, "rows": res["rows"]}


def table(res: dict) -> str:
    """The eval as a small text table (what `da-lab eval` prints without --json)."""
    cols = (("tag", "tag_accuracy"), ("DA answer", "da_answer_accuracy"),
            ("all-blocks", "all_blocks_answer_accuracy"),
            ("base all", "base_all_blocks_answer_accuracy"),
            ("wrong tag", "wrong_tag_answer_accuracy"),
            ("hidden", "hidden_chunk_answer_accuracy"), ("<local>", "local_accuracy"),
            ("attn cost", "decoding_attention_cost"))

    # the first column as wide as the longest kind or set name (a set is named whole)
    w = max([10] + [len(str(k)) + 1 for k in (*res["by_kind"], *res.get("by_set", {}))])

    def line(name: str, r: dict) -> str:
        cells = "".join(f"{'–' if r[k] is None else format(r[k], '.3f'):>12}" for _, k in cols)
        return f"{name:<{w}}{r['n']:>5}{cells}"

    lines = [f"{'':<{w}}{'n':>5}" + "".join(f"{h:>12}" for h, _ in cols)]
    lines += [line(kind, r) for kind, r in res["by_kind"].items()]
    lines += [line(str(name), r) for name, r in res.get("by_set", {}).items()]
    lines.append(line("all", res))
    lines.append(f"blocks read per step after the tag: "
                 f"{res['blocks_read_fraction_after_tag']:.3f} of the row")
    if res.get("wrong_tag_chance") is not None:
        lines.append(f"wrong tag: a uniform guess among the prompt's values is right "
                     f"{res['wrong_tag_chance']:.3f} of the time")
    return "\n".join(lines)


def load_document(path) -> dict:
    """A `da-lab eval` document read back, plain or gzipped (committed results are .json.gz)."""
    import gzip
    import json
    from pathlib import Path

    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)
