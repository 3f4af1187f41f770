"""Diagram 1: the model as a skeleton whose slots vLLM fills at load time.

The picture is drawn only from `header["skeleton"]` (da_lab/hook/introspect.py read it off the
loaded nn.Module): each grey slot box carries the implementation vLLM injected there — the
attention backend and impl, each linear layer's LinearMethod, the CustomOp dispatch (native
torch or a platform kernel), whether RMSNorm fuses the residual add. Nothing is assumed.

The "what if" buttons are answered by real engines too, started engine-side: the diagram asks
a variant function (given to it, or da_lab.engine.variants.introspect_variant, imported when a
button is pressed) for a variant's result and draws the answer (skeleton_answers.py). The
diagram itself starts no engine.
"""

from __future__ import annotations

import html
import threading
from pathlib import Path

from da_lab.core.record import StepRecord

from .highlight import Highlight
from .shapes import text_shape
from .skeleton_answers import html_one_backend, html_variant, skeleton_diff  # noqa: F401
from .skeleton_view import (
    GROUP_FILL,
    IO_FILL,
    ROLE_ORDER,
    SECTION_ORDER,
    SLOT_FILL,
    SLOT_LINE,
    STEP_LINE,
    SkeletonView,
    _order,
    _section,
    attention_backends,
    slot_hover,
    slot_label,
    text_width,
    wrap_label,
)

# ---------------------------------------------------------------------------------------------
# the figure

# x is in pixels of the plot area. FIG_W fits JupyterLab's notebook at 1366 x 768 with the file
# browser open (its output cells are ~930 px wide there); every text is 11 px or more.
FIG_W = 900
PLOT_W = FIG_W - 20
W_LEFT, X0, X1 = 0.0, 108.0, 650.0   # group labels | slot boxes | arrow, then the step note
NOTE_X = X1 + 34
PX = 60                       # pixels per y unit
LINE = 15 / PX                # one text line of a slot box
GAP = 0.22                    # between rows
FONT = 11                     # the smallest text the diagram draws
CHAR_PX = 6.6                 # a character of 11 px text, wide (DejaVu Sans), for fitting
BOX_PAD = 14                  # inside a box, left + right
LABEL_CHARS = 28              # a slot box's lines are wrapped at this many characters
NOTE_CHARS = int((PLOT_W - NOTE_X - 10) / CHAR_PX)    # the step note's
NOTE_LINES = 10               # its box holds this many lines (9 in the shipped traces)


def _lines(label: str) -> int:
    return label.count("<br>") + 1


