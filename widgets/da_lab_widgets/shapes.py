"""Layout shapes that a step can change cheaply in the browser.

plotly.js redraws one shape alone when only its colours or its label's text change (edit type
"arraydraw", about a millisecond), but recalculates and redraws the whole figure when a shape
moves, appears or disappears, when the list of shapes is replaced, or when an annotation's text
changes (edit type "calc": tens of milliseconds on a large figure). So:

- `shape_edits` turns "these are the shapes now" into relayout edits of single shape leaves
  (`shapes[3].fillcolor`), and keeps the list's length: a shape no longer wanted stays on the
  page, hidden (transparent, no label) until it is wanted again;
- `text_shape` is a box whose label carries text that changes every step (a step note, a
  title): the box never moves, only `label.text` changes.
"""

from __future__ import annotations

from .runs import CLEAR


def text_shape(name: str, x0: float, x1: float, y0: float, y1: float, text: str = "", *,
               xref: str = "paper", yref: str = "paper", size: int = 11, color: str = "#222",
               position: str = "top left", fill: str = CLEAR, border: str = CLEAR,
               pad: int = 3) -> dict:
    """A fixed box whose label is `text` (plotly's text subset: <b>, <br>, <span style>)."""
    return {"name": name, "type": "rect", "xref": xref, "yref": yref, "layer": "above",
            "x0": x0, "x1": x1, "y0": y0, "y1": y1, "fillcolor": fill,
            "line": {"color": border, "width": 1},
            "label": {"text": text, "textposition": position, "padding": pad,
                      "font": {"size": size, "color": color}}}


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def hidden(shape: dict) -> dict:
    """The same shape, drawn as nothing (only colours and text change: an arraydraw edit)."""
    out = {**shape, "fillcolor": CLEAR, "line": {**(shape.get("line") or {}), "color": CLEAR}}
    if "label" in shape:
        out["label"] = {**shape["label"], "text": ""}
    return out


def shape_edits(sent: list[dict] | None, new: list[dict]) -> tuple[dict, list[dict]]:
    """Relayout edits that turn the shapes on the page (`sent`) into `new`, and the shapes on
    the page afterwards. Fewer shapes than on the page: the rest are hidden, not removed. More:
    the whole list is sent (the one case that costs a full redraw)."""
    if sent is None or len(new) > len(sent):
        return {"shapes": new}, new
    now = list(new) + [hidden(s) for s in sent[len(new):]]
    edits = {}
    for k, (old, cur) in enumerate(zip(sent, now, strict=True)):
        a, b = _leaves(old), _leaves(cur)
        for key in b.keys() | a.keys():
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                edits[f"shapes[{k}].{key}"] = b.get(key)      # None: back to plotly's default
    return edits, now


_MISSING = object()
