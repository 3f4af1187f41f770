"""The grouped read (issue 59): decode rows over one physical corpus read each shared kept block
once per step, not once per row. The plan and its cost rule, pure (numpy only).

Input, one step: per row (`Row`) its kernel row (the physical blocks the kernel reads, in
logical order), the tokens it reads (the attention seq_len), its query length and whether it may
join a group (the flag: FOCUS rows only, or every DA row). A block is *shared* when two or more
eligible decode rows read it (the prefix cache holds one copy of a corpus that many requests
read); every other block is the row's *own* (its question, its reply, a chunk nobody else
keeps). A row's last block is always its own: it holds the step's query, maybe partly filled,
and is never in the prefix cache.

Groups: the shared blocks grouped by the set of rows that read them: the corpus head read by
every row is one group, a chunk that the same eight rows keep another. A group is read once, by
its rows' queries stacked (non-causal: every shared block precedes every query); each row reads
its own blocks as today (its last block causal), and the partial results merge by log-sum-exp.
Attention over a set of keys is the LSE merge of attention over any partition of it (the keys
carry their positions, RoPE is applied before they are cached), so the grouped result equals
the plain one up to rounding.

The cost rule, in bytes of one layer (`Cost`): the plain path reads every row's kernel row; the
grouped path reads each group's blocks once plus each row's own blocks, and pays per extra
partial (a row's result from one group: its query gathered, the partial written and read by the
merge) and a fixed cost per layer (the extra kernel launches, as bytes the memory could have
moved meanwhile). A group is kept only if it saves more than its partials cost; the step is
grouped only if what is left reads at most (1 - margin) of the plain bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["Row", "Group", "RowPart", "Plan", "Cost", "plan", "extend", "parts",
           "read_counts", "rows_from_steps", "step_reads", "MARGIN"]

# The grouped path must read at most 90% of the plain path's bytes, after its partials and fixed
# cost: the byte model ignores L2 hits and the merge's arithmetic, so small wins are not taken.
MARGIN = 0.10


def _ids(blocks) -> np.ndarray:
    return np.asarray(blocks, dtype=np.int64).reshape(-1)


@dataclass(frozen=True, eq=False)
class Row:
    """One batch row of the step, as the kernel reads it."""
    row: int                       # batch row
    blocks: Sequence[int]          # kernel row: physical block ids, logical order
    seq_len: int                   # tokens the kernel reads (the attention seq_len)
    query_len: int = 1             # tokens computed this step (1: a decode row)
    eligible: bool = True          # may join a group (the flag's choice of rows)


@dataclass(frozen=True, eq=False)
class Group:
    """Shared blocks read once for every row that reads them."""
    blocks: np.ndarray             # int64 physical ids, in order of first appearance
    rows: tuple[int, ...]          # batch rows that read them, ascending


@dataclass(frozen=True, eq=False)
class RowPart:
    """What one row reads on the grouped path."""
    row: int
    own: np.ndarray                # int64 physical ids it reads alone, logical order, last last
    own_tokens: int                # tokens of `own` (the last block may be partial)
    groups: tuple[int, ...]        # indices into Plan.groups, ascending
    query_len: int
    seq_len: int
    eligible: bool = True


@dataclass(frozen=True)
class Cost:
    """Bytes of one layer: a KV block (K and V), one extra partial result of one row, and the
    grouped path's fixed cost (extra launches, counted as bytes)."""
    block_bytes: float = 1.0
    partial_bytes: float = 0.0
    fixed_bytes: float = 0.0
    margin: float = MARGIN

    @classmethod
    def for_model(cls, *, block_size: int, kv_heads: int, q_heads: int, head_dim: int,
                  kv_elt: int, out_elt: int, launches: int = 0, launch_us: float = 0.0,
                  bytes_per_us: float = 0.0, margin: float = MARGIN) -> Cost:
        """A layer's costs from its shapes. A partial: the row's query gathered (read, write),
        its partial output written by the kernel and read by the merge, twice (the merge reads
        it into its slot and again to combine), and three float32 LSE values."""
        per_q = q_heads * head_dim
        return cls(block_bytes=float(2 * block_size * kv_heads * head_dim * kv_elt),
                   partial_bytes=float(per_q * (2 * out_elt + 3 * out_elt) + 3 * 4 * q_heads),
                   fixed_bytes=float(launches * launch_us * bytes_per_us), margin=margin)


