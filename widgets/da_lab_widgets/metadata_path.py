"""Diagram 3: the metadata path — how one step's attention metadata reaches the kernel.

Left to right: SchedulerOutput -> BlockTable (append_row, commit) -> DA hook at
MetadataBuilder.build -> MetadataBuilder -> set_forward_context -> Attention layer -> the impl
the skeleton says was loaded (CPUAttentionBackendImpl on CPU, FlashAttentionImpl on GPU...).
A packet (marker) travels the path, one box per frame, carrying the step's real values: what
the scheduler asked for, the staged rows, what the hook changed, the metadata the builder got.
Every value comes from the step record; the stage names are vLLM's.

Why the hook sits at the builder's build() call and not between append_row() and commit(), as
the seed picture drew it: on CPU the staging row *is* the device row (commit copies nothing),
so editing it would corrupt the persistent block table; and slot_mapping, computed from the
committed row, must keep the full row so KV writes land where they always do. The hook hands
build() a copy with compacted rows and shortened seq_lens: only the reads change.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from da_lab.core.record import StepRecord

from .figure import FigureWidget
from .highlight import Highlight
from .rows import kernel_row, phys_row

HOOK_RED = "#d62828"
PACKET = "#ff5400"
BOX_FILL = "#e4e4e4"
BOX_LINE = "#8a8a8a"
BOX_W, BOX_H, PITCH = 1.38, 1.3, 1.95     # data units; the path runs along y = 0
N_SHOW = 6                              # list items shown before "…"
PACKET_Y = BOX_H / 2 + 0.1           # the packet rides just above the boxes


@dataclass
class Stage:
    key: str
    title: str
    sub: str
    flows: str = ""     # what the arrow from this box to the next carries


def _short(xs, n: int = N_SHOW) -> str:
    if xs is None:
        return "—"
    xs = list(xs)
    return (str(xs) if len(xs) <= n
            else "[" + ", ".join(map(str, xs[:n])) + f", … +{len(xs) - n}]")


def _fit(title: str, width: int = 18) -> str:
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


def _impl_of(header: dict) -> tuple[str, str, int]:
    """(impl class, backend, number of attention layers) from the skeleton."""
    attn = [s for s in (header.get("skeleton") or {}).get("slots") or []
            if s.get("slot") == "attention"]
    impls = sorted({s.get("impl") for s in attn if s.get("impl")})
    backends = sorted({s.get("backend") for s in attn if s.get("backend")})
    backend = ", ".join(backends) or (header.get("provenance") or {}).get("backend") or "?"
    return ", ".join(impls) or "?", backend, len(attn)


def _lst(a) -> list:
    return [] if a is None else a.tolist()


def step_values(rec: StepRecord) -> dict:
    """The step's real values the packet carries, from one step record."""
    md = rec.metadata
    kernel_seq = _lst(md.seq_lens) if md is not None else []
    full_seq = list(kernel_seq)
    reqs = []
    for h in rec.requests:
        if not h.hooked:
            continue     # not built this step (e.g. only its output arrived)
        if h.row < len(full_seq):
            full_seq[h.row] = h.seq_len    # the hook's view: the length before compaction
        staged, built = phys_row(h), kernel_row(h)
        reqs.append({"req": h.req, "row": h.row, "mode": h.mode, "seq_len": h.seq_len,
                     "kernel_seq_len": h.built_seq_len if h.built_seq_len is not None
                     else h.attn_seq_len,
                     "query_len": h.query_len, "staged": staged, "built": built,
                     "blocks_staged": len(staged) or h.blocks_total,
                     "blocks_read": h.blocks_read, "kept_logical": _lst(h.kept)})
    sm = _lst(md.slot_mapping) if md is not None else []
    return {"step": rec.step, "scheduled": rec.scheduled,
            "query_start_loc": _lst(md.query_start_loc) if md is not None else None,
            "seq_lens_full": full_seq, "seq_lens_kernel": kernel_seq,
            "max_seq_len": md.max_seq_len if md is not None else None,
            "block_table_shape": list(md.block_table_shape) if md is not None else None,
            "slot_mapping": sm, "n_slots": len(sm),
            "backend": md.backend if md is not None else None, "requests": reqs,
            "has_metadata": md is not None}


