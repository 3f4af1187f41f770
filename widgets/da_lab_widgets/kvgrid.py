"""Panel (d) of the blocks diagram: the physical KV cache as a grid, one heatmap cell per block.

A heatmap, not one marker per block: plotly draws it as one image, so 2,050 blocks cost the
browser what 64 do, and each cell still hovers on its own ("physical P: owner"). A cell's
colour is an integer code through a stepped colour scale: 0 free, 1 free but still
prefix-cached, 2.. the owners (rows.OWNERS, cycled). Small caches get their ids written in the
cells; large ones leave them to the hover.
"""

from __future__ import annotations

import plotly.graph_objects as go

from da_lab.core.record import StepRecord

from .rows import CACHED, FREE, OWNERS, phys_row

GRID_PALETTE = [FREE, CACHED, *OWNERS]
GRID_LABELS = 256     # a cache this small gets its block ids written in the cells


def grid_scale() -> list:
    """A stepped colour scale: integer code k is drawn GRID_PALETTE[k] (zmin -0.5, zmax K-0.5)."""
    k = len(GRID_PALETTE)
    return [s for c, col in enumerate(GRID_PALETTE) for s in ([c / k, col], [(c + 1) / k, col])]


def add_grid(fig: go.FigureWidget, num_blocks: int, cols: int, rows: int) -> None:
    """The grid's heatmap on axes x2/y2 (row r, column c is physical block r * cols + c)."""
    labelled = num_blocks <= GRID_LABELS
    ids = [[str(r * cols + c) for c in range(cols)] for r in range(rows)] if labelled else None
    # hover from customdata, the ids in the cells from text (texttemplate reads no customdata)
    fig.add_heatmap(name="grid", z=[[None] * cols for _ in range(rows)], text=ids,
                    customdata=[[""] * cols for _ in range(rows)], xaxis="x2", yaxis="y2",
                    zmin=-0.5, zmax=len(GRID_PALETTE) - 0.5, xgap=2, ygap=2,
                    colorscale=grid_scale(), showscale=False, hoverongaps=False,
                    hovertemplate="%{customdata}<extra></extra>",
                    texttemplate="%{text}" if labelled else None,
                    textfont=dict(size=9, color="#333"))


def grid_cells(blocks: dict[int, dict], num_blocks: int, cols: int, rows: int,
               owner_code) -> tuple[list, list, list[str]]:
    """z (colour codes), the hover text of each cell, and the owners in order of appearance,
    for the KV map `blocks` ({id: {"owners", "cached"}}; an absent block is free)."""
    z = [[None] * cols for _ in range(rows)]
    what = [[""] * cols for _ in range(rows)]
    owners_now: list[str] = []
    codes: dict[str, int] = {}
    for p in range(num_blocks):
        r, c = divmod(p, cols)
        b = blocks.get(p)
        owners = b["owners"] if b else []
        cached = bool(b and b["cached"])
        if owners:
            o = owners[0]
            if o not in codes:
                codes[o] = owner_code(o)
            for x in owners:
                if x not in owners_now:
                    owners_now.append(x)
            z[r][c] = codes[o]
            what[r][c] = (f"physical {p}: {', '.join(owners)}"
                          + (" (in prefix cache)" if cached else ""))
        elif cached:
            # freed but still holding a prefix-cache hash: a later prompt can reuse it
            z[r][c], what[r][c] = 1, f"physical {p}: free, prefix-cached (reusable)"
        else:
            z[r][c], what[r][c] = 0, f"physical {p}: free"
    return z, what, owners_now


def kv_quiet(rec: StepRecord) -> bool:
    """Whether a record changes nothing in the physical KV map."""
    kv = rec.kv or {}
    return not any(kv.get(k) for k in ("assign", "free", "cached", "uncached"))


def describe_block(rec: StepRecord, p: int, req: str | None, blocks: dict[int, dict]) -> str:
    """'block P: logical L of R, physical slot P' for whichever request's staged row holds P
    this step (the diagram's own request first)."""
    reqs = sorted(rec.requests, key=lambda h: h.req != req)
    for h in reqs:
        row = phys_row(h)
        if p in row:
            return f"block {p}: logical {row.index(p)} of {h.req}, physical slot {p}"
    b = blocks.get(p)
    if b and b["owners"]:
        return f"block {p}: held by {', '.join(b['owners'])} (not scheduled this step), " \
               f"physical slot {p}"
    if b and b["cached"]:
        return f"block {p}: free, prefix-cached, physical slot {p}"
    return f"block {p}: free, physical slot {p}"
