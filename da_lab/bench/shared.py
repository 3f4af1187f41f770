"""Many readers over one corpus (`da-lab bench --shared Q`, issue 43). Pure: needs neither vLLM
nor torch.

Every request's prompt is one corpus of `context` tokens (whole blocks: a scaffold-head block
and N_CHUNKS equal chunks), which the prefix cache holds once, plus a question of Q tokens of its
own (the layout's tail: always read). Under FOCUS each request names its own pair of chunks, a
different pair for every request of a batch, so the batch's rows keep different blocks of the
same physical cache. stock_kept (the physical limit) is stock on the corpus cut to the blocks
one FOCUS request keeps, plus the question: a prompt of the kept length, the same prefix for
every request. stock_kept_pairs (issue 59): stock on each request's own cut, the head and the
pair of chunks its FOCUS keeps, plus its question: FOCUS's read pattern without DA (the prefix
cache shares the head, and a first chunk between requests that keep the same one).
`grouped_account` reads the grouped read's plans (hook/grouped.py) off the hook's steps.
"""

from __future__ import annotations

import itertools
import random

from da_lab.bench.plan import N_CHUNKS


def shared_layout(context: int, block_size: int, question: int, n_chunks: int = N_CHUNKS):
    """The Layout of corpus (`context` rounded down to whole blocks) + a `question`-token tail."""
    from da_lab.core.layout import Layout

    chunk_total = context // block_size - 1
    if chunk_total < n_chunks or question < 1:
        raise ValueError(f"a shared corpus of {context} tokens can't hold a head block and "
                         f"{n_chunks} chunks of whole {block_size}-token blocks, or the "
                         f"question ({question} tokens) is empty")
    sizes = [chunk_total // n_chunks + (1 if i < chunk_total % n_chunks else 0)
             for i in range(n_chunks)]
    return Layout(block_size, 1, tuple(sizes), (1 + chunk_total) * block_size + question)


def corpus_len(layout) -> int:
    """Tokens of the shared corpus (everything before the question)."""
    return layout.tail_start * layout.block_size


def focus_pairs(n_chunks: int = N_CHUNKS) -> list[tuple[int, int]]:
    """Every pair of chunk ids in a fixed shuffled order: request i focuses pair i (mod the
    count), so up to n(n-1)/2 requests of a batch each read a different pair."""
    pairs = list(itertools.combinations(range(1, n_chunks + 1), 2))
    random.Random(0).shuffle(pairs)
    return pairs


def focus_tag(i: int, n_chunks: int = N_CHUNKS) -> str:
    pairs = focus_pairs(n_chunks)
    a, b = pairs[i % len(pairs)]
    return f"<focus C{a},C{b}>"


def kept_corpus_len(layout) -> int:
    """Corpus tokens stock_kept keeps: the head block and the first FOCUS request's pair."""
    a, b = focus_pairs(layout.n_chunks)[0]
    blocks = layout.head_blocks + layout.chunk_blocks[a - 1] + layout.chunk_blocks[b - 1]
    return blocks * layout.block_size


def blocks_needed(layout, batch: int, max_model_len: int) -> int:
    """KV blocks a batch needs: the corpus once, each request's question and response apart."""
    bs = layout.block_size
    own = -(-(max_model_len - corpus_len(layout)) // bs)
    return corpus_len(layout) // bs + batch * own


def pair_blocks(layout, i: int) -> list[int]:
    """Logical corpus blocks request i's FOCUS keeps: the head and its pair's chunks."""
    a, b = focus_pairs(layout.n_chunks)[i % len(focus_pairs(layout.n_chunks))]
    return [*range(layout.head_blocks), *layout.chunk_range(a), *layout.chunk_range(b)]


def pair_corpus(layout, corpus: list[int], i: int) -> list[int]:
    """stock_kept_pairs' prompt for request i without its question: the corpus tokens of the
    blocks its FOCUS keeps, in order."""
    bs = layout.block_size
    return [t for blk in pair_blocks(layout, i) for t in corpus[blk * bs:(blk + 1) * bs]]


def blocks_needed_pairs(layout, batch: int, max_model_len: int) -> int:
    """KV blocks a stock_kept_pairs batch needs at most: each request its own cut (the prefix
    cache may share the head and some first chunks; not counted)."""
    bs = layout.block_size
    own = -(-(max_model_len - corpus_len(layout)) // bs)
    return sum(len(pair_blocks(layout, i)) + own for i in range(batch))


def grouped_account(steps) -> dict:
    """The grouped read's plans over a window of hook steps (each step's `grouping` account,
    hook/grouped.py), per step: blocks the plain path reads (every kernel row), blocks the
    grouped path reads (each shared block once + each row's own; the plain count in a step
    that was not grouped), the union of the blocks read, and how many steps were grouped."""
    acc = [g for g in (getattr(s, "grouping", None) for s in steps) if g]
    ran = [g for g in acc if g.get("grouped") and g.get("layers") and not g.get("refused")]
    ran_ids = {id(g) for g in ran}
    n = len(acc)
    if not n:
        return {"grouped_steps": 0, "planned_steps": 0}
    plain = sum(g.get("plain_blocks", 0) for g in acc)
    read = sum(g["grouped_blocks"] if id(g) in ran_ids else g.get("plain_blocks", 0)
               for g in acc)
    union = sum(g.get("union_blocks", 0) for g in acc)
    return {"planned_steps": n, "grouped_steps": len(ran),
            "grouped_refused_steps": sum(bool(g.get("refused")) for g in acc),
            "grouped_layers_per_step": round(sum(g.get("layers", 0) for g in ran) / n, 2),
            "groups_per_step": round(sum(g.get("groups", 0) for g in ran) / max(1, len(ran)), 1),
            "kv_blocks_plain_per_step": plain / n, "kv_blocks_grouped_per_step": read / n,
            "kv_blocks_union_per_step": union / n,
            "kv_read_over_union": round(read / union, 4) if union else None,
            "grouped_reasons": sorted({g.get("refused") or g.get("reason") or "" for g in acc
                                       if id(g) not in ran_ids})[:3]}
