"""Notebook 06's helpers: ask SmolLM2-DA about documents a learner picked or typed.

    examples()                  short held-out samples, one per kind: documents, question, reply
                                (held-out domains: things the model was never trained on)
    user_prompt(docs, q)        the DA prompt the model was trained on, from plain texts:
                                the system prompt that asks for a tag, "Document Ck: ..." per
                                text (each padded to whole KV blocks), the question
                                (nl_task.user_prompt: the same function training and
                                `da-lab eval --prompts` use)
    EndOfTurn(lab)              the Lab, ending each request at the model's end-of-turn token
    eval_summary(paths)         the summary rows of committed `da-lab eval` documents
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.eval.evaluate import load_document

LABEL = re.compile(r"^Document C\d+:\s*")
user_prompt = N.user_prompt
paper_user_prompt = N.paper_user_prompt      # the paper's Magic Chunk prompt (Ho et al. 2026)
load_doc = load_document                     # for the lesson: a committed eval document


def examples(kinds: tuple[str, ...] = ("single", "multi", "local"),
             seed: int = G.EVAL_SEED, split: str = "heldout", tok=None) -> list[dict]:
    """One held-out sample of each kind, small enough for a CPU (about 1,000 tokens, 4-6
    documents): the first of that kind in the held-out stream (of held-out domains by
    default). `tok`: the model's tokens (nl_task.tokens(folder); default SmolLM2's)."""
    out: dict[str, dict] = {}
    for i in range(200):
        s = G.sample(seed, i, G.HELDOUT, split, context=(900, 1200), n_chunks=(4, 6), tok=tok)
        if s.kind in kinds and s.kind not in out:
            out[s.kind] = {"documents": list(s.meta["documents"]),
                           "question": s.meta["question"], "kind": s.kind,
                           "expected": s.tag + " " + s.answer, "token_ids": s.prompt.token_ids}
        if len(out) == len(kinds):
            break
    return [out[k] for k in kinds if k in out]


def split_documents(text: str) -> list[str]:
    """Documents typed in one box: separated by blank lines (a leading "Document Ck:" is
    dropped, the lab numbers them itself); line breaks inside a document stay."""
    parts = [LABEL.sub("", p.strip()) for p in re.split(r"\n\s*\n", text)]
    return [N.clean_document(p) for p in parts if p.strip()]


def reply(text: str) -> str:
    """A reply as the user reads it: up to the end of the model's turn (SmolLM2's <|im_end|>,
    Gemma's <end_of_turn>)."""
    return re.split(r"<\|im_end\|>|<end_of_turn>", text)[0].strip()


class EndOfTurn:
    """The Lab, seen through a wrapper that aborts a request once the model has written its
    end-of-turn token: `Lab.add_request` ignores end of sequence (so that a director's tags
    can run past it), but a chat model's answer ends there. Everything else is the Lab's own,
    so a LiveSource, a Player and DAHookDiagram's steering work on it unchanged."""

    def __init__(self, lab, eos_id: int | None = None) -> None:
        self._lab = lab
        # The end of turn of the model the Lab runs (its folder's tokenizer), unless given.
        if eos_id is None:
            try:
                eos_id = N.tokens(str(lab.model)).eos_id
            except (AttributeError, OSError, KeyError, ValueError):   # not a chat model's
                eos_id = N.tokens().eos_id
        self.eos_id = eos_id

    def step(self):
        rec = self._lab.step()
        for da_id, r in list(self._lab.requests.items()):
            if not r["finished"] and self.eos_id in r["token_ids"]:
                self._lab.abort(da_id)
        return rec

    def __getattr__(self, name):
        return getattr(self._lab, name)


