"""`da-lab eval`: does the model write the right tag, and does it answer under its own mask?

Runs held-out prompts of `da_lab.training.task` (a seed disjoint from training) through the real
vLLM engine with the DA hook: no director, the model writes its own tags. Every prompt runs twice:
    DA          with its layout: the hook traps the model's tag and hides blocks from then on;
    all blocks  without a layout: the hook changes nothing (the model may still write the tag).
The second run of a prompt reuses the first one's prompt KV through prefix caching (same
tokens; the prompt is prefilled under GLOBAL either way), so it costs a few decode steps.

Measures, over n prompts:
    tag_accuracy                    the first tag written names exactly the right chunk(s) /
                                    `<local>`
    da_answer_accuracy              the text after that tag is exactly the answer (DA run)
    all_blocks_answer_accuracy      the same with every block visible
    blocks_read_fraction_after_tag  mean over the decode steps after the tag was trapped of
                                    blocks read / blocks in the row (from the hook's records);
                                    1.0 when no tag was ever trapped (nothing hidden)
Requests are batched: a wave of prompts is added, then the engine steps until all are done.
`document()` is what `da-lab eval --json` / `--out` write: the run's provenance (command,
engine, device, model, date, wall time), the numbers above, and one row per prompt.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC
from pathlib import Path

from da_lab.training import task as T

KEYS = ("n", "tag_accuracy", "da_answer_accuracy", "all_blocks_answer_accuracy",
        "blocks_read_fraction_after_tag")


def tag_written(text: str, n_chunks: int) -> str | None:
    """The response up to and including its first tag (None when it writes no tag)."""
    _, offset = T.first_tag(text, n_chunks)
    return None if offset is None else text[:offset].strip()


def answer_text(text: str, n_chunks: int) -> tuple[object, str]:
    """(first tag's directive or None, the answer: text after the first tag, else all of it)."""
    directive, offset = T.first_tag(text, n_chunks)
    rest = text if offset is None else text[offset:]
    return directive, rest.strip()


def _run_wave(lab, samples: list, da: bool, max_tokens: int, tag: str) -> tuple[list[str], list]:
    """Generate every sample greedily until </s>; return texts and per-request hook rows."""
    from vllm import SamplingParams

    from da_lab.engine.access import output_kind
    from da_lab.hook.state import EXTRA_ID, EXTRA_LAYOUT

    ids = []
    for i, s in enumerate(samples):
        rid = f"eval-{tag}-{'da' if da else 'all'}-{i}-{time.perf_counter_ns()}"
        extra = {EXTRA_ID: rid, EXTRA_LAYOUT: s.prompt.layout.to_dict()} if da else None
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens,
                                output_kind=output_kind("FINAL_ONLY"), extra_args=extra)
        lab.engine.add_request(rid, {"prompt_token_ids": s.prompt.token_ids}, params)
        ids.append(rid)
    texts: dict[str, str] = {}
    rows: dict[str, list[dict]] = {rid: [] for rid in ids}
    while lab.engine.has_unfinished_requests():
        for o in lab.engine.step():
            if o.finished:
                texts[o.request_id] = o.outputs[0].text
        for h in lab.tracker.reset_log():
            for r in h.requests:
                if r.req in rows:
                    rows[r.req].append(r)
    return [texts.get(rid, "") for rid in ids], [rows[rid] for rid in ids]


def _fraction_after_tag(rows: list) -> list[float]:
    """blocks_read / blocks_total of each hook record from the step that trapped the first tag
    on (that step already reads under the new directive)."""
    out, trapped = [], False
    for r in rows:
        trapped = trapped or any(e.get("kind") == "tag_trapped" for e in r.events)
        if trapped and r.query_len == 1:
            out.append(r.blocks_read / max(1, r.blocks_total))
    return out


