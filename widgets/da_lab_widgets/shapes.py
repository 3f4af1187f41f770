"""Layout shapes that a step can change cheaply in the browser.

plotly.js redraws one shape alone when only its colours or its label's text change (edit type
"arraydraw", about a millisecond), but recalculates and redraws the whole figure when a shape
moves, appears or disappears, when the list of shapes is replaced, or when an annotation's text
changes (edit type "calc": tens of milliseconds on a large figure). So:

- `shape_edits` turns "these are the shapes now" into relayout edits of single shape leaves
  (`shapes[3].fillcolor`) where only colours and labels change, and keeps the list's length:
  a shape no longer wanted stays on the page, hidden (transparent, no label) until it is
  wanted again;
- `text_shape` is a box whose label carries text that changes every step (a step note, a
  title): the box never moves, only `label.text` changes;
- `filled_block` is a block filled token by token: one shape per token slot, coloured or clear.
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


# Shape leaves plotly.js redraws alone (edit type "arraydraw", or none at all); any other
# leaf (a coordinate, a layer, a width) recalculates and redraws the whole figure.
_ALONE = {"fillcolor", "line.color", "label.text", "label.font.color", "name"}
HEADROOM = 8         # hidden shapes sent beyond a longer list, for the next few to come


def shape_edits(sent: list[dict] | None, new: list[dict]) -> tuple[dict, list[dict]]:
    """Relayout edits that turn the shapes on the page (`sent`) into `new`, and the shapes on
    the page afterwards. Fewer shapes than on the page: the rest are hidden, not removed.
    Edits of colours and labels only: one leaf per edit (each shape is redrawn alone). Any
    other change, or more shapes than on the page (with HEADROOM hidden ones after them): the
    whole list, in one edit, since the page redraws the whole figure for it anyway (and
    plotly.py checks a leaf's path at ~0.2 ms, a list at once)."""
    if sent is None or len(new) > len(sent):
        now = list(new) + [hidden(new[-1]) for _ in range(HEADROOM if new else 0)]
        return {"shapes": now}, now
    now = list(new) + [hidden(s) for s in sent[len(new):]]
    edits = {}
    for k, (old, cur) in enumerate(zip(sent, now, strict=True)):
        a, b = _leaves(old), _leaves(cur)
        for key in b.keys() | a.keys():
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                if key not in _ALONE:
                    return {"shapes": now}, now
                edits[f"shapes[{k}].{key}"] = b.get(key)      # None: back to plotly's default
    return edits, now


_MISSING = object()


def filled_block(name: str, j: int, y0: float, height: float, fill: int, size: int,
                 color: str) -> list[dict]:
    """Block j of a row (bottom y0, `height` high) filled to `fill` of `size` tokens: a frame
    and one slice per token slot, coloured up to the fill and clear above it. One more token
    colours one more slice (a colour edit, drawn alone); nothing moves until the next block."""
    h = height / size
    frame = {"name": f"{name} frame", "layer": "below", "x0": j - 0.5, "x1": j + 0.5,
             "y0": round(y0, 3), "y1": round(y0 + height, 3), "fillcolor": "#f4f4f4",
             "line": {"color": "#bbbbbb", "width": 1}}
    return [frame] + [{"name": f"{name} fill", "layer": "below", "x0": j - 0.5, "x1": j + 0.5,
                       "y0": round(y0 + t * h, 4), "y1": round(y0 + (t + 1) * h, 4),
                       "fillcolor": color if t < fill else CLEAR,
                       "line": {"color": CLEAR, "width": 0}}
                      for t in range(size)]
