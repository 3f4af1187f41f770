"""Diagram 4 — the DA hook, animated.

Per engine step, for one request: the response stream so far (trapped tags marked), the tag
buffer the hook's state machine held when it built this step's metadata (it flashes on the step
a tag was trapped at its '>'), three lamps for the mode, the three layers a step passes through
(model code, metadata path + DA hook, kernel) with this step's numbers, the request's row of
logical blocks coloured by DA region with the masked ones grey, and blocks read per step.

With a live Lab, "steer it yourself" (steering.py): a button makes the director write a tag
into the request's own output stream from the engine's next token; the hook then traps it like a
tag the model wrote (Lab.steer). Buttons that can't work now are disabled, with the reason shown.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import plotly.graph_objects as go

from da_lab.core.record import RequestStep, StepRecord
from da_lab.core.tags import Directive, Mode

from . import runs as rn
from .figure import LiveFigure
from .highlight import Highlight
from .rows import HL, MASKED, NONE, Pusher, RequestView, phys_row
from .series import Series
from .shapes import text_shape
from .source import first_request, request_in
from .steering import SteeringPanel

_W = 920
_ROW_PLOT_W, _ROW_PLOT_H = _W - 20, 96 - 24 - 6     # the row's plot area (margins below)
_LAMP_ON = {"global": "#2a9d8f", "focus": "#1f6fb4", "local": "#e76f51"}
_BAND_ACTIVE = "#fff3c4"     # the band where this step's difference is made


def _visible(text: str) -> str:
    """HTML for stream text: control characters become their visible Unicode pictures (the
    random-weight model writes some), everything else escaped."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\n":
            out.append("↵<br>")
        elif o < 0x20:
            out.append(chr(0x2400 + o))
        elif o == 0x7F:
            out.append("␡")
        else:
            out.append(html.escape(ch))
    return "".join(out)


