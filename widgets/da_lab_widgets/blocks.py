"""Diagram 2 — blocks, the block table and the physical KV cache.

One request's view of paged attention, one engine step at a time:
    (a) its logical blocks, coloured by DA region; the last one only partly filled (seq_len);
    (b) the staged block-table row, BlockTable.append_row's CPU numpy row: logical -> physical;
    (c) the row the attention builder actually got (built_row): kept blocks first, then the
        hidden ones greyed — the kernel reads only the coloured part;
    (d) the physical KV cache, one cell per block of the engine's cache, coloured by owner.
Every number drawn comes from the step record or the trace header. Hovering a block in (a)-(d)
sets the shared Highlight; the highlighted physical block is outlined in every panel.
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets
import plotly.graph_objects as go

from da_lab.core.record import RequestStep, StepRecord

from .figure import FigureWidget
from .highlight import Highlight
from .rows import (
    CACHED,
    FLASH,
    FREE,
    HL,
    MASKED,
    NONE,
    OWNERS,
    RESPONSE,
    Pusher,
    RequestView,
    kernel_row,
    phys_row,
)
from .source import first_request, kv_state, request_in

# ---- geometry (pixels are layout, not data) -------------------------------------------------
_W = 920
_M = dict(l=200, r=20, t=56, b=10)
_ROW_PX = 38          # one row of (a)-(c)
_GRID_PX = 27         # one cell of (d)
_GAP_PX = 46          # between the rows and the grid (room for the grid's caption)
_Y = {"logical": 3, "staged": 2, "kernel": 1}
_FULL = 0.84          # bar height of a full logical block (row pitch is 1)
_HOVER_HINT = "hover a block to follow it through every panel"


class BlocksDiagram:
    """`show(records, i)` draws record i; `.widget` is the diagram, `.figure` the FigureWidget."""

    name = "blocks"

    def __init__(self, header: dict, highlight: Highlight | None = None,
                 req: str | None = None) -> None:
        prov = header.get("provenance") or {}
        self.header = header
        self.block_size = int(prov["block_size"])
        self.num_blocks = int(prov["num_blocks"])
        self.highlight = highlight if highlight is not None else Highlight()
        self.req = req
        self.view: RequestView | None = None
        self.owner_colors: dict[str, str] = {}
        self._records: list | None = None
        self._i: int | None = None
        self._phys = {"logical": [], "staged": [], "kernel": [], "grid": []}
        self._flash: set[int] = set()
        self._base_lines: dict[str, tuple[list, list]] = {}
        self._grid_owners: list[str] | None = None

        self.cols = math.ceil(math.sqrt(self.num_blocks))
        self.grid_rows = math.ceil(self.num_blocks / self.cols)
        self.figure = self._build_figure()
        self.push = Pusher(self.figure)
        self.label = widgets.Label(_HOVER_HINT)
        self.label.add_class("da-highlight")
        self.widget = widgets.VBox([self.figure, self.label])
        self.widget.add_class("da-blocks")
        self.highlight.observe(self._on_highlight, "block")

    # ---- the static figure -----------------------------------------------------------------
    def _build_figure(self) -> go.FigureWidget:
        rows_px = 3 * _ROW_PX
        grid_px = self.grid_rows * _GRID_PX
        plot_h = rows_px + _GAP_PX + grid_px
        plot_w = _W - _M["l"] - _M["r"]
        self._plot_w = plot_w
        prov = self.header.get("provenance") or {}
        g = self.num_blocks
        gx = [p % self.cols for p in range(g)]
        gy = [p // self.cols for p in range(g)]
        cell = _GRID_PX * 0.88
        fig = FigureWidget(layout=dict(
            width=_W, height=plot_h + _M["t"] + _M["b"], margin=_M, showlegend=False,
            plot_bgcolor="white", barmode="overlay", hovermode="closest",
            title=dict(text="", font=dict(size=13), x=0.01, xanchor="left"),
            xaxis=dict(domain=[0, 1], range=[-0.5, 0.5], visible=False, fixedrange=True),
            yaxis=dict(domain=[(grid_px + _GAP_PX) / plot_h, 1], range=[0.45, 3.55],
                       tickvals=[3, 2, 1], ticktext=["", "", ""], fixedrange=True,
                       showgrid=False, zeroline=False),
            xaxis2=dict(domain=[0, min(1.0, self.cols * _GRID_PX / plot_w)], anchor="y2",
                        range=[-0.5, self.cols - 0.5], visible=False, fixedrange=True),
            yaxis2=dict(domain=[0, grid_px / plot_h], anchor="x2", visible=False,
                        range=[self.grid_rows - 0.5, -0.5], fixedrange=True),
            annotations=[
                dict(xref="paper", yref="paper", x=0, y=grid_px / plot_h, yanchor="bottom",
                     xanchor="left", showarrow=False, align="left", font=dict(size=12),
                     text=(f"(d) physical KV cache: {g} blocks × {self.block_size} tokens"
                           f" — {html.escape(str(prov.get('vllm', '')))}, "
                           f"{html.escape(str(prov.get('backend', '')))}")),
                dict(xref="paper", yref="paper", x=min(1.0, self.cols * _GRID_PX / plot_w) + 0.02,
                     y=grid_px / plot_h, yanchor="top", xanchor="left", showarrow=False,
                     align="left", font=dict(size=11), text=""),
            ]))
        # (a) the logical blocks: a full-height frame, the filled part on top of it, labels.
        fig.add_bar(name="frame", x=[], y=[], base=[], width=0.9, marker_color="#f4f4f4",
                    marker_line=dict(color="#bbbbbb", width=1), hoverinfo="skip")
        fig.add_bar(name="logical", x=[], y=[], base=[], width=0.9, hoverinfo="text",
                    hovertext=[])
        fig.add_scatter(name="logical labels", x=[], y=[], mode="text", text=[],
                        textfont=dict(size=10, color="#222"), hoverinfo="skip")
        # (b), (c): one square per slot.
        for key in ("staged", "kernel"):
            fig.add_scatter(name=key, x=[], y=[], mode="markers+text", text=[],
                            marker=dict(symbol="square", size=10, color=[]),
                            textfont=dict(size=10), hoverinfo="text", hovertext=[])
        # (d) the physical cache: positions never move, only colours and marks do.
        fig.add_scatter(name="grid", x=gx, y=gy, xaxis="x2", yaxis="y2", mode="markers+text",
                        text=[str(p) for p in range(g)], textfont=dict(size=9, color="#333"),
                        marker=dict(symbol="square", size=cell, color=[FREE] * g,
                                    line=dict(color=["white"] * g, width=[1] * g)),
                        hoverinfo="text", hovertext=[f"physical {p}: free" for p in range(g)])
        self._tr = {t.name: t for t in fig.data}
        self._index = {t.name: k for k, t in enumerate(fig.data)}
        for name in ("logical", "staged", "kernel", "grid"):
            key = name
            self._tr[name].on_hover(lambda tr, pts, st, key=key: self._hovered(key, pts))
        self._phys["grid"] = list(range(g))
        return fig

    def _bind(self, records: list, req: str, n_min: int = 0) -> None:
        """Size rows (a)-(c) for this request, once (or again if a row outgrows them)."""
        view = self.view = RequestView.reuse(self.view, records, req, self.block_size,
                                             self.num_blocks, n_min)
        n = view.n_slots
        cell = min(self._plot_w / n, _ROW_PX)
        xs = list(range(n))
        # Once per request, so one update per trace is fine (Pusher says why not one batch).
        ix = self._index
        base = [_Y["logical"] - _FULL / 2] * n
        self.push({ix["frame"]: {"x": xs, "base": base, "y": [0] * n}},
                  {"xaxis.range": [-0.5, n - 0.5]})
        self.push({ix["logical"]: {"x": xs, "base": base, "y": [0] * n,
                                   "marker.color": view.colors}})
        self.push({ix["logical labels"]: {
            "x": xs, "y": [_Y["logical"]] * n, "text": [""] * n,
            "textfont.size": max(7, min(10, cell * 0.45))}})
        for key in ("staged", "kernel"):
            self.push({ix[key]: {
                "x": xs, "y": [_Y[key]] * n, "text": [""] * n, "marker.size": cell * 0.86,
                "marker.color": [NONE] * n, "textfont.size": max(7, min(10, cell * 0.42))}})

    # ---- per step --------------------------------------------------------------------------
    def owner_color(self, owner: str) -> str:
        """The grid colour of a request; fixed the first time the diagram meets it."""
        if owner not in self.owner_colors:
            self.owner_colors[owner] = OWNERS[len(self.owner_colors) % len(OWNERS)]
        return self.owner_colors[owner]

    def show(self, records: list, i: int) -> None:
        rec = records[i]
        if self.req is None:
            self.req = first_request(records[: i + 1])
        h = request_in(rec, self.req) if self.req is not None else None
        staged = phys_row(h) if h else []
        if self.req is not None and (self.view is None or self.view.req != self.req
                                     or len(staged) > self.view.n_slots):
            self._bind(records, self.req, len(staged))
        self._records, self._i = records, i
        blocks = kv_state(self.header, records, i)
        prev = request_in(records[i - 1], self.req) if i > 0 and self.req else None
        # append_row's new blocks: in this step's row, not in the previous step's
        self._flash = set(staged) - set(phys_row(prev) if prev else [])
        upd: dict[str, dict] = {}
        lay: dict = {}
        if self.view is not None:
            self._draw_rows(rec, h, staged, upd, lay)
        self._draw_grid(blocks, upd, lay)
        self._draw_lines(upd)
        self._push(upd, lay)
        self._update_label()

    def _push(self, upd: dict[str, dict], lay: dict) -> None:
        self.push({self._index[k]: v for k, v in upd.items()}, lay)

    def _draw_rows(self, rec: StepRecord, h: RequestStep | None, staged: list[int], upd: dict,
                   lay: dict) -> None:
        v, n, bs = self.view, self.view.n_slots, self.block_size
        off = [NONE] * n, [0] * n
        if h is None or not h.hooked:
            lay["title.text"] = f"step {rec.step}: {html.escape(v.req)} did not run"
            self._phys.update(logical=[None] * n, staged=[None] * n, kernel=[None] * n)
            upd["frame"] = {"y": [0] * n}
            upd["logical"] = {"y": [0] * n}
            upd["logical labels"] = {"text": [""] * n}
            for key in ("staged", "kernel"):
                upd[key] = {"text": [""] * n, "marker.color": [NONE] * n}
            self._base_lines.update(logical=off, staged=off, kernel=off)
            return
        seq_len = h.seq_len
        total = h.blocks_total
        kept = h.kept.tolist()
        kept_set = set(kept)
        built = kernel_row(h)
        hidden = [lb for lb in range(total) if lb not in kept_set]
        last_fill = seq_len - (total - 1) * bs
        rng = range(n)
        # (a) logical blocks, the last one filled to seq_len
        upd["frame"] = {"y": [_FULL if j < total else 0 for j in rng],
                        "marker.line.width": [1 if j < total else 0 for j in rng]}
        upd["logical"] = {
            "y": [(_FULL if j < total - 1 else _FULL * last_fill / bs) if j < total else 0
                  for j in rng],
            "hovertext": [(f"logical {j} ({v.regions[j]}): "
                           f"{bs if j < total - 1 else last_fill}/{bs} tokens"
                           + (f", physical {staged[j]}" if j < len(staged) else ""))
                          if j < total else "" for j in rng]}
        # the label sits mid-block: on a last block filled less than half it is on the frame
        upd["logical labels"] = {
            "text": [str(j) if j < total else "" for j in rng],
            "textfont.color": [v.inks[j] if j < total - 1 or 2 * last_fill >= bs else "#111"
                               for j in rng]}
        # (b) the staged row: physical ids at their logical positions
        ns = len(staged)
        upd["staged"] = {
            "text": [str(staged[j]) if j < ns else "" for j in rng],
            "marker.color": [v.colors[j] if j < ns else NONE for j in rng],
            "textfont.color": v.inks,
            "hovertext": [f"staged[{j}] = physical {staged[j]} (logical {j}, {v.regions[j]})"
                          if j < ns else "" for j in rng]}
        # (c) the builder's row: kept blocks compacted to the front, then the hidden ones grey
        order = [(p, kept[j] if j < len(kept) else None, True) for j, p in enumerate(built)]
        order += [(staged[lb], lb, False) for lb in hidden if lb < ns]
        order = (order + [(None, None, False)] * n)[:n]

        def region(lb):
            return v.regions[lb] if lb is not None and lb < n else ""

        upd["kernel"] = {
            "text": [str(p) if p is not None else "" for p, _, _ in order],
            "marker.color": [(v.colors[lb] if lb is not None and lb < n else RESPONSE) if read
                             else (MASKED if p is not None else NONE) for p, lb, read in order],
            "textfont.color": [(v.inks[lb] if lb is not None and lb < n else "#111") if read
                               else "#888" for _, lb, read in order],
            "hovertext": ["" if p is None else
                          f"built_row[{j}] = physical {p} (logical {lb}, {region(lb)}): read"
                          if read else
                          f"physical {p} (logical {lb}, {region(lb)}): hidden, not read"
                          for j, (p, lb, read) in enumerate(order)]}
        self._phys.update(logical=[staged[j] if j < min(total, ns) else None for j in rng],
                          staged=[staged[j] if j < ns else None for j in rng],
                          kernel=[p for p, _, _ in order])
        lay["yaxis.ticktext"] = [f"(a) logical blocks · seq_len {seq_len}",
                                 f"(b) staged row (append_row) · {ns}",
                                 f"(c) built_row → kernel · reads {len(built)}"]
        lay["title.text"] = (
            f"step {rec.step} · {html.escape(v.req)} · {h.mode} · "
            f"{total} blocks, last {last_fill}/{bs} full · kernel reads {len(built)} blocks, "
            f"attention seq_len {h.attn_seq_len}")
        self._base_lines["logical"] = (["#bbbbbb" if j < total else NONE for j in rng],
                                       [1 if j < total else 0 for j in rng])
        self._base_lines["staged"] = self._base_lines["kernel"] = (["white"] * n, [1] * n)

    def _draw_grid(self, blocks: dict[int, dict], upd: dict, lay: dict) -> None:
        colors, hover, lc, lw = [], [], [], []
        owners_now: list[str] = []
        for p in range(self.num_blocks):
            b = blocks.get(p)
            owners = b["owners"] if b else []
            cached = bool(b and b["cached"])
            for o in owners:
                if o not in owners_now:
                    owners_now.append(o)
            if owners:
                colors.append(self.owner_color(owners[0]))
                lc.append("white")
                lw.append(1)
                hover.append(f"physical {p}: {', '.join(owners)}"
                             + (" (in prefix cache)" if cached else ""))
            elif cached:
                # freed but still holding a prefix-cache hash: a later prompt can reuse it
                colors.append(CACHED)
                lc.append("#8a8a8a")
                lw.append(1.5)
                hover.append(f"physical {p}: free, prefix-cached (reusable)")
            else:
                colors.append(FREE)
                lc.append("white")
                lw.append(1)
                hover.append(f"physical {p}: free")
        upd["grid"] = {"marker.color": colors, "hovertext": hover}
        self._base_lines["grid"] = (lc, lw)
        if owners_now != self._grid_owners:
            key = " ".join(f'<span style="color:{self.owner_color(o)}">■</span> '
                           f"{html.escape(o)}" for o in owners_now) or "none"
            lay["annotations[1].text"] = (
                f"owner: {key}<br><span style='color:{CACHED}'>■</span> free, prefix-cached"
                f" (outlined) · <span style='color:#bbbbbb'>■</span> free<br>"
                f"<span style='color:{FLASH}'>□</span> appended this step · "
                f"<b>□</b> highlighted")
            self._grid_owners = owners_now

    def _draw_lines(self, upd: dict) -> None:
        """Outlines: the highlighted physical block, else a block appended this step."""
        hl = self.highlight.block
        for key in ("logical", "staged", "kernel", "grid"):
            if key not in self._base_lines:
                continue
            base_c, base_w = self._base_lines[key]
            c, w = list(base_c), list(base_w)
            for j, p in enumerate(self._phys[key]):
                if p is None or j >= len(c):
                    continue
                if p == hl:
                    c[j], w[j] = HL, 3.5
                elif p in self._flash:
                    c[j], w[j] = FLASH, 3.5
            d = upd.setdefault(key, {})
            d["marker.line.color"], d["marker.line.width"] = c, w

    # ---- the shared highlight --------------------------------------------------------------
    def _hovered(self, key: str, points) -> None:
        if not points.point_inds:
            return
        j = points.point_inds[0]
        phys = self._phys.get(key) or []
        if j < len(phys) and phys[j] is not None:
            self.highlight.set(phys[j], self.name)

    def _on_highlight(self, _change=None) -> None:
        if self._records is None:
            return
        upd: dict[str, dict] = {}
        self._draw_lines(upd)
        self._push(upd, {})
        self._update_label()

    def _update_label(self) -> None:
        p = self.highlight.block
        if p is None or self._records is None:
            self.label.value = _HOVER_HINT
            return
        self.label.value = describe_block(self._records[self._i], p, self.req,
                                          kv_state(self.header, self._records, self._i))


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
