"""Rows of blocks drawn as RUNS, so a 2,000-block row costs the browser a few bars, not
thousands of SVG markers.

A run is a maximal stretch of consecutive slots that look the same (same fill) and whose
physical ids (and, in the kernel's row, logical ids) count up by one, so every block of a run is
still known from the run alone. Each run is one bar of a bar trace per row; its label (the id
range, or the region) is one point of a text trace. Runs change only when the row does (a mode
switch, a new block), so a decode step redraws none of them. Where a row's blocks are wide
enough to label one by one (short rows), the slot itself is part of the key: every block is its
own run, drawn as before.

Hover stays per block: over each row lies a transparent one-row heatmap (one cell per slot,
`zsmooth="fast"`: plotly draws it as an image one pixel per cell, whatever the row's length)
whose hover template names the block and its physical slot. Its data changes only when the
row's blocks do, not every step.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

LABEL_PX = 13          # a block this wide (pixels) or wider gets its own label, hence own run
CHAR_PX = 6.2          # width of one label character at font size 10
MIN_PX = 3             # a run is drawn at least this wide
CLEAR = "rgba(0,0,0,0)"


@dataclass(frozen=True)
class Run:
    start: int          # first slot
    stop: int           # one past the last slot
    fill: str
    ink: str            # label colour
    label: str          # what the run would say if it fits ("" for nothing)


def spans(keys: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Maximal [start, stop) ranges of equal consecutive keys."""
    out, s = [], 0
    for j in range(1, len(keys) + 1):
        if j == len(keys) or keys[j] != keys[s]:
            out.append((s, j))
            s = j
    return out


def id_range(a: int | None, b: int | None) -> str:
    if a is None:
        return ""
    return str(a) if a == b else f"{a}–{b}"


def fits(run: Run, cell_px: float) -> bool:
    return (run.stop - run.start) * cell_px >= len(run.label) * CHAR_PX + 4


def bar_layer(name: str) -> dict:
    """Arguments of `fig.add_bar` for a row's runs (one bar per run; barmode "overlay")."""
    return dict(name=name, x=[], y=[], base=[], width=[], hoverinfo="skip",
                marker=dict(color=[], line=dict(color=[], width=[])))


def run_bars(runs: list[Run], y: float, half: float, cell_px: float, *,
             line: str = "white") -> dict:
    """A bar trace's data: one bar per run on row y (height 2 * half), spanning exactly its
    blocks. A run narrower than MIN_PX (one block of a 2,000-block row is a third of a pixel)
    gets an outline of its own colour MIN_PX wide, so it can still be seen.

    Bars, not layout shapes: plotly's widget sends the page's full defaults of every shape back
    to the kernel after each update (~300 bytes a shape), and runs change rarely anyway."""
    thin = [(r.stop - r.start) * cell_px < MIN_PX for r in runs]
    return {"x": [(r.start + r.stop - 1) / 2 for r in runs],
            "width": [r.stop - r.start for r in runs],
            "base": [round(y - half, 3)] * len(runs), "y": [round(2 * half, 3)] * len(runs),
            "marker.color": [r.fill for r in runs],
            "marker.line.color": [r.fill if t else line for r, t in zip(runs, thin,
                                                                         strict=True)],
            "marker.line.width": [MIN_PX if t else 1 for t in thin]}


def mark_runs(marks: Sequence[str | None], y: float, half: float, name: str, *,
              xref: str = "x", yref: str = "y") -> list[dict]:
    """Outlines (no fill) around the marked slots of row y, one per run of equal marks (a
    prefill appends hundreds of blocks at once: one outline around all of them)."""
    return [mark_shape((s + e - 1) / 2, y, (e - s) / 2, half, marks[s], name,
                       xref=xref, yref=yref)
            for s, e in spans(marks) if marks[s] is not None]


def mark_shape(x: float, y: float, half_w: float, half_h: float, color: str, name: str, *,
               xref: str = "x", yref: str = "y") -> dict:
    """An outline (no fill) around one block: the highlight, or a block appended this step."""
    return {"name": name, "xref": xref, "yref": yref, "layer": "above",
            "x0": round(x - half_w, 3), "x1": round(x + half_w, 3),
            "y0": round(y - half_h, 3), "y1": round(y + half_h, 3),
            "fillcolor": CLEAR, "line": {"color": color, "width": 2.5}}


def labels(rows: list[tuple[list[Run], float]], cell_px: float) -> dict:
    """The text trace's data for runs on rows [(runs, y)]: a label where it fits."""
    xs, ys, text, ink = [], [], [], []
    for runs, y in rows:
        for r in runs:
            if r.label and fits(r, cell_px):
                xs.append((r.start + r.stop - 1) / 2)
                ys.append(y)
                text.append(r.label)
                ink.append(r.ink)
    return {"x": xs, "y": ys, "text": text, "textfont.color": ink}


def hover_layer(name: str, y: float, template: str, *, xaxis: str = "x",
                yaxis: str = "y") -> dict:
    """Arguments of `fig.add_heatmap` for a transparent one-row hover layer on row y: cell j
    is slot j (x0=0, dx=1). Fill `z` (None: no block there, no hover) and `text`.

    One flat list of strings per layer, not nested customdata: after every update plotly's
    widget deep-copies and compares every array of the figure (getFullData, _sendTraceDeltas),
    so each element costs the page time on every tick, changed or not."""
    return dict(name=name, z=[[]], text=[[]], x0=0, dx=1, y0=y, dy=1, xaxis=xaxis,
                yaxis=yaxis, zmin=0, zmax=1, zsmooth="fast", showscale=False,
                colorscale=[[0, CLEAR], [1, CLEAR]], hoverongaps=False,
                hovertemplate=template + "<extra></extra>")


def hover_data(texts: list, n: int) -> dict:
    """z and text of a hover layer for n slots: a cell per slot; slots past `texts` (or whose
    text is None) have no block and no hover."""
    z = [1 if j < len(texts) and texts[j] is not None else None for j in range(n)]
    tx = [texts[j] if j < len(texts) and texts[j] is not None else "" for j in range(n)]
    return {"z": [z], "text": [tx]}


def point_slot(points) -> int | None:
    """The slot under the mouse in a hover layer's (or any trace's) hover callback."""
    if not points.point_inds:
        return None
    x = points.xs[0] if points.xs else None
    if x is None:
        p = points.point_inds[0]
        return int(p[-1] if isinstance(p, list | tuple) else p)
    return int(round(float(x)))
