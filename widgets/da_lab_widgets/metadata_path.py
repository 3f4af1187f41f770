"""Diagram 3: the metadata path — how one step's attention metadata reaches the kernel.

SchedulerOutput -> BlockTable (append_row, commit) -> DA hook at MetadataBuilder.build ->
MetadataBuilder, then down and back: set_forward_context -> Attention layer -> the impl the
skeleton says was loaded (CPUAttentionBackendImpl on CPU, FlashAttentionImpl on GPU...). A packet
(marker) sits on one box and carries the step's real values there: what the scheduler asked
for, the staged rows, what the hook changed, the metadata the builder got. Every value comes
from the step record; the stage names are vLLM's.

The notebook's one player moves between steps; inside the step on screen, the ◀ ▶ buttons under
the diagram move the packet from box to box (and it stays on the chosen box as steps go by).

Why the hook sits at the builder's build() call and not between append_row() and commit(), as
the seed picture drew it: on CPU the staging row *is* the device row (commit copies nothing),
so editing it would corrupt the persistent block table; and slot_mapping, computed from the
committed row, must keep the full row so KV writes land where they always do. The hook hands
build() a copy with compacted rows and shortened seq_lens: only the reads change.
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass

from da_lab.core.record import StepRecord

from .highlight import Highlight
from .metadata_path_text import card_text, hover_text, impl_of, step_values, values_text
from .shapes import text_shape
from .skeleton_view import wrap_label

__all__ = ["MetadataPathDiagram", "Stage", "step_values"]

HOOK_RED = "#d62828"
PACKET = "#ff5400"
WRITE = "#2a9d8f"
BOX_FILL = "#e4e4e4"
BOX_LINE = "#8a8a8a"
# Pixels (the plot is 880 px wide, y grows downwards). Two rows of boxes, the second running
# back right to left, so every text can be 11 px or more at 900 px: the width JupyterLab's
# notebook has at 1366 x 768 with the file browser open.
FIG_W = 900
PLOT_W = FIG_W - 20
COLS, PITCH, BOX_W, BOX_H = 4, 226, 152, 104
ROW_GAP = 62
FONT = 11
CHAR_PX = 6.6            # a character of 11 px text, wide (Verdana, DejaVu Sans), for fitting
SUB_CHARS = int((BOX_W - 10) / CHAR_PX)
TEXT_CHARS = int(PLOT_W / CHAR_PX)
CARD_LINES = 8           # the card and the values line hold at most this many lines each
HL_W = 40 * CHAR_PX      # the hovered block's note, right of the card (wrapped at 40)


@dataclass
class Stage:
    key: str
    title: str
    sub: str
    flows: str = ""     # what the arrow from this box to the next carries


def _fit(title: str, width: int = 19) -> str:
    """A long CamelCase class name (CPUAttentionBackendImpl) broken at the capital nearest its
    middle, so it fits a box at the same font size as the others."""
    t = html.escape(title)
    if len(title) <= width:
        return t
    caps = [k for k in range(1, len(title)) if title[k].isupper() and not title[k - 1].isupper()]
    if not caps:
        return t
    k = min(caps, key=lambda c: abs(c - len(title) / 2))
    return f"{html.escape(title[:k])}<br>{html.escape(title[k:])}"


def _lines(text: str) -> int:
    return text.count("<br>") + 1


class MetadataPathDiagram:
    """Diagram 3. `.figure`: the seven stages; `.show(records, i, frame=None)` puts the packet
    of step i on box `frame` (default: the box it is on; at first the DA hook's). `.next()` and
    `.prev()` (the ◀ ▶ buttons) move it one box within the step on screen."""

    def __init__(self, header: dict, highlight: Highlight | None = None) -> None:
        import ipywidgets as widgets

        self.header = header
        self.highlight = highlight
        self.impl, self.backend, self.n_attn = impl_of(header)
        self.stages = [
            Stage("scheduler", "SchedulerOutput", "which requests run, how many tokens each",
                  "req ids,<br>new blocks"),
            Stage("block_table", "BlockTable", "append_row(): stage<br>commit(): the row the "
                  "device reads", "full row,<br>seq_lens"),
            Stage("hook", "DA hook",
                  "wraps the builder's<br>.build() call:<br><b>the only edit</b>",
                  "copy,<br>compacted"),
            Stage("builder", "MetadataBuilder", f".build() → {self.backend} attention "
                  "metadata", "metadata"),
            Stage("context", "set_forward_context", "metadata visible to every layer's "
                  "forward", "context"),
            Stage("layer", "Attention layer", f"× {self.n_attn} layers, backend "
                  f"{self.backend}", "q, k, v"),
            Stage("impl", self.impl, "reads the row's blocks, writes KV at slot_mapping"),
        ]
        self.hook_frame = [s.key for s in self.stages].index("hook")
        self.records: list[StepRecord] = []
        self.step_i: int | None = None
        self.frame = self.hook_frame
        self.values: dict | None = None
        self.figure = self._build_figure()
        # Not a second player: two buttons that move the packet inside the step on screen.
        self.prev_button = widgets.Button(icon="chevron-left", tooltip="packet: previous box",
                                          layout=widgets.Layout(width="40px"))
        self.next_button = widgets.Button(icon="chevron-right", tooltip="packet: next box",
                                          layout=widgets.Layout(width="40px"))
        self.prev_button.on_click(lambda _b: self.prev())
        self.next_button.on_click(lambda _b: self.next())
        self.stepper_label = widgets.HTML()
        stepper = widgets.HBox([self.prev_button, self.next_button, self.stepper_label])
        stepper.add_class("da-packet-stepper")
        self.widget = widgets.VBox([self.figure, stepper])
        self.widget.add_class("da-metadata-path")
        self._label()
        if highlight is not None:
            highlight.observe(self._on_highlight, names="block")

    # ---- geometry ------------------------------------------------------------------------
    def _pos(self, k: int) -> tuple[float, float]:
        """Box k's centre x and top y: the first COLS boxes left to right, the rest right to
        left under them."""
        row, col = divmod(k, COLS)
        if row % 2:
            col = COLS - 1 - col
        return col * PITCH + BOX_W / 2, self._row_y[row]

    def _x(self, k: int) -> float:
        return self._pos(k)[0]

    def _packet_xy(self, k: int) -> tuple[float, float]:
        x, y = self._pos(k)
        return x, y          # on the box's top edge

    # ---- drawing -------------------------------------------------------------------------
    def _stage_boxes(self, shapes: list, notes: list) -> None:
        """One box per stage, its title and subtitle, and an arrow with what flows on."""
        n = len(self.stages)
        for k, st in enumerate(self.stages):
            x, y = self._pos(k)
            hook = st.key == "hook"
            shapes.append(dict(type="rect", x0=x - BOX_W / 2, x1=x + BOX_W / 2, y0=y,
                               y1=y + BOX_H, layer="below",
                               fillcolor="#fde8e8" if hook else BOX_FILL,
                               line=dict(color=HOOK_RED if hook else BOX_LINE,
                                         width=3 if hook else 1.2,
                                         dash="dash" if hook else None)))
            title = _fit(st.title)
            notes.append(dict(x=x, y=y + 7, yanchor="top", text=f"<b>{title}</b>",
                              showarrow=False,
                              font=dict(size=12, color=HOOK_RED if hook else "#222")))
            notes.append(dict(x=x, y=y + 12 + 16 * _lines(title), yanchor="top",
                              text=wrap_label(st.sub, SUB_CHARS), showarrow=False,
                              font=dict(size=FONT, color="#333")))
            if k < n - 1:
                self._arrow(k, st.flows, notes)

    def _arrow(self, k: int, flows: str, notes: list) -> None:
        (x, y), (x1, y1) = self._pos(k), self._pos(k + 1)
        if y1 != y:      # down to the next row
            a, b, label = (x, y + BOX_H), (x1, y1), dict(x=x + 8, y=(y + BOX_H + y1) / 2,
                                                         xanchor="left")
        else:
            d = 1 if x1 > x else -1
            a, b = (x + d * BOX_W / 2, y + BOX_H / 2), (x1 - d * BOX_W / 2, y1 + BOX_H / 2)
            label = dict(x=(x + x1) / 2, y=y + BOX_H / 2 - 4, yanchor="bottom")
        notes.append(dict(x=b[0], y=b[1], ax=a[0], ay=a[1], xref="x", yref="y", axref="x",
                          ayref="y", text="", showarrow=True, arrowhead=2, arrowwidth=1.5,
                          arrowcolor="#666"))
        notes.append(dict(**label, text=flows, showarrow=False,
                          font=dict(size=FONT, color="#555")))

    def _build_figure(self):
        import plotly.graph_objects as go

        from .figure import LiveFigure

        caption = textwrap.wrap(
            "The DA hook is the only edit. vLLM's real intercept point is the builder's build() "
            "call, not between append_row() and commit() as in the seed picture: on CPU the "
            "staging row is the device row (commit copies nothing), so editing it would "
            "corrupt the persistent block table, and slot_mapping is computed from the "
            "committed row and must keep the full row. The hook hands build() a copy with "
            "compacted rows and shortened seq_lens: only the reads change. Attention impl from "
            "the run's skeleton.", TEXT_CHARS)
        cap_h = 15 * len(caption)
        rows = -(-len(self.stages) // COLS)
        self._row_y = [cap_h + 52 + r * (BOX_H + ROW_GAP) for r in range(rows)]
        shapes, notes = [], []
        notes.append(dict(x=0, y=0, xanchor="left", yanchor="top", text="<br>".join(caption),
                          showarrow=False, align="left", font=dict(size=FONT, color="#555")))
        self._stage_boxes(shapes, notes)
        # The DA hook sits on the builder's build() call: a bracket ties the two boxes.
        (hb, top), (bb, _) = self._pos(self.hook_frame), self._pos(self.hook_frame + 1)
        shapes.append(dict(type="path", path=f"M {hb} {top} L {hb} {top - 16} L {bb} "
                           f"{top - 16} L {bb} {top}",
                           line=dict(color=HOOK_RED, width=1.5, dash="dot")))
        notes.append(dict(x=(hb + bb) / 2, y=top - 18, yanchor="bottom",
                          text="vLLM's real intercept point: the builder's build() call",
                          showarrow=False, font=dict(size=FONT, color=HOOK_RED)))
        self._write_path(shapes, notes)
        # The texts a step changes are shape labels in boxes that never move: a label is
        # redrawn alone, an annotation's new text redraws the whole figure (shapes.py).
        # The packet card: what the packet carries at its current box (filled by show()).
        bottom = self._row_y[-1] + BOX_H
        lines_h = 15 * CARD_LINES + 8
        self._card = len(shapes)
        shapes.append(text_shape("card", 0, PLOT_W - HL_W - 10, bottom + 22,
                                 bottom + 22 + lines_h, "(no step shown yet)", xref="x",
                                 yref="y", fill="#fff4ec", border=PACKET, pad=5))
        # The step's values, all of them, under the card (room for CARD_LINES lines each).
        values_y = bottom + 22 + 15 * CARD_LINES + 16
        self._values_note = len(shapes)
        shapes.append(text_shape("values", 0, PLOT_W, values_y, values_y + lines_h, xref="x",
                                 yref="y", pad=0))
        self._hl_note = len(shapes)        # the hovered block, right of the card
        shapes.append(text_shape("highlight", PLOT_W - HL_W, PLOT_W, bottom + 22,
                                 bottom + 22 + lines_h, xref="x", yref="y", color="#111",
                                 position="top right", pad=0))
        x, y = self._packet_xy(self.frame)
        packet = go.Scatter(x=[x], y=[y], mode="markers",
                            marker=dict(size=22, color=PACKET, symbol="circle",
                                        line=dict(color="white", width=2)),
                            hoverinfo="text", hovertext="(no step shown yet)",
                            showlegend=False, name="packet")
        plot_h = values_y + 15 * CARD_LINES + 8
        fig = LiveFigure(data=[packet])
        prov = self.header.get("provenance") or {}
        runner = str(prov.get("runner", "?")).split(".")[-1]
        fig.update_layout(
            title=dict(text=f"<b>The metadata path</b> — {prov.get('vllm', '?')}, runner "
                            f"{runner}", x=0.01, y=1 - 10 / (plot_h + 50), yanchor="top",
                       font=dict(size=14)),
            shapes=shapes, annotations=notes, width=FIG_W, height=plot_h + 50,
            margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white", paper_bgcolor="white",
            xaxis=dict(range=[0, PLOT_W], visible=False, fixedrange=True),
            yaxis=dict(range=[plot_h, 0], visible=False, fixedrange=True),
            hoverlabel=dict(align="left", font=dict(size=FONT)))
        return fig

    def _write_path(self, shapes: list, notes: list) -> None:
        """The write path: slot_mapping keeps the full row; the hook never touches it."""
        keys = [s.key for s in self.stages]
        (bt, y0), (im, y1) = self._pos(keys.index("block_table")), self._pos(keys.index("impl"))
        xl = min(bt, im) - BOX_W / 2 + 18
        shapes.append(dict(type="path", path=f"M {xl} {y0 + BOX_H} L {xl} {y1}",
                           line=dict(color=WRITE, width=2, dash="dot")))
        # Beside the impl box, in the free corner of the second row.
        text = wrap_label("slot_mapping: computed from the full committed row, passed through "
                          "unchanged → the KV <b>writes</b> land where they always did",
                          int((PITCH - 20) / CHAR_PX))
        notes.append(dict(x=0, y=y1 + 2, xanchor="left", yanchor="top", text=text,
                          showarrow=False, align="left", font=dict(size=FONT, color=WRITE)))

    # ---- one step ------------------------------------------------------------------------
    def card_text(self, v: dict, frame: int) -> str:
        """The packet's values at box `frame`, as the card under the path shows them."""
        st = self.stages[frame]
        return card_text(v, st.key, st.title, self.impl, self.n_attn)

    def show(self, records: list[StepRecord], i: int, frame: int | None = None) -> None:
        """Show step i with the packet on box `frame` (default: the box it is on)."""
        self.records = records
        self.step_i = i
        self.values = step_values(records[i])
        self._draw(self.frame if frame is None else frame, full=True)

    def next(self) -> None:
        """The packet one box on, within the step on screen (after the last box: the first)."""
        if self.values is not None:
            self._draw(self.frame + 1, full=False)

    def prev(self) -> None:
        if self.values is not None:
            self._draw(self.frame - 1, full=False)

    def _label(self) -> None:
        st, n = self.stages[self.frame], len(self.stages)
        where = "" if self.values is None else f"step {self.values['step']}: "
        self.stepper_label.value = (
            f"<span style='font-size:13px'>{where}packet on box {self.frame + 1} of {n}, "
            f"<b>{html.escape(st.title)}</b> — ◀ ▶ follow it through this step "
            "(the player above moves between steps)</span>")

    def _draw(self, frame: int, full: bool) -> None:
        self.frame = frame % len(self.stages)
        v = self.values
        x, y = self._packet_xy(self.frame)
        with self.figure.batch_update():
            tr = self.figure.data[0]
            tr.x, tr.y = [x], [y]
            # one string, not a list of one: plotly.js redraws the whole figure when an
            # array-valued attribute changes, a scalar one restyles the marker alone
            tr.hovertext = hover_text(v, self.impl)
            self.figure.layout.shapes[self._card].label.text = self.card_text(v, self.frame)
            if full:
                self.figure.layout.shapes[self._values_note].label.text = values_text(
                    v, self.impl, TEXT_CHARS)
                self._on_highlight()
        self._label()

    # ---- cross-link: the hovered physical block --------------------------------------------
    def _on_highlight(self, _change=None) -> None:
        b = None if self.highlight is None else self.highlight.block
        text = ""
        if b is not None and self.values is not None:
            parts = []
            for r in self.values["requests"]:
                if b in r["staged"]:
                    logical = r["staged"].index(b)
                    parts.append(f"{r['req']}: logical block {logical}, "
                                 + ("read by the kernel" if b in r["built"]
                                    else "<b>hidden</b> from the kernel"))
            text = wrap_label(f"physical block {b}: " + ("; ".join(parts) if parts
                                                         else "not in any row this step"), 40)
        self.figure.layout.shapes[self._hl_note].label.text = text
