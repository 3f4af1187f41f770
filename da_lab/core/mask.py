"""The DA decision: which logical blocks the attention kernel reads. A pure function.

    GLOBAL       everything
    FOCUS Cs     scaffold head (sink) + the named chunks + tail + response (a chunk in
                 `layout.hidden` is never kept: the eval's hidden-chunk ablation)
    LOCAL        scaffold head + tail + response
    LOCAL N      scaffold head + tail + the N most recent response blocks
    always       the blocks holding this step's own query tokens

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
    keep[: layout.head_blocks] = True
    prompt_blocks = -(-layout.prompt_len // bs)
    keep[layout.tail_start: prompt_blocks] = True
    if directive.mode is Mode.FOCUS:
        for cid in directive.chunks:
            if cid <= layout.n_chunks and cid not in layout.hidden:
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


@functools.lru_cache(maxsize=64)
def _all_blocks(n_blocks: int) -> np.ndarray:
    # GLOBAL keeps everything: requests of one length share one (read-only) answer, so a
    # recorded step holds, sends and encodes it once instead of once per request.
    a = np.arange(n_blocks, dtype=np.int32)
    a.flags.writeable = False
    return a
