"""What the diagrams that draw rows of blocks share: the region colours, the one-message plotly
updater (`Pusher`), the fixed view of the request a diagram follows (`RequestView`), and a step
record's rows as plain lists."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.colors as pcolors
import plotly.graph_objects as go
from plotly.basedatatypes import Undefined

from da_lab.core.layout import Layout
from da_lab.core.record import RequestStep

from .shapes import shape_edits
from .source import added_entry

# ---- colours shared by the diagrams that colour blocks by DA region -------------------------
SCAFFOLD = "#e09f3e"     # scaffold head, incl. the attention sink (block 0)
TAIL = "#f2c57c"         # scaffold tail: the question (always kept, like the head)
RESPONSE = "#2a9d8f"
MASKED = "#d0d0d0"       # hidden from the kernel this step
FREE = "#eeeeee"
CACHED = "#f3e9c6"       # free but still holding a prefix-cache hash (drawn outlined too)
NONE = "rgba(0,0,0,0)"   # a slot past the end of the row: drawn as nothing
HL = "#111111"           # the shared highlight's outline
FLASH = "#ff5400"        # a block append_row added this step
OWNERS = pcolors.qualitative.Set2


def chunk_colors(n: int) -> list[str]:
    """n distinct blues where neighbours always contrast: odd chunks from the darker part of
    the ramp, even chunks from the lighter part (hiding C3 but not C4 must show at a glance)."""
    if n <= 0:
        return []
    half = (n + 1) // 2
    pos = []
    for k in range(n):
        rank = k // 2 / max(half - 1, 1)
        pos.append(0.55 + 0.3 * rank if k % 2 == 0 else 0.18 + 0.25 * rank)
    return pcolors.sample_colorscale("Blues", pos)


def ink(color: str) -> str:
    """Text colour that reads on `color` (white on dark fills, near-black elsewhere)."""
    c = color.strip()
    if c.startswith("#") and len(c) == 7:
        r, g, b = (int(c[k:k + 2], 16) for k in (1, 3, 5))
    elif c.startswith("rgb(") and c.endswith(")"):
        r, g, b = (float(x) for x in c[4:-1].split(",")[:3])
    else:
        return "#111"
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 140 else "#111"


class Pusher:
    """Sends a figure's changes as ONE plotly update per call (one message, one redraw), and
    only what changed since the last call: a trace whose values all equal what it was last sent
    stays out of the message, and so does a key no trace has new values for (comparing two
    lists here is far cheaper than plotly's bookkeeping, the bytes and the browser's redraw).
    Layout changes are remembered and filtered the same way; "shapes" (the whole list as it
    should be now) becomes edits of single shapes (shapes.py). Nothing new: no message at all.
    That matters more than the bytes: a trace's data edit makes plotly.js recalculate and
    redraw the whole figure, so one call is one message, whatever traces it touches.

    plotly_update skips plotly's per-element validators, which cost ~1 ms per array of colours;
    every value here is built by this package as plain lists of str/number, so nothing needs
    validating. Call with {trace index: {"marker.color": [...], ...}} and relayout changes.

    A trace with nothing new for a key another trace changes gets plotly.py's Undefined ("leave
    it alone"). plotly's own front end took that for a value in its copy of the figure (what a
    view re-rendered from it drew); LiveFigure's (figure.py) reads it as "leave alone", so the
    figure must be a LiveFigure for a page to draw it right."""

    def __init__(self, fig: go.FigureWidget) -> None:
        self.fig = fig
        self.sent: dict[int, dict] = {}
        self.sent_layout: dict = {}
        self.shapes: list[dict] | None = None    # the shapes on the page (shapes.py)
        self.messages = 0

    def __call__(self, traces: dict[int, dict], layout: dict | None = None) -> None:
        # Callers build fresh lists every call and never change them after: they are kept as
        # they are (a copy of every array every tick cost more than the whole comparison).
        new = {}
        for i, d in traces.items():
            last = self.sent.get(i, {})
            d = {k: _plain(v) for k, v in d.items() if last.get(k, _UNSENT) != _plain(v)}
            if d:
                new[i] = d
        layout = dict(layout or {})
        shapes = layout.pop("shapes", None)
        lay = {k: _plain(v) for k, v in layout.items()
               if self.sent_layout.get(k, _UNSENT) != _plain(v)}
        self.sent_layout.update(lay)
        if shapes is not None:
            # "the shapes now" becomes edits of single shapes (shapes.py), never remembered
            # with the keys above: a whole new list may have changed any of them since
            edits, self.shapes = shape_edits(self.shapes, list(shapes))
            lay.update(edits)
        if not new and not lay:
            return
        idx = sorted(new)
        keys = sorted({k for i in idx for k in new[i]})
        restyle = {k: [new[i].get(k, Undefined) for i in idx] for k in keys}
        for i in idx:
            self.sent.setdefault(i, {}).update(new[i])
        self.messages += 1
        if hasattr(self.fig, "push_update"):        # a LiveFigure: no second comparison
            self.fig.push_update(restyle, lay, idx)
            return
        self.fig.plotly_update(restyle_data=restyle, relayout_data=lay, trace_indexes=idx)
        for k in lay:
            # plotly.py stores a whole new list of shapes but keeps serving the old Shape
            # objects from fig.layout.shapes; dropping them makes it rebuild from the list
            if "." not in k and "[" not in k:
                self.fig.layout._compound_array_props.pop(k, None)


def _plain(v):
    """A tuple as a list, so it compares with what was sent (lists are taken as they are)."""
    return list(v) if isinstance(v, tuple) else v


_UNSENT = object()


@dataclass
class RequestView:
    """What never changes about the request a diagram follows: its layout and the colour and
    region of each logical block slot it can ever have."""
    req: str
    layout: Layout | None
    prompt_len: int
    n_slots: int
    regions: list[str]     # per logical block: "scaffold", "C1".., "tail", "response", "prompt"
    colors: list[str]
    inks: list[str]        # text colour on each block's colour

    @classmethod
    def of(cls, records: list, req: str, block_size: int, num_blocks: int) -> RequestView:
        added = added_entry(records, req) or {}
        lay = added.get("layout")
        layout = Layout.from_dict(lay) if isinstance(lay, dict) else None
        prompt_len = int(added.get("prompt_len") or (layout.prompt_len if layout else 0))
        need = -(-(prompt_len + int(added.get("max_tokens") or 0)) // block_size)
        # A request never holds more blocks than the cache has; a record may still show a
        # longer row than `added` promised (then the diagram rebinds with more slots).
        n = max(1, min(need, num_blocks) if need else num_blocks)
        return cls.sized(req, layout, prompt_len, n, block_size)

    @classmethod
    def sized(cls, req, layout, prompt_len, n, block_size) -> RequestView:
        cc = chunk_colors(layout.n_chunks) if layout else []
        regions, colors = [], []
        for j in range(n):
            if layout is not None:
                r = layout.region_of(j)
            else:
                r = "prompt" if j * block_size < prompt_len else "response"
            regions.append(r)
            colors.append({"scaffold": SCAFFOLD, "prompt": SCAFFOLD, "tail": TAIL,
                           "response": RESPONSE}.get(r) or cc[int(r[1:]) - 1])
        return cls(req, layout, prompt_len, n, regions, colors, [ink(c) for c in colors])

    @classmethod
    def reuse(cls, view, records: list, req: str, block_size: int, num_blocks: int,
              n_min: int = 0) -> RequestView:
        """Keep `view` while it shows `req` and is wide enough; else size a new one."""
        if view is None or view.req != req:
            view = cls.of(records, req, block_size, num_blocks)
        return view.grown(n_min, block_size) if n_min > view.n_slots else view

    def grown(self, n: int, block_size: int) -> RequestView:
        return self.sized(self.req, self.layout, self.prompt_len, n, block_size)


def phys_row(h: RequestStep) -> list[int]:
    """The staged row of a request record (logical index -> physical id); [] if not recorded."""
    return [] if h.staged_row is None else h.staged_row.tolist()


def kernel_row(h: RequestStep) -> list[int]:
    """The row the kernel read (what the attention builder received)."""
    row = h.read_row
    return [] if row is None else row.tolist()
