"""Diagram 1: the model as a skeleton whose slots vLLM fills at load time (drawn by
static/skeleton.js).

The picture comes only from `header["skeleton"]` (da_lab/engine/introspect.py read it off the
loaded nn.Module): each grey slot box carries the implementation vLLM injected there — the
attention backend and impl, each linear layer's LinearMethod, the CustomOp dispatch (native
torch or a platform kernel), whether RMSNorm fuses the residual add. Nothing is assumed. Each
step the attention boxes light up and a note gives the step's attention call.

The "what if" buttons are answered by real engines, started engine-side: the diagram asks a
variant function (given to it, or da_lab.engine.variants.introspect_variant, imported when a
button is pressed) and the answer (skeleton_answers.py) is sent to the page. The diagram itself
starts no engine.
"""

from __future__ import annotations

import html
import re
import threading
from pathlib import Path

from .skeleton_answers import html_one_backend, html_variant, one_line
from .skeleton_view import (
    ROLE_ORDER,
    SECTION_ORDER,
    SkeletonView,
    _order,
    _section,
    attention_backends,
    slot_hover,
    slot_label,
    wrap_label,
)

LABEL_CHARS = 28          # a slot box's lines, wrapped when its row is too wide for one line
VARIANTS = {"one_backend": "all global → one backend everywhere",
            "sliding_window": "sliding-window model", "quantized": "quantized model"}
_TAG = re.compile(r"(</?[bi]>)")


def segments(label: str) -> list[list[list[str]]]:
    """The labels' text subset (<b>, <i>, <br>) as lines of [text, style] pieces ("b", "i", "")."""
    out = []
    for line in label.split("<br>"):
        style, pieces = "", []
        for part in _TAG.split(line):
            if _TAG.fullmatch(part):
                style = "" if part.startswith("</") else part[1]
            elif part:
                pieces.append([html.unescape(part), style])
        out.append(pieces)
    return out


def plain(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text.replace("<br>", "\n")))


def _box(label: str, hover: str, *, attn: bool = False, io: bool = False) -> dict:
    return {"lines": segments(label), "wrapped": segments(wrap_label(label, LABEL_CHARS)),
            "hover": plain(hover), "attn": attn, "io": io}


def _same_slots(a: list[dict], b: list[dict] | None) -> bool:
    """The same slots but for the module names (their layer index)."""
    return b is not None and len(a) == len(b) and all(
        {k: v for k, v in x.items() if k != "name"} == {k: v for k, v in y.items() if k != "name"}
        for x, y in zip(a, b, strict=True))


def view_model(sk: dict) -> dict:
    """The skeleton as rows of boxes, bottom (token ids) to top (logits), and its layer groups."""
    v = SkeletonView.of(sk)
    rows: list[dict] = [{"boxes": [_box(
        "<b>token ids + positions</b><br>(the step's input_ids and positions: data, not a slot)",
        "what the scheduler hands the model each step", io=True)]}]
    rows += [{"boxes": [_box(slot_label(s["name"], [s]), slot_hover([s]))]} for s in v.below]
    groups = []
    first = v.groups[0] if v.groups else None
    for gi, g in enumerate(v.groups):
        label = [plain(x) for x in g.label.split("<br>")]
        # A later group draws only the slots that differ from the first group's (the rest
        # repeat them): the skeleton of a small model then fits one screen.
        same = {r for r in g.roles if gi and _same_slots(g.roles[r], first.roles.get(r))}
        groups.append({"label": label, "repeats": bool(same)})
        for sec in _order([_section(r) for r in g.roles], SECTION_ORDER):
            roles = _order([r for r in g.roles if _section(r) == sec and r not in same],
                           [f"{sec}.{x}" for x in ROLE_ORDER])
            if not roles:
                continue
            rows.append({"group": gi, "boxes": [_box(
                slot_label(r, g.roles[r]) + ("<br><i>one instance, shared by all layers</i>"
                                             if r in v.shared else ""),
                slot_hover(g.roles[r], g.layers, r in v.shared),
                attn=g.roles[r][0].get("slot") == "attention") for r in roles]})
    rows += [{"boxes": [_box(slot_label(s["name"], [s]), slot_hover([s]))]} for s in v.above]
    vocab = (sk.get("config") or {}).get("vocab_size")
    rows.append({"boxes": [_box(f"<b>logits</b> (vocab {vocab}) → sampler<br>(data, not a slot)",
                                "one row of logits per sampled position", io=True)]})
    return {"rows": rows, "groups": groups, "num_layers": v.num_layers,
            "differences": v.differences, "shared": sorted(v.shared)}


