"""The paper's metric (Ho et al. 2026): decoding attention cost = KV positions attention read
during decode / the positions full attention would have read. Pure.

Here "read" is what the kernel read: seq_len less the hidden blocks, so a block kept because
one of its tokens is visible counts whole (the paper's rounding outward); prefill steps, which
every mode computes in full, are not decode and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable


def decode_positions(history: Iterable[tuple[int, int, object]], block_size: int,
                     prompt_len: int) -> tuple[int, int]:
    """(positions read, positions in full) over the decode steps of a mask history: entries
    (first query position, seq_len, kept logical blocks or None = all), as the hook keeps them.
    A decode step is one whose queries all lie past the prompt."""
    read = full = 0
    for q0, seq_len, kept in history:
        if q0 < prompt_len:
            continue
        full += seq_len
        read += seq_len if kept is None else seq_len - (-(-seq_len // block_size)
                                                        - len(kept)) * block_size
    return read, full


def request_cost(state) -> float | None:
    """One request's cost from its hook state (`mask_history`, `layout`)."""
    lay = state.layout
    return cost(*decode_positions(state.mask_history, lay.block_size, lay.prompt_len))


def step_positions(steps) -> tuple[int, int]:
    """(positions read, positions in full) over recorded RequestSteps: the decode steps (one
    query token) of one request, or of many."""
    read = full = 0
    for r in steps:
        if r.query_len == 1 and r.seq_len is not None:
            read, full = read + r.attn_seq_len, full + r.seq_len
    return read, full


def cost(read: int, full: int) -> float | None:
    """read / full, rounded for reports; None when nothing was decoded."""
    return round(read / full, 4) if full else None


def mean_cost(pairs: Iterable[tuple[int, int]]) -> float | None:
    """The summary of many prompts: total positions read over total in full (the paper's
    aggregate), not a mean of ratios, so long answers weigh as much as they cost."""
    read = full = 0
    for r, f in pairs:
        read, full = read + r, full + f
    return cost(read, full)