class SkeletonDiagram:
    """Diagram 1. `.figure`: the layer stack bottom to top, one grey box per slot, labelled
    with the implementation vLLM injected at load time. `.show(records, i)` marks the step's
    attention call (backend name and the step's query tokens) on the attention boxes."""

    def __init__(self, header: dict, highlight: Highlight | None = None, *,
                 model_path: str | Path | None = None, variant_engine=None) -> None:
        """`variant_engine(model_path, kind, refresh=...)` answers a variant button (default:
        da_lab.engine.variants.introspect_variant, imported on the first press)."""
        import ipywidgets as widgets

        self.header = header
        self.highlight = highlight      # the skeleton shows no block ids; kept for the API
        self.skeleton = header.get("skeleton") or {}
        if not self.skeleton.get("slots"):
            raise ValueError("the header has no model skeleton (header['skeleton']['slots'])")
        self.provenance = header.get("provenance") or {}
        self.model_path = model_path or self.provenance.get("model")
        self.variant_engine = variant_engine
        self.view = SkeletonView.of(self.skeleton)
        self._attn_boxes: list[int] = []     # shape indices of the attention boxes
        self._step_note = 0                  # the shape whose label is the step note
        self.figure = self._build_figure()

        # The seed's questions, each answered from the skeleton or by a real engine.
        self.buttons = {
            "one_backend": widgets.Button(description="all global → one backend everywhere",
                                          layout=widgets.Layout(width="auto")),
            "sliding_window": widgets.Button(description="sliding-window model",
                                             layout=widgets.Layout(width="auto")),
            "quantized": widgets.Button(description="quantized model",
                                        layout=widgets.Layout(width="auto")),
        }
        self.buttons["one_backend"].on_click(lambda _b: self.answer_one_backend())
        for kind in ("sliding_window", "quantized"):
            self.buttons[kind].on_click(lambda _b, k=kind: self._start_variant(k))
        self.status = widgets.HTML("")
        self.answer = widgets.HTML("")
        self.widget = widgets.VBox([self.figure, widgets.HBox(list(self.buttons.values())),
                                    self.status, self.answer])
        self.widget.add_class("da-skeleton")
        self._thread: threading.Thread | None = None

    # ---- drawing -------------------------------------------------------------------------
    def _build_figure(self):
        import plotly.graph_objects as go

        v, sk, prov = self.view, self.skeleton, self.provenance
        canvas = _Canvas(v)
        box, row = canvas.box, canvas.row
        shapes, notes = canvas.shapes, canvas.notes
        groups_rects, attn, anchor = [], [], None

        y = 0.0
        h_io = 2 * LINE + 0.16
        box(X0, X1, y, h_io, "<b>token ids + positions</b><br>(the step's input_ids and "
            "positions: data, not a slot)", "what the scheduler hands the model each step",
            fill=IO_FILL, dash="dot")
        y += h_io + GAP
        for s in v.below:
            _, h = row([(s["name"], [s], slot_hover([s]))], y)
            y += h + GAP
        for g in v.groups:
            y += 0.1
            g_y0 = y - 0.12
            for sec in _order([_section(r) for r in g.roles], SECTION_ORDER):
                roles = _order([r for r in g.roles if _section(r) == sec],
                               [f"{sec}.{x}" for x in ROLE_ORDER])
                items = [(r, g.roles[r], slot_hover(g.roles[r], g.layers, r in v.shared))
                         for r in roles]
                idx, h = row(items, y)
                for r, i in zip(roles, idx, strict=True):
                    if g.roles[r][0].get("slot") == "attention":
                        attn.append(i)
                        if anchor is None or shapes[i]["y1"] > anchor[1]:
                            # the top edge: the arrow then runs along the row gap, over no text
                            anchor = (shapes[i]["x1"] - 8, shapes[i]["y1"])
                y += h + GAP
            g_y1 = y - GAP + 0.12
            groups_rects.append(dict(type="rect", x0=W_LEFT + 2, x1=X1 + 5, y0=g_y0,
                                     y1=g_y1, fillcolor=GROUP_FILL, layer="below",
                                     line=dict(color="#555", width=1.5)))
            notes.append(dict(x=(W_LEFT + X0) / 2, y=(g_y0 + g_y1) / 2,
                              text=wrap_label(g.label, int((X0 - W_LEFT - 12) / 7.2)),
                              showarrow=False, font=dict(size=12, color="#333")))
            y += 0.12 + GAP
        for s in v.above:
            _, h = row([(s["name"], [s], slot_hover([s]))], y)
            y += h + GAP
        box(X0, X1, y, h_io, f"<b>logits</b> (vocab {(sk.get('config') or {}).get('vocab_size')})"
            " → sampler<br>(data, not a slot)", "one row of logits per sampled position",
            fill=IO_FILL, dash="dot")
        top = y + h_io
        # One arrow up the side: the hidden states flow bottom to top through every slot.
        notes.append(dict(x=X1 + 14, y=top, ax=X1 + 14, ay=0, xref="x", yref="y",
                          axref="x", ayref="y", text="", showarrow=True, arrowhead=2,
                          arrowwidth=1.5, arrowcolor="#aaa"))
        notes.append(dict(x=X1 + 24, y=top / 2, text="hidden states flow up", textangle=-90,
                          showarrow=False, font=dict(size=FONT, color="#777")))
        # The group frames go first, under everything; shift the box indices accordingly.
        shapes = groups_rects + shapes
        self._attn_boxes = [i + len(groups_rects) for i in attn]

        title, caption = _title_and_caption(sk, prov, v)
        notes.append(dict(x=0, y=0, xref="paper", yref="paper", xanchor="left",
                          yanchor="top", yshift=-12, text="<br>".join(caption),
                          showarrow=False, align="left", font=dict(size=FONT, color="#444")))
        # The step note (filled by show()): an arrow from the attention box to a fixed box
        # whose label is the note. A label's text is redrawn alone; an annotation's text
        # change would redraw the whole figure every step (shapes.py).
        ax, ay = anchor or (X1, top / 2)
        notes.append(dict(x=ax, y=ay, ax=NOTE_X, ay=ay + GAP / 2, xref="x", yref="y",
                          axref="x", ayref="y", text="", showarrow=True, arrowhead=2,
                          arrowcolor=STEP_LINE))
        h = (NOTE_LINES * 15 + 10) / PX
        y1 = min(top + 0.15, ay + GAP / 2 + h / 2)
        self._step_note = len(shapes)
        shapes.append(text_shape("step note", NOTE_X, PLOT_W - 2, y1 - h, y1,
                                 "(no step shown yet)", xref="x", yref="y", color=STEP_LINE,
                                 position="middle left", fill="white", border=STEP_LINE,
                                 pad=5))
        return _figure(go, shapes, notes, (canvas.hx, canvas.hy, canvas.htext), title,
                       len(caption), top)

    # ---- one step ------------------------------------------------------------------------
    def step_text(self, rec: StepRecord) -> str:
        md = rec.metadata
        if md is None:
            return wrap_label(f"<b>step {rec.step}</b>: no attention metadata recorded<br>"
                              "(no DA request was built this step)", NOTE_CHARS)
        qsl = md.query_start_loc.tolist() if md.query_start_loc is not None else [0]
        n_tok = qsl[-1] - qsl[0]
        n_req = max(len(qsl) - 1, 0)
        impls = sorted({k[1] for k in attention_backends(self.skeleton)})
        s = "s" if n_tok != 1 else ""
        text = (f"<b>step {rec.step}</b>: attention call<br>"
                f"backend <b>{md.backend}</b><br>({', '.join(impls)})<br>"
                f"{n_tok} query token{s} from {n_req} request{'s' if n_req != 1 else ''}<br>"
                f"query_start_loc {_short(qsl, 4)}<br>"
                f"seq_lens (kernel) {_short(md.seq_lens, 4)}<br>"
                f"× {len(self._attention_names())} attention layers, same metadata")
        return wrap_label(text, NOTE_CHARS)

    def _attention_names(self) -> list[str]:
        return [s["name"] for s in self.skeleton["slots"] if s.get("slot") == "attention"]

    def show(self, records: list[StepRecord], i: int) -> None:
        rec = records[i]
        on = rec.metadata is not None
        with self.figure.batch_update():
            for k in self._attn_boxes:
                self.figure.layout.shapes[k].line.color = STEP_LINE if on else SLOT_LINE
                self.figure.layout.shapes[k].line.width = 3 if on else 1.2
            self.figure.layout.shapes[self._step_note].label.text = self.step_text(rec)

    # ---- the buttons ---------------------------------------------------------------------
    def answer_one_backend(self) -> str:
        self.answer.value = html_one_backend(self.skeleton)
        self.status.value = ""
        return self.answer.value

    def answer_variant(self, kind: str, *, refresh: bool = False) -> dict:
        """Run (or read the cached result of) a real engine on the variant; show the answer."""
        from da_lab.engine.variants import VARIANTS, introspect_variant

        run = self.variant_engine or introspect_variant
        self.status.value = (f"<i>running a real engine… stock vLLM on the "
                             f"{VARIANTS[kind]['title']}"
                             " in a subprocess (about 20 s; instant next time)</i>")
        try:
            res = run(self.model_path if self.model_path and Path(self.model_path).exists()
                      else None, kind, refresh=refresh)
        except Exception as e:   # noqa: BLE001 - shown to the student, not swallowed
            self.status.value = f"<b>could not run the engine:</b> {html.escape(str(e))}"
            raise
        what = "cached result of a real engine run" if res.get("cached") else "real engine run"
        self.status.value = f"<i>{what}, {res.get('seconds')} s</i>"
        self.answer.value = html_variant(self.skeleton, res)
        return res

    def _start_variant(self, kind: str) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.status.value += " <i>(still running the previous engine)</i>"
            return

        def run():
            try:
                self.answer_variant(kind)
            except Exception:   # noqa: BLE001 - already shown in the status line
                pass
        # A thread: the notebook stays responsive while the engine starts.
        self._thread = threading.Thread(target=run, daemon=True, name=f"variant-{kind}")
        self._thread.start()


