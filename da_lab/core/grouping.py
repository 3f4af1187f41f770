"""The grouped read (issue 59): decode rows over one physical corpus read each shared kept block
once per step, not once per row. The plan and its cost rule, pure (the standard library only).

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
from dataclasses import dataclass

__all__ = ["Row", "Group", "RowPart", "Plan", "Cost", "plan", "parts", "read_counts",
           "rows_from_steps", "step_reads", "MARGIN"]

# The grouped path must read at most 90% of the plain path's bytes, after its partials and fixed
# cost: the byte model ignores L2 hits and the merge's arithmetic, so small wins are not taken.
MARGIN = 0.10


@dataclass(frozen=True)
class Row:
    """One batch row of the step, as the kernel reads it."""
    row: int                       # batch row
    blocks: tuple[int, ...]        # kernel row: physical block ids, logical order
    seq_len: int                   # tokens the kernel reads (the attention seq_len)
    query_len: int = 1             # tokens computed this step (1: a decode row)
    eligible: bool = True          # may join a group (the flag's choice of rows)


@dataclass(frozen=True)
class Group:
    """Shared blocks read once for every row that reads them."""
    blocks: tuple[int, ...]        # physical ids, in the first reader's logical order
    rows: tuple[int, ...]          # batch rows that read them, ascending


@dataclass(frozen=True)
class RowPart:
    """What one row reads on the grouped path."""
    row: int
    own: tuple[int, ...]           # physical ids it reads alone, logical order, last block last
    own_tokens: int                # tokens of `own` (the last block may be partial)
    groups: tuple[int, ...]        # indices into Plan.groups, ascending
    query_len: int
    seq_len: int


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


@dataclass(frozen=True)
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


def _check(rows: Sequence[Row], block_size: int) -> None:
    seen = set()
    for r in rows:
        if r.row in seen:
            raise ValueError(f"batch row {r.row} is given twice")
        seen.add(r.row)
        n = len(r.blocks)
        if n == 0 or len(set(r.blocks)) != n:
            raise ValueError(f"batch row {r.row}: a kernel row must be non-empty and name "
                             f"each physical block once, got {list(r.blocks)}")
        if not (n - 1) * block_size < r.seq_len <= n * block_size:
            raise ValueError(f"batch row {r.row}: {r.seq_len} tokens don't fill {n} blocks "
                             f"of {block_size} (all but the last full)")
        if r.query_len < 1:
            raise ValueError(f"batch row {r.row}: query_len {r.query_len} < 1")


def _groups(rows: Sequence[Row]) -> list[Group]:
    """The shared blocks by reader set, in order of first appearance."""
    decode = [r for r in rows if r.eligible and r.query_len == 1]
    last = {r.blocks[-1] for r in rows}          # a last block is never grouped, for anyone
    readers: dict[int, list[int]] = {}
    for r in decode:
        for b in r.blocks[:-1]:
            readers.setdefault(b, []).append(r.row)
    by_set: dict[tuple[int, ...], dict[int, None]] = {}
    for r in decode:
        for b in r.blocks[:-1]:
            if len(readers[b]) >= 2 and b not in last:
                by_set.setdefault(tuple(sorted(readers[b])), {})[b] = None
    return [Group(tuple(bs), who) for who, bs in by_set.items()]


def plan(rows: Iterable[Row], block_size: int, cost: Cost = Cost()) -> Plan:
    """The grouped read of one step and the cost rule's choice (module docstring)."""
    rows = list(rows)
    _check(rows, block_size)
    groups = [g for g in _groups(rows)
              # kept if reading it once saves more than its rows' extra partials cost
              if (len(g.rows) - 1) * len(g.blocks) * cost.block_bytes
              > len(g.rows) * cost.partial_bytes]
    of_block = {b: gi for gi, g in enumerate(groups) for b in g.blocks}
    parts_, own_total, partials = [], 0, 0
    for r in rows:
        mine = {b: of_block[b] for b in r.blocks
                if b in of_block and r.row in groups[of_block[b]].rows}
        gis = sorted(set(mine.values()))
        own = tuple(b for b in r.blocks if b not in mine)
        grouped_n = len(r.blocks) - len(own)
        parts_.append(RowPart(r.row, own, r.seq_len - grouped_n * block_size, tuple(gis),
                              r.query_len, r.seq_len))
        own_total += len(own)
        partials += len(gis)
    plain_blocks = sum(len(r.blocks) for r in rows)
    grouped_blocks = own_total + sum(len(g.blocks) for g in groups)
    union = len({b for r in rows for b in r.blocks})
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
    return Plan(block_size, tuple(parts_), tuple(groups), plain_blocks, grouped_blocks, union,
                partials, plain_bytes, grouped_bytes, ok, why)


def parts(p: Plan, row: Row) -> list[tuple[int, int | None]]:
    """`row`'s blocks as the grouped path reads them, back in the row's logical order:
    (physical id, group index or None for its own part). Each block of the kernel row appears
    exactly once."""
    part = p.part(row.row)
    src: dict[int, int | None] = {b: None for b in part.own}
    for gi in part.groups:
        for b in p.groups[gi].blocks:
            if b in row.blocks:
                if b in src:
                    raise ValueError(f"block {b} of row {row.row} is read twice")
                src[b] = gi
    pos = {b: i for i, b in enumerate(row.blocks)}
    return sorted(src.items(), key=lambda kv: pos.get(kv[0], len(pos)))


def read_counts(p: Plan, rows: Sequence[Row]) -> tuple[dict[int, int], dict[int, int]]:
    """How many times each physical block is read in the step: (plain path, grouped path as
    planned). On the plain path a block kept by k rows is read k times; grouped, once per group
    it is in plus once per own part that holds it."""
    plain: dict[int, int] = {}
    for r in rows:
        for b in r.blocks:
            plain[b] = plain.get(b, 0) + 1
    grouped: dict[int, int] = {}
    for g in p.groups:
        for b in g.blocks:
            grouped[b] = grouped.get(b, 0) + 1
    for part in p.rows:
        for b in part.own:
            grouped[b] = grouped.get(b, 0) + 1
    return plain, grouped


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
        out.append(Row(int(r.row), tuple(int(b) for b in row[: -(-seq // r.block_size)]),
                       int(seq), int(r.query_len), rows_of == "all" or masked))
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
            "groups": [{"blocks": list(g.blocks), "rows": list(g.rows)} for g in p.groups]}