@dataclass(frozen=True, eq=False)
class Plan:
    block_size: int
    rows: tuple[RowPart, ...]      # every input row, in input order
    groups: tuple[Group, ...]
    plain_blocks: int              # blocks the plain path reads (every kernel row)
    grouped_blocks: int            # blocks the grouped path reads (groups once + own parts)
    union_blocks: int              # distinct physical blocks read: the floor of either path
    partials: int                  # extra partial results the merge combines
    plain_bytes: float
    grouped_bytes: float
    grouped: bool                  # the cost rule's choice
    reason: str
    kernel: tuple[np.ndarray, ...] = ()   # the input kernel rows (extend() compares them)
    ids: np.ndarray | None = None         # every physical block read, sorted, once
    last_shared: bool = False             # some row's last block is read by another row too

    def part(self, row: int) -> RowPart:
        for p in self.rows:
            if p.row == row:
                return p
        raise KeyError(f"batch row {row} is not in the plan")

    def to_json(self) -> dict:
        """The plan's accounting (what a step record or a bench row keeps)."""
        return {"grouped": self.grouped, "reason": self.reason, "rows": len(self.rows),
                "grouped_rows": sum(bool(p.groups) for p in self.rows),
                "groups": len(self.groups), "plain_blocks": self.plain_blocks,
                "grouped_blocks": self.grouped_blocks, "union_blocks": self.union_blocks,
                "partials": self.partials}


class _Index:
    """Every (row, block) entry of the step, sorted once: the distinct blocks (`ub`), each
    entry's block (`inv`) and row (`owner`), whether it is its row's last block, each block's
    first entry and count."""

    def __init__(self, blocks: list[np.ndarray]) -> None:
        lens = np.array([len(b) for b in blocks])
        self.cat = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        self.owner = np.repeat(np.arange(len(blocks)), lens)
        self.last = np.zeros(len(self.cat), dtype=bool)
        self.last[np.cumsum(lens)[lens > 0] - 1] = True
        self.ub, self.first, self.inv, self.counts = np.unique(
            self.cat, return_index=True, return_inverse=True, return_counts=True)
        self.inv = self.inv.reshape(-1)


def _check(rows: Sequence[Row], blocks: list[np.ndarray], ix: _Index, block_size: int) -> None:
    if len({r.row for r in rows}) != len(rows):
        raise ValueError("a batch row is given twice")
    for r, b in zip(rows, blocks, strict=True):
        n = len(b)
        if n == 0:
            raise ValueError(f"batch row {r.row}: a kernel row must not be empty")
        if not (n - 1) * block_size < r.seq_len <= n * block_size:
            raise ValueError(f"batch row {r.row}: {r.seq_len} tokens don't fill {n} blocks "
                             f"of {block_size} (all but the last full)")
        if r.query_len < 1:
            raise ValueError(f"batch row {r.row}: query_len {r.query_len} < 1")
    key = ix.inv * max(1, len(rows)) + ix.owner            # (block, row): each at most once
    dup = (np.bincount(key).max(initial=0) > 1 if len(ix.ub) * len(rows) <= 1 << 24
           else len(np.unique(key)) != len(key))
    if dup:
        row = rows[int(ix.owner[np.flatnonzero(np.bincount(key)[key] > 1)[0]])].row
        raise ValueError(f"batch row {row}: a kernel row must name each physical block once")


def _groups(rows: Sequence[Row], ix: _Index) -> list[Group]:
    """The shared blocks by reader set (a bit matrix of blocks x decode rows, its distinct
    rows), ordered by first appearance (row order, then logical order)."""
    dec = np.array([r.eligible and r.query_len == 1 for r in rows], dtype=bool)
    if dec.sum() < 2:
        return []
    col = np.cumsum(dec) - 1                       # a decode row's column in the bit matrix
    entry = dec[ix.owner] & ~ix.last
    is_last = np.zeros(len(ix.ub), dtype=bool)     # a last block is never grouped, for anyone
    is_last[ix.inv[ix.last]] = True
    readers = np.bincount(ix.inv[entry], minlength=len(ix.ub))
    shared = (readers >= 2) & ~is_last
    if not shared.any():
        return []
    at = np.full(len(ix.ub), -1)
    at[shared] = np.arange(int(shared.sum()))
    keep = entry & shared[ix.inv]
    member = np.zeros((int(shared.sum()), int(dec.sum())), dtype=bool)
    member[at[ix.inv[keep]], col[ix.owner[keep]]] = True
    sigs, which = np.unique(np.packbits(member, axis=1), axis=0, return_inverse=True)
    which = which.reshape(-1)
    sb, sfirst = ix.ub[shared], ix.first[shared]
    dec_rows = [r.row for r, d in zip(rows, dec, strict=True) if d]
    out = []
    for g in range(len(sigs)):
        idx = np.flatnonzero(which == g)
        idx = idx[np.argsort(sfirst[idx], kind="stable")]
        who = tuple(sorted(dec_rows[c] for c in np.flatnonzero(member[idx[0]])))
        out.append((int(sfirst[idx[0]]), Group(sb[idx], who)))
    return [g for _, g in sorted(out, key=lambda x: x[0])]


