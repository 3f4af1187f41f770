"""The DA mask in training, as the hook applies it: the hook's mask history for a response's
tags, and the same mask built densely on the device from a compact form (see train.py)."""

from __future__ import annotations

import numpy as np

from da_lab.core.layout import Layout
from da_lab.core.mask import kept_blocks
from da_lab.core.tags import Directive, Mode


def hook_history(layout: Layout, tags, n_tokens: int,
                 ) -> list[tuple[int, int, np.ndarray | None]]:
    """The mask history the hook records for a request that writes a response whose tags are
    `tags` ((output index of the token closing the tag, Directive), ...), for the first
    `n_tokens` positions of prompt + response.

    Entries are (first query position, seq_len, kept logical blocks or None = all), exactly as
    `hook.request.RequestState.mask_history`: the prefill is one entry under GLOBAL; then the
    step whose query is output k (position prompt_len + k) decides with the last tag closed in
    outputs[0..k] (the hook feeds a step's own input token to the tag machine before deciding).
    """
    P, bs = layout.prompt_len, layout.block_size
    hist: list[tuple[int, int, np.ndarray | None]] = [(0, P, None)]
    timeline = sorted(tags, key=lambda t: t[0])
    d, nxt = Directive(), 0
    for p in range(P, n_tokens):
        while nxt < len(timeline) and timeline[nxt][0] <= p - P:
            d = timeline[nxt][1]
            nxt += 1
        kept = kept_blocks(d, layout, p + 1, 1)
        hist.append((p, p + 1, kept if len(kept) < -(-(p + 1) // bs) else None))
    return hist


def segments(layout: Layout, tags, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The same mask in compact form: (row_seg, seg_visible). Row p may read column c iff
    c <= p and seg_visible[row_seg[p], c // block_size]; segment 0 sees every block.

    One segment per stretch of rows under one directive: FOCUS and LOCAL keep one set of
    blocks (scaffold, chunks named, tail, the whole response) whose cut at a row's own block is
    exactly what `kept_blocks` keeps for that row, so a segment's visible blocks are those kept
    at its last row. Tests compare the dense matrix with `oracle.mask_matrix(hook_history)`."""
    P, bs = layout.prompt_len, layout.block_size
    nb = -(-n_tokens // bs)
    blocks = np.arange(nb)
    row_seg = np.zeros(n_tokens, dtype=np.int64)
    vis = [np.ones(nb, dtype=bool)]
    timeline = sorted(tags, key=lambda t: t[0])
    for i, (close, d) in enumerate(timeline):
        start = P + close
        stop = min(n_tokens, P + timeline[i + 1][0]) if i + 1 < len(timeline) else n_tokens
        if start >= stop:
            continue
        if d.mode is Mode.LOCAL and d.recent is not None:
            raise ValueError("<local N> keeps a sliding window: not one set per segment")
        kept = kept_blocks(d, layout, stop, 1)
        v = np.isin(blocks, kept) | (blocks > (stop - 1) // bs)
        if v.all():
            continue                       # GLOBAL (or nothing hidden): segment 0
        vis.append(v)
        row_seg[start:stop] = len(vis) - 1
    return row_seg, np.stack(vis)


def dense_mask(row_seg, seg_visible, length: int, block_size: int, device=None):
    """(B, 1, L, L) bool 'row may attend to column' from compact masks: row_seg (B, L) ints,
    seg_visible (B, S, n_blocks) bools with n_blocks >= ceil(L / block_size)."""
    import torch

    row_seg = torch.as_tensor(row_seg, device=device)[:, :length]
    seg_visible = torch.as_tensor(seg_visible, device=device)
    B = row_seg.shape[0]
    pos = torch.arange(length, device=device)
    causal = pos[None, :] <= pos[:, None]
    blk = pos // block_size
    vis_rows = seg_visible[torch.arange(B, device=device)[:, None], row_seg]   # (B, L, nb)
    allow = causal[None] & vis_rows[:, :, blk]
    return allow[:, None]


def layer_masks(config, allow):
    """What a model's attention reads under the DA mask `allow` ((B, 1, L, L) bool): a plain
    model (one attention kind) gets `allow` itself; a hybrid model (config.layer_types with
    sliding-window layers beside global ones: Gemma 3) gets one mask per layer type, as its
    transformers model takes them: the global ("full_attention") layers read `allow`, the
    sliding-window layers their own causal window of `config.sliding_window` tokens (the
    query's own included, as transformers and vLLM count it) and nothing else hidden. That is
    what the hook does in the engine: it masks the global layers' KV-cache group only and leaves
    the sliding-window groups as vLLM keeps them (issue 55). Eager attention adds its mask to
    the scores, so it gets 0 / a large negative number instead of booleans."""
    import torch

    types = set(getattr(config, "layer_types", None) or ())
    eager = getattr(config, "_attn_implementation", None) == "eager"

    def fit(m):
        if not eager:
            return m
        return torch.zeros(m.shape, device=m.device).masked_fill(~m, torch.finfo(
            torch.float32).min)

    if "sliding_attention" not in types:
        return fit(allow)
    if types - {"sliding_attention", "full_attention"}:
        raise ValueError(f"layer types {sorted(types)}: the DA mask knows full and sliding "
                         "attention only")
    B, L = allow.shape[0], allow.shape[-1]
    pos = torch.arange(L, device=allow.device)
    diff = pos[:, None] - pos[None, :]
    window = (diff >= 0) & (diff < int(config.sliding_window))
    return {"full_attention": fit(allow),
            "sliding_attention": fit(window[None, None].expand(B, 1, L, L))}