def _chart_ranges(steps: list[int], k: int, total: list[int], chunk: int = 8) -> dict:
    """Axis ranges for the blocks-read chart: x from the first step to the k-th (the step on
    screen: the chart ends there), y up to the most blocks any step recorded so far has."""
    if not k:
        return {}
    y1 = chunk * -(-int(max(total) * 1.1 + 1) // chunk)
    return {"xaxis.range": [steps[0] - 0.5, steps[k - 1] + 0.5], "yaxis.range": [0, y1]}


def _short(region: str) -> str:
    return {"scaffold": "S", "prompt": "P", "tail": "Q", "response": "R"}.get(region, region)


class DAHookDiagram:
    name = "dahook"

    def __init__(self, header: dict, highlight: Highlight | None = None,
                 req: str | None = None, lab=None) -> None:
        prov = header.get("provenance") or {}
        self.header = header
        self.block_size = int(prov["block_size"])
        self.num_blocks = int(prov["num_blocks"])
        self.backend = str(prov.get("backend") or "attention backend")
        self.highlight = highlight if highlight is not None else Highlight()
        self.req = req
        self.lab = lab
        self.view: RequestView | None = None
        self.lit: str | None = None          # the lamp that is on: "global" | "focus" | "local"
        self._series: Series | None = None
        self._records: list | None = None
        self._i: int | None = None
        self._phys: list = []
        self._cell = 40.0                    # pixels per block
        self._row_key: tuple | None = None   # what the row's runs were drawn from
        self._row_upd: dict = {}
        self._title = ""                     # the row's title, a shape's label

        self.title = widgets.HTML(
            f"<b>The DA hook</b> — {html.escape(str(prov.get('vllm', '')))} on "
            f"{html.escape(str(prov.get('device', '')))}, "
            f"{html.escape(str(prov.get('runner', '')).rsplit('.', 1)[-1])}, "
            f"{html.escape(self.backend)}")
        self.lamps = {}
        for m in Mode:
            w = widgets.HTML(self._lamp_html(m.value, False))
            w.add_class("da-lamp")
            w.add_class(f"da-lamp-{m.value}")
            self.lamps[m.value] = w
        self.tag_buffer = widgets.HTML(self._buffer_html("", None))
        self.tag_buffer.add_class("da-tag-buffer")
        self.stream = widgets.HTML()
        self.stream.add_class("da-stream")
        self.bands = {k: widgets.HTML() for k in ("model", "hook", "kernel")}
        for k, w in self.bands.items():
            w.add_class(f"da-band-{k}")
        self.blocks_read = widgets.Label("blocks read: –")
        self.blocks_read.add_class("da-blocks-read")
        self.key = widgets.HTML()
        self.figure = self._build_row()
        self.chart = self._build_chart()
        self.push_row, self.push_chart = Pusher(self.figure), Pusher(self.chart)
        self.chart_box = widgets.Box([self.chart])
        self.chart_box.add_class("da-blocks-chart")
        self.steering = SteeringPanel(lab, header)
        self.steer_buttons = self.steering.buttons
        self.chunk_picker = self.steering.chunk_picker
        self.steer_status = self.steering.status
        self.steer_box = self.steering.widget
        self.widget = widgets.VBox([
            self.title,
            widgets.HBox([*self.lamps.values(), self.tag_buffer]),
            self.stream, self.steering.note,
            widgets.VBox(list(self.bands.values())),
            self.figure, self.key, self.blocks_read, self.chart_box, self.steer_box])
        self.widget.add_class("da-dahook")
        self.highlight.observe(self._on_highlight, "block")

    # ---- static parts ----------------------------------------------------------------------
    def _build_row(self) -> go.FigureWidget:
        """The request's row: runs of alike blocks as bars (runs.py), their labels, and a
        transparent hover layer naming each block and its physical slot."""
        fig = LiveFigure(layout=dict(
            width=_W, height=96, margin=dict(l=10, r=10, t=24, b=6), showlegend=False,
            plot_bgcolor="white", hovermode="closest", shapes=[], barmode="overlay",
            xaxis=dict(visible=False, range=[-0.5, 0.5], fixedrange=True),
            yaxis=dict(visible=False, range=[-0.6, 0.6], fixedrange=True)))
        fig.add_bar(**rn.bar_layer("row runs"))
        fig.add_scatter(name="labels", x=[], y=[], mode="text", text=[], hoverinfo="skip",
                        textfont=dict(size=9, color=[]))
        fig.add_heatmap(**rn.hover_layer("row", 0, "logical %{x} %{text}"))
        fig.data[2].on_hover(self._hovered)
        return fig

    def _build_chart(self) -> go.FigureWidget:
        # The chart holds every step recorded so far and its x axis ends at the step on
        # screen: a step that brings no new record (a replay, or scrubbing back) moves the
        # range only, which plotly.js redraws without recalculating the figure; new data (a
        # live step) recalculates it. The key is in the title, not a legend, and tick labels
        # are not measured for overflow: less to redraw either way.
        axis = dict(showgrid=True, gridcolor="#eee", ticklabeloverflow="allow",
                    automargin=False)
        key = (" <span style='color:#1f6fb4'>—●—</span> blocks read · <span style='color:#888'>"
               "- - -</span> blocks total, up to the step on screen")
        fig = LiveFigure(layout=dict(
            width=_W, height=220, margin=dict(l=50, r=10, t=30, b=40), plot_bgcolor="white",
            showlegend=False, title=dict(text="blocks read per step:" + key,
                                         font=dict(size=12), x=0.01, xanchor="left"),
            xaxis=dict(title="engine step", range=[-0.5, 0.5], **axis),
            yaxis=dict(title="blocks", range=[0, 1], **axis)))
        fig.add_scatter(name="blocks read", x=[], y=[], mode="lines+markers",
                        line=dict(color="#1f6fb4", shape="hv"), marker=dict(size=4))
        fig.add_scatter(name="blocks total", x=[], y=[], mode="lines",
                        line=dict(color="#888", dash="dash", shape="hv"))
        return fig

    def _bind(self, records: list, req: str, n_min: int) -> None:
        view = self.view = RequestView.reuse(self.view, records, req, self.block_size,
                                             self.num_blocks, n_min)
        n = view.n_slots
        self._cell = min((_W - 20) / n, 40)
        self.push_row({}, {"xaxis.range": [-0.5, n - 0.5]})
        lay = view.layout
        chunks = f"C1–C{lay.n_chunks}" if lay is not None and lay.n_chunks else "prompt"
        seen = dict(zip(view.regions, view.colors, strict=False))
        sw = '<span style="color:{}">■</span>'.format
        chunk_sw = "".join(sw(c) for r, c in seen.items() if r.startswith("C"))
        self.key.value = (
            f"<span style='font-size:11px'>"
            f"{sw(seen.get('scaffold', seen.get('prompt', NONE)))} S scaffold + sink · "
            f"{chunk_sw} chunks {chunks} · {sw(seen.get('tail', NONE))} Q question (scaffold "
            f"tail) · {sw(seen.get('response', NONE))} R response · {sw(MASKED)} masked "
            f"(hidden from the kernel this step)</span>")
        self.steering.bind(records, req, lay)
        if self._series is None or self._series.req != req or self._series.records is not records:
            self._series = Series(records, req)

    # ---- per step --------------------------------------------------------------------------
    def show(self, records: list, i: int) -> None:
        rec = records[i]
        if self.req is None:
            self.req = first_request(records[: i + 1])
            if self.req is None and self.lab is not None and self.lab.requests:
                self.req = next(iter(self.lab.requests))
        if self.req is None:
            return
        h = request_in(rec, self.req)
        staged = phys_row(h) if h else []
        if (self.view is None or self.view.req != self.req or len(staged) > self.view.n_slots
                or self._series is None or self._series.records is not records):
            self._bind(records, self.req, len(staged))
        self._records, self._i = records, i
        s = self._series
        s.scan()
        k = s.upto(i)
        hooked = h is not None and h.hooked

        # the stream, the buffer, the lamps
        prev_end = s.text_end[i - 1] if i > 0 else 0
        buf = h.tag_buffer if hooked else ""
        trapped = [e for e in (h.events if hooked else ()) if e.get("kind") == "tag_trapped"]
        self.stream.value = self._stream_html("".join(s.parts[: i + 1]), s, i, prev_end, buf)
        self.tag_buffer.value = self._buffer_html(buf, trapped[-1]["text"] if trapped else None)
        if trapped:
            self.tag_buffer.add_class("da-flash")
        else:
            self.tag_buffer.remove_class("da-flash")
        mode = h.mode if hooked else None
        if mode != self.lit:
            for m, w in self.lamps.items():
                w.value = self._lamp_html(m, m == mode)
                (w.add_class if m == mode else w.remove_class)("da-lamp-on")
            self.lit = mode

        # the three bands and the blocks-read label
        self._bands(rec, h if hooked else None)
        n_read = h.blocks_read if hooked else None
        self.blocks_read.value = f"blocks read: {n_read if n_read is not None else '–'}"

        # the row of logical blocks
        upd, lay = self._row(rec, h if hooked else None, staged)
        self.push_row(upd, lay)
        # copies: the Series appends to its lists, the Pusher compares with what it sent
        self.push_chart({0: {"x": list(s.steps), "y": list(s.read)},
                         1: {"x": list(s.steps), "y": list(s.total)}},
                        _chart_ranges(s.steps, k, s.total))
        self.steering.refresh(records, i)

    def _stream_html(self, text: str, s: Series, i: int, prev_end: int, buf: str) -> str:
        marks = [(a, b, kind) for k, a, b, kind in s.tags if k <= i and b > a]
        # the tag still being written: the hook's buffer is the end of the text it had seen
        if buf and text[:prev_end].endswith(buf):
            marks.append((prev_end - len(buf), prev_end, "pending"))
        marks.sort()
        out, at = [], 0
        style = {"tag_trapped": "background:#ffe066;border-radius:3px",
                 "malformed_tag": "background:#ffd6d6;text-decoration:line-through",
                 "pending": "border-bottom:2px dotted #ff5400"}
        for a, b, kind in marks:
            if a < at:
                continue
            out.append(_visible(text[at:a]))
            out.append(f'<span class="da-{kind}" style="{style[kind]}">'
                       f"{_visible(text[a:b])}</span>")
            at = b
        out.append(_visible(text[at:]))
        return ('<div style="font-family:monospace;white-space:pre-wrap;border:1px solid #ddd;'
                'padding:4px 6px;max-height:7em;overflow:auto">'
                '<span style="color:#888;font-size:11px">'
                f"response of {html.escape(self.req or '')} after this step:</span><br>"
                + "".join(out) + "</div>")

    @staticmethod
    def _buffer_html(buf: str, trapped: str | None) -> str:
        if trapped is not None:
            body = (f'<span style="background:#ffe066;padding:0 4px">{_visible(trapped)}</span>'
                    " trapped at '&gt;'")
            box = "border:2px solid #ff5400;background:#fff7d6"
        else:
            body = _visible(buf) if buf else '<span style="color:#aaa">(empty)</span>'
            box = "border:1px solid #999"
        return (f'<div style="{box};padding:4px 8px;margin-left:12px;font-family:monospace;'
                'min-width:16em"><span style="color:#888;font-size:11px">tag buffer (hook, '
                'before this '
                f"step's token)</span><br>{body}</div>")

    @staticmethod
    def _lamp_html(mode: str, on: bool) -> str:
        c = _LAMP_ON[mode]
        style = (f"background:{c};color:white;box-shadow:0 0 10px {c}" if on
                 else "background:#f0f0f0;color:#999")
        return (f'<div style="{style};border-radius:12px;padding:3px 12px;margin:6px 4px;'
                f'font-weight:bold;font-family:sans-serif">{mode.upper()}</div>')

    def _bands(self, rec: StepRecord, h: RequestStep | None) -> None:
        def band(key, label, detail, active=False):
            bg = _BAND_ACTIVE if active else "#f7f7f7"
            self.bands[key].value = (
                f'<div style="background:{bg};border-left:4px solid #999;padding:2px 8px;'
                f'margin:1px 0;font-family:sans-serif"><b>{html.escape(label)}</b>'
                f' <span style="color:#444">{detail}</span></div>')

        kernel = f"kernel ({self.backend})"
        if h is None:
            msg = f"step {rec.step}: {html.escape(str(self.req))} not scheduled"
            band("model", "model code (untouched)", msg)
            band("hook", "metadata path + DA hook", "")
            band("kernel", kernel, "")
            return
        seq, q, attn = h.seq_len, h.query_len, h.attn_seq_len
        total, read = h.blocks_total, h.blocks_read
        try:
            directive = str(Directive.from_dict(h.directive))
        except (ValueError, TypeError, KeyError):
            directive = str(h.mode)
        band("model", "model code (untouched)",
             f"forward of {q} new token{'s' if q != 1 else ''} at positions {seq - q}…{seq - 1};"
             f" the model never sees DA")
        band("hook", "metadata path + DA hook",
             f"directive <b>{html.escape(directive)}</b>: staged row {total} blocks → "
             f"builder row {read} blocks; seq_len {seq} → {attn}; slot mapping keeps the full "
             f"row", active=read < total)
        band("kernel", kernel, f"reads {read} of {total} blocks ({attn} tokens)")

    def _row(self, rec: StepRecord, h: RequestStep | None,
             staged: list[int]) -> tuple[dict, dict]:
        """{trace index: data} and layout changes for the row of logical blocks."""
        v, n = self.view, self.view.n_slots
        if h is None:
            self._phys, self._row_key = [], None
            return ({0: rn.run_bars([], 0, 0, self._cell), 1: rn.labels([], self._cell),
                     2: rn.hover_data([], n)},
                    {"shapes": self._shapes(f"{html.escape(v.req)}: not scheduled this step")})
        total, ns = h.blocks_total, len(staged)
        kept_list = h.kept.tolist()
        kept = set(kept_list)
        # No step number in the title: the player shows it, and a figure sent nothing new is
        # not redrawn (each plotly update redraws the whole figure)
        title = (f"{html.escape(v.req)}'s row: "
                 f"{len(kept & set(range(total)))} of {total} logical blocks read")
        # the same blocks as last step: the runs and hover data are what was sent
        key = (v, self._cell, total, staged, kept_list)
        if key == self._row_key:
            return self._row_upd, {"shapes": self._shapes(title)}
        self._row_key = key
        each = self._cell >= rn.LABEL_PX
        keys = [(v.colors[j] if j in kept else MASKED, j if each else 0) for j in range(total)]
        runs = []
        for a, b in rn.spans(keys):
            first, last = _short(v.regions[a]), _short(v.regions[b - 1])
            runs.append(rn.Run(a, b, keys[a][0], v.inks[a] if a in kept else "#888",
                               first if first == last else f"{first}–{last}"))
        self._phys = staged[: min(ns, total)]
        hover = [f"({v.regions[j]}) → physical {staged[j] if j < ns else '–'}: "
                 f"{'read' if j in kept else 'masked, not read'}" for j in range(total)]
        self._row_upd = {0: rn.run_bars(runs, 0, 0.44, self._cell),
                         1: rn.labels([(runs, 0)], self._cell), 2: rn.hover_data(hover, n)}
        return self._row_upd, {"shapes": self._shapes(title)}

    def _shapes(self, title: str) -> list[dict]:
        """The row's title (a label in a box that never moves: shapes.py), then the marks."""
        self._title = title
        return [text_shape("title", 0.01 * _W / _ROW_PLOT_W - 10 / _ROW_PLOT_W, 1,
                           1 + 2 / _ROW_PLOT_H, 1 + 22 / _ROW_PLOT_H, title, size=12,
                           position="middle left", pad=0), *self._marks()]

    def _marks(self) -> list[dict]:
        """An outline around the highlighted physical block, wherever the row holds it."""
        hl = self.highlight.block
        if hl is None:
            return []
        return rn.mark_runs([HL if p == hl else None for p in self._phys], 0, 0.5, "row mark")

    # ---- the shared highlight --------------------------------------------------------------
    def _hovered(self, _trace, points, _state) -> None:
        j = rn.point_slot(points)
        if j is not None and 0 <= j < len(self._phys):
            self.highlight.set(self._phys[j], self.name)

    def _on_highlight(self, _change=None) -> None:
        if self._records is not None and self.view is not None:
            self.push_row({}, {"shapes": self._shapes(self._title)})