def plan(rows: Iterable[Row], block_size: int, cost: Cost = Cost()) -> Plan:
    """The grouped read of one step and the cost rule's choice (module docstring)."""
    rows = list(rows)
    blocks = [_ids(r.blocks) for r in rows]
    ix = _Index(blocks)
    _check(rows, blocks, ix, block_size)
    groups = [g for g in _groups(rows, ix)
              # kept if reading it once saves more than its rows' extra partials cost
              if (len(g.rows) - 1) * len(g.blocks) * cost.block_bytes
              > len(g.rows) * cost.partial_bytes]
    if groups:
        gb = np.concatenate([g.blocks for g in groups])
        gid = np.repeat(np.arange(len(groups)), [len(g.blocks) for g in groups])
        order = np.argsort(gb)
        gb, gid = gb[order], gid[order]
    parts_ = []
    for r, b in zip(rows, blocks, strict=True):
        hit = np.zeros(len(b), dtype=bool)
        gis: tuple[int, ...] = ()
        # A group's rows are every eligible decode row that reads its blocks: such a row reads
        # a grouped block only through its group; any other row reads everything itself.
        if groups and r.eligible and r.query_len == 1:
            i = np.minimum(np.searchsorted(gb, b), len(gb) - 1)
            hit = gb[i] == b
            gis = tuple(np.unique(gid[i][hit]).tolist())
        parts_.append(RowPart(r.row, b[~hit], r.seq_len - int(hit.sum()) * block_size, gis,
                              r.query_len, r.seq_len, r.eligible))
    last_shared = bool((ix.counts[ix.inv[ix.last]] >= 2).any())
    return _decided(block_size, tuple(parts_), tuple(groups), blocks, ix.ub, last_shared, cost)


def _decided(block_size: int, parts_: tuple[RowPart, ...], groups: tuple[Group, ...],
             blocks: list[np.ndarray], ids: np.ndarray, last_shared: bool, cost: Cost) -> Plan:
    """The plan's byte account and the cost rule's choice."""
    partials = sum(len(p.groups) for p in parts_)
    plain_blocks = sum(len(b) for b in blocks)
    grouped_blocks = sum(len(p.own) for p in parts_) + sum(len(g.blocks) for g in groups)
    plain_bytes = plain_blocks * cost.block_bytes
    grouped_bytes = (grouped_blocks * cost.block_bytes + partials * cost.partial_bytes
                     + (cost.fixed_bytes if groups else 0.0))
    if not groups:
        ok, why = False, "no block is read by two or more eligible decode rows worth grouping"
    elif grouped_bytes <= (1.0 - cost.margin) * plain_bytes:
        ok, why = True, (f"grouped reads {grouped_bytes / plain_bytes:.3f} of the plain bytes "
                         f"(rule: <= {1.0 - cost.margin:.2f})")
    else:
        ok, why = False, (f"grouped would read {grouped_bytes / plain_bytes:.3f} of the plain "
                          f"bytes (rule: <= {1.0 - cost.margin:.2f})")
    return Plan(block_size, parts_, groups, plain_blocks, grouped_blocks, len(ids), partials,
                plain_bytes, grouped_bytes, ok, why, tuple(blocks), ids, last_shared)


