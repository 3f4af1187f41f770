"""A hybrid model's other KV-cache groups, as one step's record shows them.

A model with sliding-window or recurrent-state layers beside its global ones has one block-table
row per KV-cache group (vLLM gives each kind of layer its own group). DA edits the global
groups' rows only; a `GroupRow` is the staged row of one of the others, which the kernel reads
as vLLM built it: a sliding window reads the blocks that hold its last `window` tokens (vLLM
may leave stale ids before them, never read), a state group its state blocks. Diagram 2 draws
them beside the global row, so a learner sees the window move while the global row shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from da_lab.core.fields import RecordError, array_field, int_field, typed_field, where

ROW_DTYPE = np.int32


@dataclass(frozen=True, eq=False)
class GroupRow:
    group: int                      # vLLM's KV-cache group index
    kind: str                       # versions/kv_specs.py: sliding, chunked, state
    block_size: int                 # tokens per block of this group (0: no token blocks)
    row: np.ndarray                 # int32 physical ids, logical order (the staged row)
    window: int | None = None       # a sliding window's tokens

    def read_blocks(self, seq_len: int) -> np.ndarray:
        """The logical blocks of `row` the kernel reads for a context of `seq_len` tokens: all
        of them, or for a sliding window those holding its last `window` tokens."""
        n = len(self.row) if not self.block_size else min(len(self.row),
                                                           -(-seq_len // self.block_size))
        if self.window is None or not self.block_size:
            return np.arange(n)
        first = max(0, seq_len - self.window) // self.block_size
        return np.arange(first, n)

    def to_json(self, arrays: bool = False) -> dict:
        d = {"group": self.group, "kind": self.kind, "block_size": self.block_size,
             "row": self.row if arrays else self.row.tolist()}
        if self.window is not None:
            d["window"] = self.window
        return d

    @classmethod
    def from_json(cls, d: Any, step: Any, ctx: str) -> GroupRow:
        if not isinstance(d, dict):
            raise RecordError(f"{where(step, ctx)} is {type(d).__name__}, not an object")
        row = array_field(d, "row", ROW_DTYPE, step, ctx + ".")
        if row is None:
            raise RecordError(f"{where(step, ctx + '.row')} is missing")
        return cls(int_field(d, "group", step, ctx + "."),
                   typed_field(d, "kind", (str,), step, ctx + "."),
                   int_field(d, "block_size", step, ctx + "."), row,
                   int_field(d, "window", step, ctx + ".", None))

    def __eq__(self, other) -> bool:
        return isinstance(other, GroupRow) and (self.group, self.kind, self.block_size,
                                                self.window) == (other.group, other.kind,
                                                                 other.block_size, other.window) \
            and np.array_equal(self.row, other.row)