SUMMARY = (("n", "n"), ("tag_accuracy", "right tag"), ("da_answer_accuracy", "answer under DA"),
           ("all_blocks_answer_accuracy", "same model, all blocks"),
           ("base_all_blocks_answer_accuracy", "base model, plain prompt"),
           ("wrong_tag_answer_accuracy", "ablation: wrong tag forced"),
           ("hidden_chunk_answer_accuracy", "ablation: right tag, chunk hidden"),
           ("blocks_read_fraction_after_tag", "blocks read after the tag"),
           ("decoding_attention_cost", "decoding attention cost"))


def eval_summary(paths) -> list[dict]:
    """One row per `da-lab eval` document: where it ran and its summary (SUMMARY's keys)."""
    rows = []
    for p in sorted(Path(x) for x in paths):
        doc = load_document(p)
        row = {"file": Path(p).name.removesuffix(".gz"), "engine": doc.get("engine"),
               "device": doc.get("device"), "wall_s": doc.get("wall_s")}
        row.update({label: doc.get(k) for k, label in SUMMARY})
        rows.append(row)
    return rows


def record_example(path: str | Path, index: int = 0, max_tokens: int = 64) -> dict:
    """Record one held-out example (`examples()[index]`) on SmolLM2-DA to a trace: the model
    writes its own tag, the hook masks, the answer follows; the request ends at end of turn.
    Returns what it wrote and the run's numbers."""
    import time

    from da_lab.engine.lab import Lab
    from da_lab.models.tiny import model_path

    ex = examples()[index]
    prompt = user_prompt(ex["documents"], ex["question"])
    lab = EndOfTurn(Lab(model_path("smollm2-da"), num_blocks=64))
    try:
        lab.record(path)
        da_id = lab.add_request(prompt, max_tokens=max_tokens, request_id="smollm2-da")
        t0, steps = time.perf_counter(), 0
        while lab.has_unfinished():
            lab.step()
            steps += 1
        wall = time.perf_counter() - t0
        lab.stop_recording()
        text = lab.requests[da_id]["text"]
    finally:
        lab.shutdown()
    return {"trace": str(path), "question": ex["question"], "expected": ex["expected"],
            "wrote": reply(text), "prompt_tokens": prompt.layout.prompt_len, "steps": steps,
            "wall_s": round(wall, 2)}


def paper_summary(lab, da_id: str, n_chunks: int) -> dict:
    """What a reply in the paper's format did: the chunks it focused first, the text in its
    <answer>, every mode change in order (a closing tag's restored mode included: the hook's
    own events), the decoding attention cost (the paper's metric, core/cost.py) and the
    partially kept blocks of its first masked step."""
    import numpy as np

    from da_lab.core.cost import request_cost
    from da_lab.core.mask import partially_kept
    from da_lab.training.eval.evaluate import answer_text

    st = lab.request_state(da_id)
    text = reply(lab.requests[da_id]["text"])
    directive, answer = answer_text(text, n_chunks, "paper")
    modes = [(e.get("text"), e["directive"]["mode"], tuple(e["directive"].get("chunks") or ()))
             for e in st.events if e["kind"] == "mode_changed" and e.get("directive")]
    # The first masked step after a focus: the blocks kept whole though they hold hidden
    # tokens too (spans are not padded, so a kept chunk's edge blocks are shared).
    partial = []
    if directive is not None and directive.chunks:
        first = next((k for _q, _n, k in st.mask_history if k is not None), None)
        if first is not None:
            partial = [int(b) for b in partially_kept(directive, st.layout, np.asarray(first))]
    return {"text": text, "focused": tuple(directive.chunks) if directive else (),
            "answer": answer, "modes": modes, "cost": request_cost(st), "partial": partial}

if __name__ == "__main__":
    import sys

    from da_lab.engine.env import LOG_TO_STDERR, apply_env

    apply_env(LOG_TO_STDERR)
    if len(sys.argv) != 3 or sys.argv[1] != "--record":
        sys.exit("usage: python -m da_lab.training.eval.nl_demo --record TRACE.jsonl.gz")
    print(json.dumps(record_example(sys.argv[2])))