def extend(p: Plan, rows: Iterable[Row], cost: Cost = Cost()) -> Plan | None:
    """`p` carried to the next step when nothing but the rows' tails changed: the same batch
    rows (query lengths, eligibility), each kernel row the old one plus blocks appended at its
    end (decode writes into fresh blocks of its own, so they join the row's own part and no
    group changes); tokens and bytes recounted, the rule asked again. None when anything else
    changed (a row came, left, or its kept blocks changed): then plan() from scratch. Cheap:
    one array comparison per row instead of the plan's sort over every block of the step."""
    rows = list(rows)
    if len(rows) != len(p.rows) or p.last_shared or p.ids is None:
        return None
    blocks, parts_, tails = [], [], []
    for r, old, part in zip(rows, p.kernel, p.rows, strict=True):
        b = _ids(r.blocks)
        n = len(old)
        if (r.row != part.row or r.query_len != part.query_len or r.eligible != part.eligible
                or len(b) < n or not np.array_equal(b[:n], old)
                or not (len(b) - 1) * p.block_size < r.seq_len <= len(b) * p.block_size):
            return None
        grouped_n = n - len(part.own)
        parts_.append(replace(part, own=np.concatenate([part.own, b[n:]]), seq_len=r.seq_len,
                              own_tokens=r.seq_len - grouped_n * p.block_size))
        blocks.append(b)
        tails.append(b[n:])
    new = np.concatenate(tails)
    # the appended blocks must be fresh: each read by its row alone
    if len(np.unique(new)) != len(new) or np.isin(new, p.ids).any():
        return None
    return _decided(p.block_size, tuple(parts_), p.groups, blocks, np.union1d(p.ids, new),
                    False, cost)


def parts(p: Plan, row: Row) -> list[tuple[int, int | None]]:
    """`row`'s blocks as the grouped path reads them, back in the row's logical order:
    (physical id, group index or None for its own part). Each block of the kernel row appears
    exactly once."""
    part = p.part(row.row)
    src: dict[int, int | None] = {int(b): None for b in part.own}
    mine = set(_ids(row.blocks).tolist())
    for gi in part.groups:
        for b in p.groups[gi].blocks.tolist():
            if b in mine:
                if b in src:
                    raise ValueError(f"block {b} of row {row.row} is read twice")
                src[b] = gi
    pos = {b: i for i, b in enumerate(_ids(row.blocks).tolist())}
    return sorted(src.items(), key=lambda kv: pos.get(kv[0], len(pos)))


def read_counts(p: Plan, rows: Sequence[Row]) -> tuple[dict[int, int], dict[int, int]]:
    """How many times each physical block is read in the step: (plain path, grouped path as
    planned). On the plain path a block kept by k rows is read k times; grouped, once per group
    it is in plus once per own part that holds it."""
    def count(arrays) -> dict[int, int]:
        if not arrays:
            return {}
        ids, n = np.unique(np.concatenate(arrays), return_counts=True)
        return dict(zip(ids.tolist(), n.tolist(), strict=True))

    return (count([_ids(r.blocks) for r in rows]),
            count([g.blocks for g in p.groups] + [part.own for part in p.rows]))


def rows_from_steps(requests, rows_of: str = "focus") -> list[Row]:
    """Rows from a step record's `RequestStep`s (those with a row the kernel read): `rows_of`
    'focus' makes masked rows eligible, 'all' every DA row."""
    out = []
    for r in requests:
        row = getattr(r, "read_row", None)
        if not r.hooked or row is None or len(row) == 0:
            continue
        seq = r.built_seq_len if r.built_seq_len is not None else r.attn_seq_len
        masked = r.kept_logical is not None
        out.append(Row(int(r.row), _ids(row)[: -(-seq // r.block_size)], int(seq),
                       int(r.query_len), rows_of == "all" or masked))
    return out


def step_reads(requests, rows_of: str = "focus", cost: Cost = Cost()) -> dict:
    """Per step, from its record (lesson 04's readers beat, diagram 2's panel): how many times
    each physical block is read on the plain path and on the grouped path, and whether the cost
    rule would group this step. Derived from the kernel rows, never stored."""
    rows = rows_from_steps(requests, rows_of)
    if not rows:
        return {"blocks": [], "reads_plain": [], "reads_grouped": [], "grouped": False,
                "plain_blocks": 0, "grouped_blocks": 0, "union_blocks": 0, "groups": []}
    bs = next(int(r.block_size) for r in requests if getattr(r, "block_size", None))
    p = plan(rows, bs, cost)
    plain, grouped = read_counts(p, rows)
    blocks = sorted(plain)
    return {"blocks": blocks, "reads_plain": [plain[b] for b in blocks],
            "reads_grouped": [grouped[b] for b in blocks], "grouped": p.grouped,
            "plain_blocks": p.plain_blocks, "grouped_blocks": p.grouped_blocks,
            "union_blocks": p.union_blocks,
            "groups": [{"blocks": g.blocks.tolist(), "rows": list(g.rows)} for g in p.groups]}