def caption(sk: dict, prov: dict, v: dict) -> tuple[list, list[str]]:
    """The title (pieces) and the caption's paragraphs: what vLLM loaded, config, compilation."""
    cfg, comp = sk.get("config") or {}, sk.get("compilation") or {}
    fus = [k for k, on in (comp.get("fusions") or {}).items() if on]
    title = [[str(prov.get("model_name") or sk.get("architecture")), "b"],
             [f": {sk.get('model_class')} as vLLM loaded it — {prov.get('vllm', '?')} on "
              f"{prov.get('device', '?')}, {str(sk.get('runner', '')).split('.')[-1]}", ""]]
    out = ["Grey boxes are slots; each names what vLLM put there at load time (read from the "
           f"loaded nn.Module). {v['num_layers']} decoder layers; layers with identical slots "
           "are drawn once, as “× N layers”."]
    later = [g["label"][0] for g in v["groups"][1:] if g.get("repeats")]
    drawn = (f" ({', '.join(later)}: only the slots that differ from "
             f"{v['groups'][0]['label'][0]} are drawn)" if later else "")
    out += [f"Not merged: {d}{drawn}." for d in v["differences"][:1]]
    out += [f"Not merged: {d}." for d in v["differences"][1:]]
    if v["shared"]:
        out.append(f"{', '.join(v['shared'])}: listed once, under layer 0, by named_modules(): "
                   "one module instance serves every layer.")
    out.append(f"config: hidden {cfg.get('hidden_size')}, heads {cfg.get('num_heads')} (kv "
               f"{cfg.get('num_kv_heads')}), head size {cfg.get('head_size')}, dtype "
               f"{cfg.get('dtype')}, quantization {cfg.get('quantization')}, sliding window "
               f"{cfg.get('sliding_window')}.")
    out.append(f"compilation: mode {comp.get('mode')}, cudagraphs {comp.get('cudagraph_mode')}, "
               f"custom ops {comp.get('custom_ops')} → enabled "
               f"{', '.join(comp.get('enabled_custom_ops') or []) or 'none'}; fusion passes on: "
               f"{', '.join(fus) or 'none'}.")
    return title, out


class SkeletonDiagram:
    kind = 1

    def __init__(self, header: dict, highlight=None, *, model_path: str | Path | None = None,
                 variant_engine=None) -> None:
        """`variant_engine(model_path, kind, refresh=...)` answers a variant button (default:
        da_lab.engine.variants.introspect_variant, imported on the first press)."""
        self.header = header
        self.highlight = highlight
        self.skeleton = header.get("skeleton") or {}
        if not self.skeleton.get("slots"):
            raise ValueError("the header has no model skeleton (header['skeleton']['slots'])")
        self.provenance = header.get("provenance") or {}
        self.model_path = model_path or self.provenance.get("model")
        self.variant_engine = variant_engine
        self.status = ""          # what the last button press is doing
        self.answer = ""          # its answer (HTML made here, from escaped values)
        self.view: dict | None = None   # a variant's skeleton drawn instead (None: this run's)
        self.player = None
        self._thread: threading.Thread | None = None

    def bind(self, player) -> None:
        self.player = player

    def config(self, header: dict, records: list) -> dict:
        return {"kind": 1, **self.drawing(self.skeleton, self.provenance),
                "variants": VARIANTS, "panel": self.panel()}

    @staticmethod
    def drawing(skeleton: dict, provenance: dict) -> dict:
        """What skeleton.js draws for `skeleton`: its rows and groups, title, caption."""
        vm = view_model(skeleton)
        title, cap = caption(skeleton, provenance, vm)
        impls = sorted({k[1] for k in attention_backends(skeleton) if k[1]})
        n_attn = sum(s.get("slot") == "attention" for s in skeleton["slots"])
        return {**vm, "title": title, "caption": cap, "impls": impls, "n_attn": n_attn}

    def panel(self) -> dict:
        return {"status": self.status, "answer": self.answer, "view": self.view}

    def _say(self, status: str | None = None, answer: str | None = None) -> None:
        if status is not None:
            self.status = status
        if answer is not None:
            self.answer = answer
        if self.player is not None:
            self.player.send(panel=self.panel())

    def on_message(self, kind: str, content: dict) -> bool:
        if kind != "variant":
            return False
        which = content.get("kind")
        if which == "own":                  # back to this run's skeleton
            self.view = None
            self._say("", "")
        elif which == "one_backend":
            self.answer_one_backend()
        elif which in VARIANTS:
            self._start_variant(which)
        return True

    # ---- the buttons ---------------------------------------------------------------------
    def answer_one_backend(self) -> str:
        self._say("", html_one_backend(self.skeleton))
        return self.answer

    def answer_variant(self, kind: str, *, refresh: bool = False) -> dict:
        """Run (or read the cached result of) a real engine on the variant; show the answer."""
        from da_lab.engine.variants import VARIANTS as KINDS
        from da_lab.engine.variants import introspect_variant

        run = self.variant_engine or introspect_variant
        title = KINDS[kind]["title"]
        self._say(f"running a real engine… stock vLLM on the {title} in a subprocess (the "
                  "answer says how long it took; cached after)")
        try:
            res = run(self.model_path if self.model_path and Path(self.model_path).exists()
                      else None, kind, refresh=refresh)
        except Exception as e:   # noqa: BLE001 - shown to the student, not swallowed
            self._say(f"could not run the engine: {one_line(f'{type(e).__name__}: {e}')}")
            raise
        what = "cached result of a real engine run" if res.get("cached") else "real engine run"
        if res.get("skeleton"):
            # draw the variant's skeleton in place of this run's, as its engine loaded it
            self.view = self.drawing(res["skeleton"], {**self.provenance, "model_name": title,
                                                         "vllm": res.get("vllm")})
            self._say(f"{what}, {res.get('seconds')} s: the {title}'s skeleton drawn above",
                      html_variant(self.skeleton, res))
        else:
            self._say(f"{what}, {res.get('seconds')} s: the {title} could not start here: "
                      f"{one_line(res.get('error') or '')}", html_variant(self.skeleton, res))
        return res

    def _start_variant(self, kind: str) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._say(self.status + " (still running the previous engine)")
            return

        def run():
            try:
                self.answer_variant(kind)
            except Exception:   # noqa: BLE001 - already shown in the status line
                pass
        # A thread: the notebook stays responsive while the engine starts.
        self._thread = threading.Thread(target=run, daemon=True, name=f"variant-{kind}")
        self._thread.start()
