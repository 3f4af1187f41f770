"""The DA decision: which logical blocks the attention kernel reads. A pure function.

    GLOBAL       everything
    FOCUS Cs     every block outside the chunks (the card's scaffold head, with the sink, and
                 tail) + the named chunks + response (a chunk in `layout.hidden` is never
                 kept: the eval's hidden-chunk ablation)
    LOCAL        every block outside the chunks + response
    LOCAL N      every block outside the chunks + the N most recent response blocks
    always       the blocks holding this step's own query tokens

A block is kept when any token in it is visible (the paper's "rounded outward"): with the
paper's unpadded chunks a block shared by a hidden chunk and visible text is read whole
(`partially_kept`), so the kernel may see up to block_size - 1 hidden tokens at each edge.

Hidden blocks are whole blocks below the last block, so the kernel's view is the kept blocks in
order, with seq_len shortened by block_size per hidden block ("compaction"). RoPE positions are
already baked into the cached keys, so this is exactly masked attention.
"""

from __future__ import annotations

import functools

import numpy as np

from da_lab.core.layout import Layout
from da_lab.core.tags import Directive, Mode


def kept_blocks(directive: Directive, layout: Layout, seq_len: int, query_len: int) -> np.ndarray:
    """Sorted int32 logical block ids the kernel may read for a request at one step.

    seq_len counts every token in the KV (this step's queries included); the queries are the
    last `query_len` of them.
    """
    bs = layout.block_size
    n_blocks = -(-seq_len // bs)
    if directive.mode is Mode.GLOBAL or n_blocks == 0:
        return _all_blocks(n_blocks)
    keep = np.zeros(n_blocks, dtype=bool)
    free = layout.free_blocks     # the card's head and tail; every block outside the chunks
    keep[free[free < n_blocks]] = True
    if directive.mode is Mode.FOCUS:
        for cid in _visible(directive, layout):
            r = layout.chunk_range(cid)
            keep[r.start: r.stop] = True
        keep[layout.response_start:] = True
    elif directive.recent is None:
        keep[layout.response_start:] = True
    else:
        keep[max(layout.response_start, n_blocks - directive.recent):] = True
    # The step's own queries must see themselves and each other: their blocks stay.
    keep[max(0, seq_len - query_len) // bs:] = True
    return np.flatnonzero(keep).astype(np.int32)


def _visible(directive: Directive, layout: Layout) -> list[int]:
    """The chunks a directive shows (FOCUS: the named ones the layout has and does not hide)."""
    if directive.mode is Mode.GLOBAL:
        return list(range(1, layout.n_chunks + 1))
    if directive.mode is Mode.LOCAL:
        return []
    return [c for c in directive.chunks if c <= layout.n_chunks and c not in layout.hidden]


def visible_tokens(directive: Directive, layout: Layout, seq_len: int) -> np.ndarray:
    """The paper's token mask before rounding: True where a token may be attended (everything
    but the hidden chunks' tokens; LOCAL N also hides response blocks, as whole blocks)."""
    vis = np.ones(seq_len, dtype=bool)
    shown = set(_visible(directive, layout))
    for cid, (a, b) in enumerate(layout.chunk_spans, start=1):
        if cid not in shown:
            vis[a:b] = False
    if directive.mode is Mode.LOCAL and directive.recent is not None:
        bs = layout.block_size
        old_end = max(layout.response_start, -(-seq_len // bs) - directive.recent) * bs
        vis[max(layout.prompt_len, 0):old_end] = False
    return vis


def partially_kept(directive: Directive, layout: Layout, kept: np.ndarray) -> np.ndarray:
    """Kept blocks that also hold hidden tokens: rounding outward lets the kernel read them
    whole (never for the card's whole-block chunks)."""
    if directive.mode is Mode.GLOBAL or not layout.unaligned:
        return kept[:0]
    shown = set(_visible(directive, layout))
    hidden = np.zeros(int(kept[-1]) + 1 if len(kept) else 0, dtype=bool)
    for cid in range(1, layout.n_chunks + 1):
        if cid not in shown:
            r = layout.chunk_range(cid)
            hidden[r.start: min(r.stop, len(hidden))] = True
    return kept[hidden[kept]]


@functools.lru_cache(maxsize=64)
def _all_blocks(n_blocks: int) -> np.ndarray:
    # GLOBAL keeps everything: requests of one length share one (read-only) answer, so a
    # recorded step holds, sends and encodes it once instead of once per request.
    a = np.arange(n_blocks, dtype=np.int32)
    a.flags.writeable = False
    return a
