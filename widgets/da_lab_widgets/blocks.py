"""Diagram 2 — blocks, the block table and the physical KV cache.

One request's view of paged attention, one engine step at a time:
    (a) its logical blocks, coloured by DA region; the last one only partly filled (seq_len);
    (b) the staged block-table row, BlockTable.append_row's CPU numpy row: logical -> physical;
    (c) the row the attention builder actually got (built_row): kept blocks first, then the
        hidden ones greyed — the kernel reads only the coloured part;
    (d) the physical KV cache, one cell per block of the engine's cache, coloured by owner.
Every number drawn comes from the step record or the trace header. Hovering a block in (a)-(d)
sets the shared Highlight; the highlighted physical block is outlined in every panel.

Rows of 2,000 blocks stay cheap: (a)-(c) are drawn as runs of alike blocks (runs.py) under
per-block hover layers, (d) as one heatmap (kvgrid.py), and a step sends only what changed (a
decode step: the title's text and one token slice of the last block). Both are shapes whose
colours or label change, never move (shapes.py): the browser redraws those shapes alone.
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets
import plotly.graph_objects as go

from da_lab.core.record import RequestStep, StepRecord

from .figure import LiveFigure
from .highlight import Highlight
from .kvgrid import GRID_LABELS, GRID_PALETTE, add_grid, describe_block, grid_cells, kv_quiet
from .rows import (
    CACHED,
    FLASH,
    HL,
    MASKED,
    OWNERS,
    RESPONSE,
    Pusher,
    RequestView,
    kernel_row,
    phys_row,
)
from .runs import (
    LABEL_PX,
    Run,
    bar_layer,
    fits,
    hover_data,
    hover_layer,
    id_range,
    labels,
    mark_runs,
    point_slot,
    run_bars,
    spans,
)
from .shapes import filled_block, hidden, text_shape
from .source import first_request, kv_state, request_in

# ---- geometry (pixels are layout, not data) -------------------------------------------------
_W = 920
_M = dict(l=200, r=20, t=56, b=10)
_ROW_PX = 38          # one row of (a)-(c)
_GRID_PX = 27         # one cell of (d), where the ids are written in the cells
_GRID_W = 480         # (d) at most this wide where they are not: the page redraws the grid's
                      # image at its size in pixels on every update
_GAP_PX = 46          # between the rows and the grid (room for the grid's caption)
_Y = {"logical": 3, "staged": 2, "kernel": 1}
_FULL = 0.84          # bar height of a full logical block (row pitch is 1)
_SQ = 0.36            # half height of a staged / kernel block
_HOVER_HINT = "hover a block to follow it through every panel"
_TEMPLATES = {"logical": "logical %{x} %{text}", "staged": "staged[%{x}] = %{text}",
              "kernel": "kernel row %{x}: %{text}"}


class BlocksDiagram:
    """`show(records, i)` draws record i; `.widget` is the diagram, `.figure` the FigureWidget.

    Rows (a)-(c) are runs (runs.py): one bar per run of alike blocks, a transparent hover
    layer per row that names each block and its physical slot. The grid (d) is a heatmap, one
    cell per physical block. What changes every step is shapes: the title (a label), the last
    logical block's fill (one shape per token slot, filled or clear), the outlines (highlight,
    appended this step)."""

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
        self._phys: dict[str, list] = {"logical": [], "staged": [], "kernel": []}
        self._flash: set[int] = set()
        self._shapes: list[dict] = []      # the last block: its frame and token slices
        self._title = ""
        self._key = ""                     # the grid's owner key
        self._grid_owners: list[str] | None = None
        self._grid_at: tuple[list, int] | None = None     # (records, i) the grid shows
        self._rows_key: tuple | None = None
        self._rows: dict[str, dict] = {}
        self._last_run: Run | None = None

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
        cell = self._grid_cell = (_GRID_PX if self.num_blocks <= GRID_LABELS
                                  else max(8, min(_GRID_PX, _GRID_W // self.cols)))
        grid_px = self.grid_rows * cell
        plot_h = 3 * _ROW_PX + _GAP_PX + grid_px
        self._plot_w = plot_w = _W - _M["l"] - _M["r"]
        prov = self.header.get("provenance") or {}
        g, cols, rows = self.num_blocks, self.cols, self.grid_rows
        fig = LiveFigure(layout=dict(
            width=_W, height=plot_h + _M["t"] + _M["b"], margin=_M, showlegend=False,
            plot_bgcolor="white", hovermode="closest", barmode="overlay",
            xaxis=dict(domain=[0, 1], range=[-0.5, 0.5], visible=False, fixedrange=True),
            yaxis=dict(domain=[(grid_px + _GAP_PX) / plot_h, 1], range=[0.45, 3.55],
                       tickvals=[3, 2, 1], ticktext=["", "", ""], fixedrange=True,
                       showgrid=False, zeroline=False),
            xaxis2=dict(domain=[0, min(1.0, cols * cell / plot_w)], anchor="y2",
                        range=[-0.5, cols - 0.5], visible=False, fixedrange=True),
            yaxis2=dict(domain=[0, grid_px / plot_h], anchor="x2", visible=False,
                        range=[rows - 0.5, -0.5], fixedrange=True),
            annotations=[
                dict(xref="paper", yref="paper", x=0, y=grid_px / plot_h, yanchor="bottom",
                     xanchor="left", showarrow=False, align="left", font=dict(size=12),
                     text=(f"(d) physical KV cache: {g} blocks × {self.block_size} tokens"
                           f" — {html.escape(str(prov.get('vllm', '')))}, "
                           f"{html.escape(str(prov.get('backend', '')))}")),
            ], shapes=[]))
        # the texts that change (title, the grid's owner key) are shape labels: boxes that
        # never move, in paper coordinates (the title's reaches into the top margin)
        left = (0.01 * _W - _M["l"]) / plot_w
        self._title_box = (left, 1.0, 1 + 6 / plot_h, 1 + (_M["t"] - 6) / plot_h)
        self._key_box = (min(1.0, cols * cell / plot_w) + 0.01, 1.0, 0.0, grid_px / plot_h)
        # (a)-(c): the runs, a bar trace per row; their labels one text trace; hover, per row
        for key in ("logical", "staged", "kernel"):
            fig.add_bar(**bar_layer(f"{key} runs"))
        fig.add_scatter(name="labels", x=[], y=[], mode="text", text=[], hoverinfo="skip",
                        textfont=dict(size=10, color=[]))
        # the last logical block's label: its ink (one colour, not a list: a style edit, not
        # a redraw) turns light once the block is half full
        fig.add_scatter(name="last label", x=[], y=[], mode="text", text=[],
                        hoverinfo="skip", textfont=dict(size=10, color="#111"))
        for key in ("logical", "staged", "kernel"):
            fig.add_heatmap(**hover_layer(key, _Y[key], _TEMPLATES[key]))
        # (d) the physical cache (kvgrid.py): the ids never move, colours change
        add_grid(fig, g, cols, rows)
        self._index = {t.name: k for k, t in enumerate(fig.data)}
        for key in ("logical", "staged", "kernel", "grid"):
            fig.data[self._index[key]].on_hover(
                lambda tr, pts, st, key=key: self._hovered(key, pts))
        return fig

    def _bind(self, records: list, req: str, n_min: int = 0) -> None:
        """Size rows (a)-(c) for this request, once (or again if a row outgrows them)."""
        view = self.view = RequestView.reuse(self.view, records, req, self.block_size,
                                             self.num_blocks, n_min)
        self._cell = min(self._plot_w / view.n_slots, _ROW_PX)
        self.push({}, {"xaxis.range": [-0.5, view.n_slots - 0.5]})

    # ---- per step --------------------------------------------------------------------------
    def owner_color(self, owner: str) -> str:
        """The grid colour of a request; fixed the first time the diagram meets it."""
        return GRID_PALETTE[self._owner_code(owner)]

    def _owner_code(self, owner: str) -> int:
        if owner not in self.owner_colors:
            self.owner_colors[owner] = OWNERS[len(self.owner_colors) % len(OWNERS)]
        return 2 + OWNERS.index(self.owner_colors[owner])

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
        # The cache only changes where a record says so: the step after the one on screen
        # with no KV changes leaves the grid as it is.
        at = self._grid_at
        if not (at and at[0] is records and (at[1] == i or at[1] == i - 1 and kv_quiet(rec))):
            self._draw_grid(blocks, upd, lay)
        self._grid_at = (records, i)
        lay["shapes"] = self._all_shapes()
        self._push(upd, lay)
        self._update_label()

    def _push(self, upd: dict[str, dict], lay: dict) -> None:
        self.push({self._index[k]: v for k, v in upd.items()}, lay)

    def _draw_rows(self, rec: StepRecord, h: RequestStep | None, staged: list[int], upd: dict,
                   lay: dict) -> None:
        v, n, bs = self.view, self.view.n_slots, self.block_size
        if h is None or not h.hooked:
            self._title = f"step {rec.step}: {html.escape(v.req)} did not run"
            self._shapes = [hidden(sh) for sh in self._shapes]
            self._phys = {"logical": [], "staged": [], "kernel": []}
            self._rows_key = None
            upd["labels"] = labels([], self._cell)
            upd["last label"] = {"x": [], "y": [], "text": []}
            for key in ("logical", "staged", "kernel"):
                upd[key] = hover_data([], n)
                upd[f"{key} runs"] = run_bars([], 0, 0, self._cell)
            return
        total, ns = h.blocks_total, len(staged)
        kept, built = h.kept.tolist(), kernel_row(h)
        fill = h.seq_len - (total - 1) * bs
        # The rows change only with the blocks (a mode switch, a new block): the same blocks
        # as last step, the runs, labels and hover data are what was sent; only the fill moves.
        key = (v, self._cell, total, staged, kept, built)
        if key != self._rows_key:
            self._rows_key = key
            self._rows = self._row_data(total, staged, kept, built, fill)
        upd.update(self._rows)
        last = self._last_run
        y0 = _Y["logical"] - _FULL / 2
        self._shapes = filled_block("logical", total - 1, y0, _FULL, fill, bs, last.fill)
        upd["last label"] = {"x": [total - 1], "y": [_Y["logical"]],
                             "text": [last.label if fits(last, self._cell) else ""],
                             "textfont.color": last.ink if 2 * fill >= bs else "#111"}
        # the tick labels change only with the rows (a new label can move plotly's margins and
        # redraw everything); what moves every step is in the title
        lay["yaxis.ticktext"] = [f"(a) logical blocks · {total}",
                                 f"(b) staged row (append_row) · {ns}",
                                 f"(c) built_row → kernel · reads {len(built)}"]
        self._title = (
            f"step {rec.step} · {html.escape(v.req)} · {h.mode} · seq_len {h.seq_len}: "
            f"{total} blocks, last {fill}/{bs} full · kernel reads {len(built)} blocks, "
            f"attention seq_len {h.attn_seq_len}")

    def _row_data(self, total: int, staged: list[int], kept: list[int], built: list[int],
                  fill: int) -> dict[str, dict]:
        """Runs, labels and hover data of rows (a)-(c), by trace name."""
        v, n, ns = self.view, self.view.n_slots, len(staged)
        kept_set = set(kept)
        # (c) the builder's row: kept blocks compacted to the front, then the hidden ones
        order = [(p, kept[j] if j < len(kept) else None, True) for j, p in enumerate(built)]
        order += [(staged[lb], lb, False) for lb in range(min(total, ns))
                  if lb not in kept_set]
        order = order[:n]
        rows = {"logical": self._logical_runs(total, staged, fill),
                "staged": self._staged_runs(staged),
                "kernel": self._kernel_runs(order)}
        self._last_run = rows["logical"][-1]
        self._phys = {"logical": staged[: min(total, ns)], "staged": staged,
                      "kernel": [p for p, _, _ in order]}
        # the last logical block's label is a shape's (last_block): its ink follows the fill
        out = {"labels": labels([(rows["logical"][:-1], _Y["logical"])]
                                + [(rows[k], _Y[k]) for k in ("staged", "kernel")], self._cell)}
        for key, half, line in (("logical", _FULL / 2, "#bbbbbb"), ("staged", _SQ, "white"),
                                ("kernel", _SQ, "white")):
            runs = rows[key][:-1] if key == "logical" else rows[key]   # the last: shapes
            out[f"{key} runs"] = run_bars(runs, _Y[key], half, self._cell, line=line)
        reg = v.regions
        out["logical"] = hover_data([f"({reg[j]}) → physical {staged[j] if j < ns else '–'}"
                                     for j in range(total)], n)
        out["staged"] = hover_data([f"physical {p} (logical {j}, {reg[j]})"
                                    for j, p in enumerate(staged)], n)
        out["kernel"] = hover_data(
            [f"physical {p} (logical {'–' if lb is None else lb}, "
             f"{reg[lb] if lb is not None and lb < n else ''}): "
             f"{'read' if read else 'hidden, not read'}" for p, lb, read in order], n)
        return out

    def _logical_runs(self, total: int, staged: list[int], fill: int) -> list[Run]:
        """(a): full blocks as runs; the last block a run of its own, drawn as shapes (a frame,
        filled to seq_len, labelled) since its fill moves every step."""
        v, ns, each = self.view, len(staged), self._cell >= LABEL_PX
        keys = [(v.colors[j], staged[j] - j if j < ns else None, j if each else 0)
                for j in range(total - 1)]
        runs = [Run(s, e, v.colors[s], v.inks[s], id_range(s, e - 1)) for s, e in spans(keys)]
        j = total - 1
        return [*runs, Run(j, j + 1, v.colors[j], v.inks[j], str(j))]

    def _staged_runs(self, staged: list[int]) -> list[Run]:
        v, each = self.view, self._cell >= LABEL_PX
        keys = [(v.colors[j], p - j, j if each else 0) for j, p in enumerate(staged)]
        runs = [Run(s, e, v.colors[s], v.inks[s], id_range(staged[s], staged[e - 1]))
                for s, e in spans(keys)]
        return runs

    def _kernel_runs(self, order: list) -> list[Run]:
        v, n, each = self.view, self.view.n_slots, self._cell >= LABEL_PX

        def look(lb, read):
            if not read:
                return MASKED, "#888"
            return (v.colors[lb], v.inks[lb]) if lb is not None and lb < n else (RESPONSE, "#111")

        keys = [(look(lb, read), p - j, None if lb is None else lb - j, j if each else 0)
                for j, (p, lb, read) in enumerate(order)]
        runs = [Run(s, e, *keys[s][0], id_range(order[s][0], order[e - 1][0]))
                for s, e in spans(keys)]
        return runs

    def _draw_grid(self, blocks: dict[int, dict], upd: dict, lay: dict) -> None:
        z, what, owners_now = grid_cells(blocks, self.num_blocks, self.cols, self.grid_rows,
                                         self._owner_code)
        upd["grid"] = {"z": z, "customdata": what}
        if owners_now != self._grid_owners:
            key = " ".join(f'<span style="color:{self.owner_color(o)}">■</span> '
                           f"{html.escape(o)}" for o in owners_now) or "none"
            self._key = (
                f"owner: {key}<br><span style='color:{CACHED}'>■</span> free, prefix-cached"
                f" · <span style='color:#bbbbbb'>■</span> free<br>"
                f"<span style='color:{FLASH}'>□</span> appended this step · "
                f"<b>□</b> highlighted")
            self._grid_owners = owners_now

    def _all_shapes(self) -> list[dict]:
        """Every shape, the ones that are always there first (their places in the list never
        change: shapes.py), then the outlines."""
        x0, x1, y0, y1 = self._title_box
        title = text_shape("title", x0, x1, y0, y1, self._title, size=13,
                           position="middle left")
        key = text_shape("owner key", *self._key_box, self._key, pad=0)
        return [title, key, *self._shapes, *self._marks()]

    def _marks(self) -> list[dict]:
        """Outlines: the highlighted physical block, else a block appended this step."""
        hl, flash = self.highlight.block, self._flash

        def mark(p):
            return None if p is None else HL if p == hl else FLASH if p in flash else None

        out: list[dict] = []
        if hl is None and not flash:
            return out
        for key, half in (("logical", _FULL / 2), ("staged", _SQ), ("kernel", _SQ)):
            out += mark_runs([mark(p) for p in self._phys[key]], _Y[key], half + 0.04,
                             f"{key} mark")
        rows: dict[int, list] = {}
        for p in flash | ({hl} if hl is not None else set()):
            if 0 <= p < self.num_blocks:
                r, c = divmod(p, self.cols)
                rows.setdefault(r, [None] * self.cols)[c] = mark(p)
        for r, row in sorted(rows.items()):
            out += [{**s, "x0": s["x0"] + 0.04, "x1": s["x1"] - 0.04} for s in
                    mark_runs(row, r, 0.46, "grid mark", xref="x2", yref="y2")]
        return out

    # ---- the shared highlight --------------------------------------------------------------
    def _hovered(self, key: str, points) -> None:
        j = point_slot(points)
        if j is None:
            return
        if key == "grid":
            p = int(round(float(points.ys[0]))) * self.cols + j if points.ys else None
            phys = [] if p is None or p >= self.num_blocks else [p]
            j = 0
        else:
            phys = self._phys.get(key) or []
        if 0 <= j < len(phys) and phys[j] is not None:
            self.highlight.set(phys[j], self.name)

    def _on_highlight(self, _change=None) -> None:
        if self._records is None:
            return
        self._push({}, {"shapes": self._all_shapes()})
        self._update_label()

    def _update_label(self) -> None:
        p = self.highlight.block
        if p is None or self._records is None:
            self.label.value = _HOVER_HINT
            return
        self.label.value = describe_block(self._records[self._i], p, self.req,
                                          kv_state(self.header, self._records, self._i))