class _Canvas:
    """The diagram's shapes and notes as they are laid out, with the invisible hover points."""

    def __init__(self, view) -> None:
        self.v = view
        self.shapes, self.notes = [], []
        self.hx, self.hy, self.htext = [], [], []

    def box(self, x0, x1, y0, h, label, hover, fill=SLOT_FILL, dash=None):
        self.shapes.append(dict(type="rect", x0=x0, x1=x1, y0=y0, y1=y0 + h, fillcolor=fill,
                                layer="below",
                                line=dict(color=SLOT_LINE, width=1.2, dash=dash)))
        self.notes.append(dict(x=(x0 + x1) / 2, y=y0 + h / 2, text=label, showarrow=False,
                               font=dict(size=FONT, color="#222"), align="center"))
        self.hx.append((x0 + x1) / 2)
        self.hy.append(y0 + h / 2)
        self.htext.append(hover)
        return len(self.shapes) - 1, len(self.notes) - 1

    def row(self, items, y0):
        """items: [(role, parts, hover)] side by side across the slot column, in as many
        lines of boxes (stacked upwards, in data-flow order) as their text needs; returns
        (shape indices, total height)."""
        labels = [slot_label(r, p) + ("<br><i>one instance, shared by all layers</i>"
                                      if r in self.v.shared else "") for r, p, _ in items]

        def needs(labels):     # widths follow the longest text line of each box
            return [max(12 * CHAR_PX, text_width(lab, CHAR_PX)) + BOX_PAD for lab in labels]

        need = needs(labels)
        if sum(need) > X1 - X0:     # too wide on one line: wrap the text, then the boxes
            labels = [wrap_label(lab, LABEL_CHARS) for lab in labels]
            need = needs(labels)
        lines: list[list[int]] = [[]]
        for k, nd in enumerate(need):
            if lines[-1] and sum(need[j] for j in lines[-1]) + nd > X1 - X0:
                lines.append([])
            lines[-1].append(k)
        idx, y = [], y0
        for line in lines:
            h = max(_lines(labels[k]) for k in line) * LINE + 0.16
            x, total = X0, sum(need[k] for k in line)
            for k in line:
                w = (X1 - X0) * need[k] / total
                idx.append(self.box(x + 3, x + w - 3, y, h, labels[k], items[k][2])[0])
                x += w
            y += h + GAP
        return idx, y - GAP - y0


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


