"""Many readers over one corpus (`da-lab bench --shared Q`, issue 43). Pure: needs neither vLLM
nor torch.

Every request's prompt is one corpus of `context` tokens (whole blocks: a scaffold-head block
and N_CHUNKS equal chunks), which the prefix cache holds once, plus a question of Q tokens of its
own (the layout's tail: always read). Under FOCUS each request names its own pair of chunks, a
different pair for every request of a batch, so the batch's rows keep different blocks of the
same physical cache. stock_kept (the physical limit) is stock on the corpus cut to the blocks
one FOCUS request keeps, plus the question: a prompt of the kept length.
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
