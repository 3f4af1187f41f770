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
        keep |= _covered(layout, _visible(directive, layout), n_blocks)
        keep[layout.response_start:] = True
    elif directive.recent is None:
        keep[layout.response_start:] = True
    else:
        keep[max(layout.response_start, n_blocks - directive.recent):] = True
    # The step's own queries must see themselves and each other: their blocks stay.
    keep[max(0, seq_len - query_len) // bs:] = True
    return np.flatnonzero(keep).astype(np.int32)


def _visible(directive: Directive, layout: Layout) -> np.ndarray:
    """The chunks a directive shows, as sorted unique 1-based ids (FOCUS: the named ones the
    layout has and does not hide). Work linear in the chunks named: a set for `hidden`."""
    if directive.mode is Mode.GLOBAL:
        return np.arange(1, layout.n_chunks + 1)
    if directive.mode is Mode.LOCAL:
        return np.zeros(0, dtype=np.int64)
    hidden, n = layout.hidden_set, layout.n_chunks
    return np.unique(np.fromiter((c for c in directive.chunks if 1 <= c <= n and c not in hidden),
                                 dtype=np.int64))


def _shown_mask(directive: Directive, layout: Layout) -> np.ndarray:
    """Bool per chunk (index cid - 1): shown by the directive."""
    shown = np.zeros(layout.n_chunks, dtype=bool)
    shown[_visible(directive, layout) - 1] = True
    return shown


def _cover(starts: np.ndarray, stops: np.ndarray, n: int) -> np.ndarray:
    """Bool[n]: True inside any [start, stop), at once for every interval (a difference
    array: no Python loop over the chunks)."""
    starts, stops = np.minimum(starts, n), np.minimum(stops, n)
    delta = np.bincount(starts, minlength=n + 1) - np.bincount(stops, minlength=n + 1)
    return np.cumsum(delta[:n]) > 0


def _covered(layout: Layout, cids: np.ndarray, n_blocks: int) -> np.ndarray:
    """Bool[n_blocks]: the blocks holding any token of chunks `cids` (rounded outward)."""
    if not len(cids):
        return np.zeros(n_blocks, dtype=bool)
    starts, stops = layout.chunk_bounds
    return _cover(starts[cids - 1], stops[cids - 1], n_blocks)


def visible_tokens(directive: Directive, layout: Layout, seq_len: int) -> np.ndarray:
    """The paper's token mask before rounding: True where a token may be attended (everything
    but the hidden chunks' tokens; LOCAL N also hides response blocks, as whole blocks)."""
    spans = np.asarray(layout.chunk_spans, dtype=np.int64).reshape(-1, 2)
    off = ~_shown_mask(directive, layout)
    vis = ~_cover(spans[off, 0], spans[off, 1], seq_len)
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
    off = np.flatnonzero(~_shown_mask(directive, layout)) + 1
    hidden = _covered(layout, off, int(kept[-1]) + 1 if len(kept) else 0)
    return kept[hidden[kept]]


@functools.lru_cache(maxsize=64)
def _all_blocks(n_blocks: int) -> np.ndarray:
    # GLOBAL keeps everything: requests of one length share one (read-only) answer, so a
    # recorded step holds, sends and encodes it once instead of once per request.
    a = np.arange(n_blocks, dtype=np.int32)
    a.flags.writeable = False
    return a
