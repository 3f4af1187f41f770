"""Read back what a diagram drew, from the figure alone: the runs (bars) block by block,
the hover text plotly would show for a block, the grid's colours, the outlines. The widget tests
compare these with the records; nothing here looks at a diagram's private state."""

from __future__ import annotations

import re


def trace(fig, name: str):
    return next(t for t in fig.data if t.name == name)


def runs(fig, name: str) -> list[tuple[int, int, str]]:
    """The runs of row `name` as drawn: (first slot, one past the last, fill), from the bars of
    its trace "<name> runs" (a bar at x, `width` blocks wide, covers x - w/2 + 0.5 ...)."""
    t = trace(fig, f"{name} runs")
    out = []
    for x, w, c in zip(t.x, t.width, t.marker.color, strict=True):
        a, b = x - w / 2 + 0.5, x + w / 2 + 0.5
        assert a == int(a) and b == int(b) and b > a, (x, w)
        out.append((int(a), int(b), c))
    return out


def per_block(fig, name: str) -> dict[int, str]:
    """{slot: fill colour} for every slot a run of row `name` covers; runs never overlap."""
    out: dict[int, str] = {}
    for a, b, c in runs(fig, name):
        for j in range(a, b):
            assert j not in out, f"two runs cover slot {j}"
            out[j] = c
    return out


def _render(template: str, x, cd, text=None) -> str:
    def sub(m):
        key, idx = m.group(1), m.group(2)
        if key == "x":
            return str(x)
        if key == "text":
            return str(text)
        return str(cd[int(idx)] if idx is not None else cd)

    out = re.sub(r"%\{(x|text|customdata)(?:\[(\d+)\])?\}", sub, template)
    return out.replace("<extra></extra>", "")


def hover(fig, name: str, j: int) -> str | None:
    """What plotly shows when the mouse rests on slot j of the one-row hover layer `name`
    (None: no block there, the cell is a gap and hovers nothing)."""
    t = trace(fig, name)
    z = t.z[0]
    if j >= len(z) or z[j] is None:
        return None
    return _render(t.hovertemplate, t.x0 + j * t.dx, None, t.text[0][j])


def grid_hover(fig, p: int, cols: int) -> str | None:
    t = trace(fig, "grid")
    r, c = divmod(p, cols)
    if t.z[r][c] is None:
        return None
    return _render(t.hovertemplate, c, t.customdata[r][c])


def grid_colors(fig, n: int, cols: int) -> list[str]:
    """The colour of each physical block's cell, from z through the trace's own colour scale."""
    t = trace(fig, "grid")
    out = []
    for p in range(n):
        v = t.z[p // cols][p % cols]
        frac = (v - t.zmin) / (t.zmax - t.zmin)
        stops = [(float(a), c) for a, c in t.colorscale]
        out.append(next(c for (a, c), (b, _) in zip(stops, stops[1:], strict=False)
                        if a <= frac <= b))
    return out


def marked(fig, name: str, color: str, cols: int | None = None) -> set[int]:
    """Slots (rows) or physical blocks (grid: give cols) inside an outline of `color`."""
    out = set()
    for s in fig.layout.shapes:
        if s.name != name or s.line.color != color:
            continue
        if cols is None:
            out |= set(range(round(s.x0 + 0.5), round(s.x1 + 0.5)))
        else:
            r = round((s.y0 + s.y1) / 2)
            out |= {r * cols + c for c in range(round(s.x0 + 0.5), round(s.x1 + 0.5))}
    return out


def last_block(fig) -> tuple[int, int, str | None, int]:
    """Row (a)'s last logical block as drawn: (slot, token slots filled, their colour, token
    slots in all), from its frame and its one-token slices (the filled ones are the lowest,
    one colour; the rest are clear)."""
    clear = "rgba(0,0,0,0)"
    (frame,) = [s for s in fig.layout.shapes if s.name == "logical frame"
                and s.line.color != clear]
    slices = sorted((s for s in fig.layout.shapes if s.name == "logical fill"
                     and s.x0 == frame.x0), key=lambda s: s.y0)
    filled = [s.fillcolor != clear for s in slices]
    n = sum(filled)
    assert filled == [True] * n + [False] * (len(slices) - n), "filled from the bottom up"
    assert slices[0].y0 == frame.y0 and abs(slices[-1].y1 - frame.y1) < 1e-3
    colors = {s.fillcolor for s in slices[:n]}
    assert len(colors) <= 1
    return round(frame.x0 + 0.5), n, next(iter(colors), None), len(slices)


def chart_shown(fig, name: str) -> tuple[list, list]:
    """The points of trace `name` a chart shows: those inside its x range (the chart holds
    every step recorded so far; its x axis ends at the step on screen)."""
    t = trace(fig, name)
    lo, hi = fig.layout.xaxis.range
    pts = [(x, y) for x, y in zip(t.x, t.y, strict=True) if lo <= x <= hi]
    return [x for x, _ in pts], [y for _, y in pts]