class MetadataPathDiagram:
    """Diagram 3. `.figure`: the seven stages; `.show(records, i, frame=None)` puts the packet
    of step i on box `frame` (default: box 0 for a new step, the next box when the same step is
    shown again — one step is one full pass). `.play` animates the pass in the notebook."""

    def __init__(self, header: dict, highlight: Highlight | None = None) -> None:
        import ipywidgets as widgets

        self.header = header
        self.highlight = highlight
        self.impl, self.backend, self.n_attn = _impl_of(header)
        self.stages = [
            Stage("scheduler", "SchedulerOutput", "which requests run,<br>how many tokens each",
                  "req ids,<br>new blocks"),
            Stage("block_table", "BlockTable", "append_row(): stage<br>commit(): the row "
                  "the<br>device reads", "full row,<br>seq_lens"),
            Stage("hook", "DA hook", "wraps MetadataBuilder<br>.build() — <b>the only "
                  "edit</b>", "copy:<br>compacted"),
            Stage("builder", "MetadataBuilder", f".build() → {self.backend}<br>attention "
                  "metadata", "metadata"),
            Stage("context", "set_forward_context", "metadata visible to<br>every layer's "
                  "forward", "context"),
            Stage("layer", "Attention layer", f"× {self.n_attn} layers, backend<br>"
                  f"{self.backend}", "q, k, v"),
            Stage("impl", self.impl, "reads the row's blocks,<br>writes KV at<br>"
                  "slot_mapping"),
        ]
        self.hook_frame = [s.key for s in self.stages].index("hook")
        self.records: list[StepRecord] = []
        self.step_i: int | None = None
        self.frame = 0
        self.values: dict | None = None
        self.figure = self._build_figure()
        # Play animates one pass (frames 0..n-1) of the step on screen.
        self.play = widgets.Play(value=0, min=0, max=len(self.stages) - 1, interval=700,
                                 description="packet", repeat=False)
        self.play.observe(lambda ch: self._go(ch["new"]), names="value")
        self.widget = widgets.VBox([self.figure, widgets.HBox(
            [widgets.Label("packet, one box per frame:"), self.play])])
        if highlight is not None:
            highlight.observe(self._on_highlight, names="block")

    # ---- drawing -------------------------------------------------------------------------
    def _x(self, k: int) -> float:
        return k * PITCH

    def _stage_boxes(self, shapes: list, notes: list) -> None:
        """One box per stage, its title and subtitle, and an arrow with what flows on."""
        n = len(self.stages)
        for k, st in enumerate(self.stages):
            x = self._x(k)
            hook = st.key == "hook"
            shapes.append(dict(type="rect", x0=x - BOX_W / 2, x1=x + BOX_W / 2, y0=-BOX_H / 2,
                               y1=BOX_H / 2, layer="below",
                               fillcolor="#fde8e8" if hook else BOX_FILL,
                               line=dict(color=HOOK_RED if hook else BOX_LINE,
                                         width=3 if hook else 1.2,
                                         dash="dash" if hook else None)))
            notes.append(dict(x=x, y=BOX_H / 2 - 0.08, yanchor="top",
                              text=f"<b>{_fit(st.title)}</b>",
                              showarrow=False, font=dict(size=12,
                                                         color=HOOK_RED if hook else "#222")))
            notes.append(dict(x=x, y=0.1, yanchor="top", text=st.sub, showarrow=False,
                              font=dict(size=10, color="#333")))
            if k < n - 1:
                x1 = self._x(k + 1) - BOX_W / 2
                notes.append(dict(x=x1, y=0, ax=x + BOX_W / 2, ay=0, xref="x", yref="y",
                                  axref="x", ayref="y", text="", showarrow=True, arrowhead=2,
                                  arrowwidth=1.5, arrowcolor="#666"))
                notes.append(dict(x=(x + BOX_W / 2 + x1) / 2, y=0.06, yanchor="bottom",
                                  text=st.flows, showarrow=False,
                                  font=dict(size=9, color="#666")))

    def _build_figure(self):
        import plotly.graph_objects as go

        shapes, notes = [], []
        n = len(self.stages)
        self._stage_boxes(shapes, notes)
        # The DA hook sits on the builder's build() call: a bracket ties the two boxes.
        hb, bb = self._x(self.hook_frame), self._x(self.hook_frame + 1)
        shapes.append(dict(type="path", path=f"M {hb} {BOX_H / 2} L {hb} {BOX_H / 2 + 0.25} "
                           f"L {bb} {BOX_H / 2 + 0.25} L {bb} {BOX_H / 2}",
                           line=dict(color=HOOK_RED, width=1.5, dash="dot")))
        notes.append(dict(x=(hb + bb) / 2, y=BOX_H / 2 + 0.25, yanchor="bottom",
                          text="vLLM's real intercept point: the builder's build() call",
                          showarrow=False, font=dict(size=10, color=HOOK_RED)))
        # The write path: slot_mapping keeps the full row; the hook never touches it.
        bt, im = self._x(1), self._x(n - 1)
        ylow = -BOX_H / 2 - 0.35
        shapes.append(dict(type="path", path=f"M {bt} {-BOX_H / 2} L {bt} {ylow} L {im} "
                           f"{ylow} L {im} {-BOX_H / 2}",
                           line=dict(color="#2a9d8f", width=1.5, dash="dot")))
        notes.append(dict(x=(bt + im) / 2, y=ylow, yanchor="top",
                          text="slot_mapping: computed from the full committed row, passed "
                               "through unchanged → the KV <b>writes</b> land where they always "
                               "did", showarrow=False, font=dict(size=10, color="#2a9d8f")))
        # The packet card: what the packet carries at its current box (filled by show()).
        self._card = len(notes)
        notes.append(dict(x=0, y=-BOX_H / 2 - 0.75, xanchor="center", yanchor="top",
                          text="(no step shown yet)", showarrow=False, align="left",
                          bgcolor="#fff4ec", bordercolor=PACKET, borderwidth=1,
                          font=dict(size=11, color="#222")))
        # The step's values, all of them, under the path.
        self._values_note = len(notes)
        notes.append(dict(x=0, y=0, xref="paper", yref="paper", xanchor="left",
                          yanchor="top", yshift=-8, text="", showarrow=False, align="left",
                          font=dict(size=11, color="#222")))
        self._hl_note = len(notes)
        notes.append(dict(x=1, y=1, xref="paper", yref="paper", xanchor="right",
                          yanchor="bottom", text="", showarrow=False, align="right",
                          font=dict(size=11, color="#111")))
        caption = (
            "The DA hook is the only edit. vLLM's real intercept point is the builder's build() "
            "call, not between append_row() and commit() as in the seed picture: on CPU the "
            "staging row <i>is</i> the device row (commit copies nothing), so editing it would "
            "corrupt<br>the persistent block table, and slot_mapping is computed from the "
            "committed row and must keep the full row. The hook hands build() a copy with "
            "compacted rows and shortened seq_lens: only the reads change. "
            "Attention impl from the run's skeleton.")
        notes.append(dict(x=0, y=1, xref="paper", yref="paper", xanchor="left",
                          yanchor="bottom", yshift=22, text=caption, showarrow=False,
                          align="left", font=dict(size=10, color="#555")))
        packet = go.Scatter(x=[0], y=[PACKET_Y], mode="markers+text", text=["●"],
                            textfont=dict(size=1, color="rgba(0,0,0,0)"),
                            marker=dict(size=24, color=PACKET, symbol="circle",
                                        line=dict(color="white", width=2)),
                            hoverinfo="text", hovertext=["(no step shown yet)"],
                            showlegend=False, name="packet")
        x_lo, x_hi = -BOX_W / 2 - 0.1, self._x(n - 1) + BOX_W / 2 + 0.1
        fig = FigureWidget(data=[packet])
        prov = self.header.get("provenance") or {}
        runner = str(prov.get("runner", "?")).split(".")[-1]
        fig.update_layout(
            title=dict(text=f"<b>The metadata path</b> — "
                            f"{prov.get('vllm', '?')}, runner {runner}",
                       x=0.01, y=0.98, font=dict(size=14)),
            shapes=shapes, annotations=notes, width=1250, height=530,
            margin=dict(l=10, r=10, t=110, b=110), plot_bgcolor="white",
            paper_bgcolor="white",
            xaxis=dict(range=[x_lo, x_hi], visible=False, fixedrange=True),
            yaxis=dict(range=[-BOX_H / 2 - 1.95, BOX_H / 2 + 0.55], visible=False,
                       fixedrange=True),
            hoverlabel=dict(align="left", font=dict(size=11)))
        return fig

    # ---- what the packet carries ---------------------------------------------------------
    def card_text(self, v: dict, frame: int) -> str:
        """The packet's values at box `frame`, as the card under the path shows them."""
        st = self.stages[frame]
        head = f"<b>step {v['step']} · {html.escape(st.title)}</b><br>"
        if not v["has_metadata"]:
            return head + "no attention metadata recorded this step"
        reqs = v["requests"]
        if st.key == "scheduler":
            body = "<br>".join(f"{s['req']}: {s['query_len']} token"
                               f"{'s' if s['query_len'] != 1 else ''} scheduled"
                               for s in v["scheduled"]) or "nothing scheduled"
        elif st.key == "block_table":
            body = "<br>".join(f"{r['req']}: staged row {r['blocks_staged']} blocks "
                               f"{_short(r['staged'])}<br>seq_len {r['seq_len']}" for r in reqs)
        elif st.key == "hook":
            body = "<br>".join(
                f"{r['req']} ({r['mode']}): seq_len {r['seq_len']} → {r['kernel_seq_len']}<br>"
                f"row {r['blocks_staged']} → {r['blocks_read']} blocks {_short(r['built'])}"
                + ("  (unchanged)" if r["seq_len"] == r["kernel_seq_len"] else "")
                for r in reqs)
        elif st.key == "builder":
            body = (f"query_start_loc {_short(v['query_start_loc'])}<br>seq_lens "
                    f"{_short(v['seq_lens_kernel'])} (full: {_short(v['seq_lens_full'])})<br>"
                    f"block_table {tuple(v['block_table_shape'] or ())}, max_seq_len "
                    f"{v['max_seq_len']}<br>slot_mapping {_short(v['slot_mapping'])}")
        elif st.key == "context":
            body = (f"one {v['backend']} metadata for this forward,<br>read by all "
                    f"{self.n_attn} attention layers")
        elif st.key == "layer":
            body = (f"{v['n_slots']} new token{'s' if v['n_slots'] != 1 else ''} of "
                    f"q, k, v per layer → {html.escape(self.impl)}")
        else:
            body = "<br>".join(
                f"{r['req']}: reads {r['blocks_read']} of {r['blocks_staged']} blocks "
                f"({r['kernel_seq_len']} of {r['seq_len']} tokens)" for r in reqs)
            body += f"<br>writes KV at slots {_short(v['slot_mapping'])}"
        return head + body

    def values_text(self, v: dict) -> str:
        if not v["has_metadata"]:
            return f"<b>step {v['step']}</b>: no attention metadata recorded"
        lines = [f"<b>step {v['step']}</b> · backend {v['backend']} · impl "
                 f"{html.escape(self.impl)} · query_start_loc {_short(v['query_start_loc'])}"
                 f" · seq_lens full {_short(v['seq_lens_full'])} → kernel "
                 f"{_short(v['seq_lens_kernel'])} · block_table shape "
                 f"{tuple(v['block_table_shape'] or ())} · slot_mapping "
                 f"{_short(v['slot_mapping'])} ({v['n_slots']} slots)"]
        for r in v["requests"]:
            lines.append(f"{r['req']}: blocks staged {r['blocks_staged']} "
                         f"{_short(r['staged'], 10)} · blocks read {r['blocks_read']} "
                         f"{_short(r['built'], 10)}")
        return "<br>".join(lines)

    def hover_text(self, v: dict) -> str:
        if not v["has_metadata"]:
            return f"step {v['step']}: no attention metadata"
        rows = [f"<b>step {v['step']}</b> → {html.escape(self.impl)} ({v['backend']})",
                f"query_start_loc {v['query_start_loc']}",
                f"seq_lens full   {v['seq_lens_full']}",
                f"seq_lens kernel {v['seq_lens_kernel']}",
                f"block_table shape {v['block_table_shape']}",
                f"slot_mapping {_short(v['slot_mapping'], 8)}"]
        for r in v["requests"]:
            rows.append(f"{r['req']}: staged {r['blocks_staged']} blocks, read "
                        f"{r['blocks_read']}")
        return "<br>".join(rows)

    # ---- one step ------------------------------------------------------------------------
    def show(self, records: list[StepRecord], i: int, frame: int | None = None) -> None:
        """Show step i with the packet on box `frame`. Without `frame`: box 0 for a new step,
        the next box (wrapping) when the same step is shown again."""
        self.records = records
        if frame is None:
            frame = (self.frame + 1) % len(self.stages) if i == self.step_i else 0
        self.step_i = i
        rec = records[i]
        self.values = step_values(rec)
        self._draw(frame, full=True)
        if self.play.value != self.frame:
            self.play.value = self.frame     # keep the Play in step; its observer is a no-op

    def _go(self, frame: int) -> None:
        if self.values is not None and frame != self.frame:
            self._draw(frame, full=False)

    def _draw(self, frame: int, full: bool) -> None:
        self.frame = frame % len(self.stages)
        v = self.values
        x = self._x(self.frame)
        with self.figure.batch_update():
            tr = self.figure.data[0]
            tr.x, tr.y = [x], [PACKET_Y]
            tr.hovertext = [self.hover_text(v)]
            card = self.figure.layout.annotations[self._card]
            card.text = self.card_text(v, self.frame)
            card.x = min(max(x, self._x(1)), self._x(len(self.stages) - 2))
            if full:
                self.figure.layout.annotations[self._values_note].text = self.values_text(v)
                self._on_highlight()

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
            text = (f"physical block {b}: " + ("; ".join(parts) if parts
                                               else "not in any row this step"))
        self.figure.layout.annotations[self._hl_note].text = text