def _short(xs, n: int = 8) -> str:
    if xs is None:
        return "—"
    xs = xs.tolist() if hasattr(xs, "tolist") else list(xs)
    return str(xs) if len(xs) <= n else "[" + ", ".join(map(str, xs[:n])) + f", … ({len(xs)})]"


def _title_and_caption(sk: dict, prov: dict, v) -> tuple[str, list[str]]:
    """The figure's title and its caption lines (what vLLM loaded, config, compilation)."""
    cfg, comp = sk.get("config") or {}, sk.get("compilation") or {}
    fus = [k for k, on in (comp.get("fusions") or {}).items() if on]
    title = (f"<b>{prov.get('model_name') or sk.get('architecture')}</b>: "
             f"{sk.get('model_class')} as vLLM loaded it — {prov.get('vllm', '?')} on "
             f"{prov.get('device', '?')}, {str(sk.get('runner', '')).split('.')[-1]}")
    caption = [
        "Grey boxes are slots; each names what vLLM put there at load time (read from the "
        f"loaded nn.Module). {v.num_layers} decoder layers; layers with identical slots are "
        "drawn once, as “× N layers”.",
    ]
    caption += [f"Not merged: {d}." for d in v.differences]
    if v.shared:
        caption.append(f"{', '.join(sorted(v.shared))}: listed once, under layer 0, by "
                       "named_modules(): one module instance serves every layer.")
    caption.append(
        f"config: hidden {cfg.get('hidden_size')}, heads {cfg.get('num_heads')} (kv "
        f"{cfg.get('num_kv_heads')}), head size {cfg.get('head_size')}, dtype "
        f"{cfg.get('dtype')}, quantization {cfg.get('quantization')}, sliding window "
        f"{cfg.get('sliding_window')}.")
    caption.append(
        f"compilation: mode {comp.get('mode')}, cudagraphs {comp.get('cudagraph_mode')}, "
        f"custom ops {comp.get('custom_ops')} → enabled "
        f"{', '.join(comp.get('enabled_custom_ops') or []) or 'none'}; fusion passes on: "
        f"{', '.join(fus) or 'none'}.")
    caption = [ln for c in caption for ln in _wrap(c, int(PLOT_W / CHAR_PX))]
    return wrap_label(title, int(PLOT_W / 8.6)), caption     # the title: 14 px


def _figure(go, shapes, notes, hovers, title: str, n_caption: int, top: float):
    """The FigureWidget: invisible hover markers on the slot boxes, the shapes and notes."""
    from .figure import LiveFigure

    hx, hy, htext = hovers
    hover = go.Scatter(x=hx, y=hy, mode="markers", hoverinfo="text", hovertext=htext,
                       marker=dict(size=30, opacity=0), showlegend=False, name="slots")
    cap_px = 16 * n_caption + 20
    top_px = 32 + 19 * _lines(title)
    fig = LiveFigure(data=[hover])
    fig.update_layout(
        title=dict(text=title, x=0.01, y=1 - 12 / (PX * (top + 0.3) + top_px + cap_px),
                   yanchor="top", font=dict(size=14)), shapes=shapes,
        annotations=notes, height=int(PX * (top + 0.3)) + top_px + cap_px, width=FIG_W,
        plot_bgcolor="white", paper_bgcolor="white",
        margin=dict(l=10, r=10, t=top_px, b=cap_px),
        xaxis=dict(range=[0, PLOT_W], visible=False, fixedrange=True),
        yaxis=dict(range=[-0.15, top + 0.15], visible=False, fixedrange=True),
        hoverlabel=dict(align="left", font=dict(size=FONT)))
    return fig
