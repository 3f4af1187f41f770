"""Many readers, one corpus (issue 43): requests over one long shared prefix, each with its own
question and its own FOCUS, and what their step records must show.

The corpus is the seed scenario's scaffold head and twelve chunks (25 whole blocks); each reader
appends its own question. With prefix caching the later readers find the corpus cached, so
DA must keep it shared: every reader's block-table row names the same physical blocks for it,
FOCUS's kernel rows point into those same blocks, and no later reader recomputes them.
`sharing` reads that off the hook's step records; the oracle is checked apart, per reader.
"""

from __future__ import annotations

import numpy as np

# name -> (question, director tags). Different chunks per reader; one writes the paper's tag
# and closes it, so its directive returns to GLOBAL over the same shared blocks.
READERS = {
    "shared_prefix_c3": (" Question: What is the value of key 31? Answer:",
                         [(2, "<focus C3>")]),
    "shared_prefix_c5_c9": (" Question: What is the value of key 52? Answer:",
                            [(2, "<focus C5,C9>")]),
    "shared_prefix_paper": (" Question: Which record holds key 121? Answer:",
                            [(1, '<focus magic_chunks="12">'), (24, "</focus>")]),
    "shared_prefix_c1_c2": (" Question: What is key 12? Answer:",
                            [(3, "<focus C1-C2>")]),
}


# Readers whose kept chunks overlap (issue 59, the grouped read): C3, C5 and C9 are each kept
# by three of the four FOCUS readers, and the last reader stays GLOBAL (grouped with the others
# only when every DA row may join a group, grouped_read="all").
OVERLAPPING = {
    "grouped_c3_c5": (" Question: What is the value of key 31? Answer:",
                      [(2, "<focus C3,C5>")]),
    "grouped_c3_c9": (" Question: What is the value of key 52? Answer:",
                      [(2, "<focus C3,C9>")]),
    "grouped_c5_c9": (" Question: Which record holds key 121? Answer:",
                      [(2, "<focus C5,C9>")]),
    "grouped_c3_c5_c9": (" Question: What is key 12? Answer:",
                         [(2, "<focus C3,C5,C9>")]),
    "grouped_global": (" Question: What is the value of key 77? Answer:", []),
}


def prompts(lab, readers: dict | None = None) -> dict:
    """Each reader's prompt: the seed corpus (same tokens, same whole-block chunks) + its
    question (`readers`: READERS unless given)."""
    from da_lab.core.layout import build_prompt, seed_texts

    head, chunks, _ = seed_texts()
    filler = lab.encode("\n")[0]
    return {name: build_prompt(lab.encode, head, chunks, q, filler_id=filler,
                               bos_id=lab.tokenizer.bos_token_id, block_size=lab.block_size,
                               chunk_blocks=2)
            for name, (q, _) in (readers or READERS).items()}


def grouped_facts(history) -> dict:
    """What the hook's grouped-read accounts (SESSION.grouped.history: one per step with the
    flag on) say: steps planned and grouped, layers that ran grouped, steps refused, the
    largest |grouped - plain| seen with DA_LAB_GROUPED_CHECK=1, and the blocks read per step."""
    h = [x for x in history if isinstance(x, dict)]
    g = [x for x in h if x.get("grouped")]
    ran = [x for x in g if x.get("layers") and not x.get("refused")]
    return {"steps": len(h), "grouped_steps": len(g), "ran_steps": len(ran),
            "refused_steps": sum(bool(x.get("refused")) for x in h),
            "layers": sum(x.get("layers", 0) for x in g),
            "check_layers": sum(x.get("check_layers", 0) for x in g),
            "check_max_abs": max((x.get("check_max_abs", 0.0) for x in g), default=None),
            "plain_blocks": sum(x.get("plain_blocks", 0) for x in ran),
            "grouped_blocks": sum(x.get("grouped_blocks", 0) for x in ran),
            "union_blocks": sum(x.get("union_blocks", 0) for x in ran)}


def corpus_blocks(prompt) -> int:
    """Whole blocks the readers share: the scaffold head and the chunks."""
    return prompt.layout.tail_start


def sharing(steps: dict[str, list], n_shared: int) -> dict:
    """What the readers' hooked step records (name -> RequestSteps in step order, first reader
    first) say about the corpus blocks: their physical ids, whether every row at every step
    names the same ones, whether every masked kernel row reads its kept corpus blocks from
    them, and how many prompt tokens each reader's first step found already computed."""
    rows = [s.staged_row[:n_shared] for ss in steps.values() for s in ss
            if s.staged_row is not None]
    shared = rows[0] if rows else np.zeros(0, np.int32)
    rows_equal = bool(rows) and all(len(r) == n_shared and np.array_equal(r, shared)
                                    for r in rows)
    focus_steps = kernel_ok = 0
    for ss in steps.values():
        for s in ss:
            if s.kept_logical is None or s.staged_row is None:
                continue
            focus_steps += 1
            kept = np.asarray(s.kept_logical)
            corpus = kept[kept < n_shared]
            read = np.asarray(s.read_row)[:len(kept)]        # a builder's row may be padded
            kernel_ok += bool(np.array_equal(read[:len(corpus)], shared[corpus]))
    cached = {name: int(ss[0].seq_len - ss[0].query_len) for name, ss in steps.items() if ss}
    later = list(cached.values())[1:]
    block = next((s.block_size for ss in steps.values() for s in ss), 0)
    passed = (rows_equal and focus_steps > 0 and kernel_ok == focus_steps and bool(later)
              and all(c >= n_shared * block for c in later))
    return {"passed": passed, "corpus_blocks": n_shared,
            "physical_ids": [int(b) for b in shared], "rows_equal": rows_equal,
            "focus_steps": focus_steps, "kernel_rows_in_corpus": kernel_ok,
            "cached_tokens": cached}


# |grouped - plain| of a layer's outputs: float32 on the CPU is exact to ~1e-6; in bfloat16 each
# partial is rounded before the merge (as vLLM's own cascade attention does), a few 2^-8.
GROUPED_TOL = {"cpu": 1e-4, "cuda": 0.08}


def grouped_verdict(history, flag: str, device: str) -> dict:
    """The GPU run's verdict on the grouped read (checks/gpu_tests.py --grouped-read): steps
    were grouped, none refused, every grouped layer checked against the plain path
    (DA_LAB_GROUPED_CHECK=1) and within GROUPED_TOL of it."""
    g = grouped_facts(history)
    tol = GROUPED_TOL["cuda" if device == "cuda" else "cpu"]
    g.update(flag=flag, tolerance=tol, passed=bool(
        g["ran_steps"] and not g["refused_steps"] and g["check_layers"] == g["layers"]
        and g["check_max_abs"] is not None and g["check_max_abs"] < tol))
    return g


def grouped_word(facts: dict | None) -> str:
    if facts is None:
        return "-"
    return (f"{'ok' if facts['passed'] else 'BROKEN'}({facts['ran_steps']} steps, "
            f"max|diff| {facts['check_max_abs']})")
