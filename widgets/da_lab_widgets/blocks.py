"""Diagram 2 — blocks, the block table and the physical KV cache (drawn by static/blocks.js).

One request's view of paged attention, one engine step at a time: its logical blocks coloured
by DA region, the staged block-table row (BlockTable.append_row: logical -> physical), the
committed row commit() copies it to, the kernel row as the attention builder read it (kept
blocks first, the hidden ones greyed), and the physical KV cache coloured by owner. Every
number is read from the step in the page, decoded from the StepRecord (packets.py); hovering
a block pulses its physical block in every diagram of the page. With `batch=True` a panel (e)
adds every request of the step, one row each, and marks the physical blocks that stand in more
than one row (prefix caching shares a prompt's full blocks between requests: static/batch.js).
"""

from __future__ import annotations


class BlocksDiagram:
    kind = 2
    name = "blocks"

    def __init__(self, header: dict, highlight=None, req: str | None = None,
                 batch: bool = False) -> None:
        prov = header.get("provenance") or {}
        self.block_size = int(prov["block_size"])
        self.num_blocks = int(prov["num_blocks"])
        self.highlight = highlight
        self.req = req            # None: the run's first request
        self.batch = batch        # panel (e): every request of the step, shared blocks marked

    def config(self, header: dict, records: list) -> dict:
        return {"kind": self.kind, "req": self.req, "batch": self.batch}