def run_eval(n: int = 500, model: str | Path | None = None, *, seed: int | None = None,
             wave: int = 64, max_tokens: int = 24, lab=None, progress: bool = True) -> dict:
    """Evaluate `model` (default: the lab's default model) on n held-out prompts.

    Starts its own engine unless `lab` (an idle `da_lab.engine.lab.Lab`) is given. Returns the five
    numbers of KEYS plus "by_kind" (the same accuracies per question kind), "rows" (one per
    prompt: id, kind, expected tag and answer, both texts, the tag written, the blocks read),
    "engine", "device", "model" and "seconds"."""
    t0 = time.perf_counter()
    seed = T.EVAL_SEED if seed is None else seed
    samples = T.held_out(n, seed)
    own = lab is None
    if own:
        from da_lab.engine.lab import Lab

        need = max((len(s.prompt.token_ids) for s in samples), default=0) + max_tokens
        per = -(-need // 32) + 1                  # KV blocks one request can hold
        lab = Lab(model, num_blocks=max(64, min(wave, max(n, 1)) * per + 8),
                  max_model_len=max(1024, need + 32), record_rows=False)
    elif lab.has_unfinished():
        raise RuntimeError("run_eval needs an idle Lab (it has unfinished requests)")
    rows, fractions = [], []
    ran_on = {"engine": lab.engine_name, "device": lab.device, "model": lab.model}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="eval", unit="prompt", file=sys.stderr, mininterval=1.0)
    try:
        for w in range(0, n, wave):
            part = samples[w: w + wave]
            da_texts, da_rows = _run_wave(lab, part, True, max_tokens, str(w))
            all_texts, _ = _run_wave(lab, part, False, max_tokens, str(w))
            rows_in = zip(part, da_texts, all_texts, da_rows, strict=True)
            for i, (s, dt, at, hr) in enumerate(rows_in):
                nc = s.prompt.layout.n_chunks
                d_tag, d_ans = answer_text(dt, nc)
                _, a_ans = answer_text(at, nc)
                after = _fraction_after_tag(hr)
                rows.append({"id": f"{seed}:{w + i}", "kind": s.kind, "tag": s.tag,
                             "answer": s.answer, "da_text": dt, "all_blocks_text": at,
                             "tag_written": tag_written(dt, nc), "da_answer": d_ans,
                             "tag_ok": d_tag == s.directive, "da_ok": d_ans == s.answer,
                             "all_ok": a_ans == s.answer,
                             "blocks_read_fraction_after_tag":
                                 round(sum(after) / len(after), 4) if after else None})
                fractions += after
            if bar is not None:
                bar.update(len(part))
    finally:
        if bar is not None:
            bar.close()
        if own:
            lab.shutdown()

    def mean(xs) -> float:
        xs = list(xs)
        return sum(xs) / len(xs) if xs else 0.0

    by_kind = {}
    for kind in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == kind]
        by_kind[kind] = {"n": len(rs), "tag_accuracy": mean(r["tag_ok"] for r in rs),
                         "da_answer_accuracy": mean(r["da_ok"] for r in rs),
                         "all_blocks_answer_accuracy": mean(r["all_ok"] for r in rs)}
    return {"n": len(rows),
            "tag_accuracy": mean(r["tag_ok"] for r in rows),
            "da_answer_accuracy": mean(r["da_ok"] for r in rows),
            "all_blocks_answer_accuracy": mean(r["all_ok"] for r in rows),
            "blocks_read_fraction_after_tag": mean(fractions) if fractions else 1.0,
            "by_kind": by_kind, "rows": rows, "seed": seed, **ran_on,
            "seconds": round(time.perf_counter() - t0, 1)}


def document(res: dict, command: str) -> dict:
    """The whole `da-lab eval` document: provenance, the summary (KEYS, by kind) and one row per
    prompt (id, expected tag and answer, the tag written, the answer, whether it is correct,
    the blocks read after the tag; the all-blocks run beside it)."""
    from datetime import datetime

    rows = [{"id": r["id"], "kind": r["kind"], "expected_tag": r["tag"],
             "expected_answer": r["answer"], "tag_written": r["tag_written"],
             "tag_correct": r["tag_ok"], "answer": r["da_answer"], "correct": r["da_ok"],
             "blocks_read_fraction_after_tag": r["blocks_read_fraction_after_tag"],
             "text": r["da_text"], "all_blocks_text": r["all_blocks_text"],
             "all_blocks_correct": r["all_ok"]} for r in res["rows"]]
    return {"command": command, "engine": res["engine"], "device": res["device"],
            "model": str(res["model"]),
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "wall_s": res["seconds"], "seed": res["seed"], **{k: res[k] for k in KEYS},
            "by_kind": res["by_kind"], "rows": rows}


def table(res: dict) -> str:
    """The eval as a small text table (what `da-lab eval` prints without --json)."""
    lines = [f"{'':<12}{'n':>5}{'tag':>8}{'DA answer':>12}{'all-blocks':>12}"]
    for kind, r in res["by_kind"].items():
        lines.append(f"{kind:<12}{r['n']:>5}{r['tag_accuracy']:>8.3f}"
                     f"{r['da_answer_accuracy']:>12.3f}{r['all_blocks_answer_accuracy']:>12.3f}")
    lines.append(f"{'all':<12}{res['n']:>5}{res['tag_accuracy']:>8.3f}"
                 f"{res['da_answer_accuracy']:>12.3f}{res['all_blocks_answer_accuracy']:>12.3f}")
    lines.append(f"blocks read per step after the tag: "
                 f"{res['blocks_read_fraction_after_tag']:.3f} of the row")
    return "\n".join(lines)
