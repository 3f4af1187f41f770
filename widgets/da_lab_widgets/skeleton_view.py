"""Diagram 1's reading of a model skeleton (header["skeleton"], introspected from the loaded
nn.Module): layers, the roles in a layer, runs of identical layers, and the slot labels."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# reading the skeleton: layers, the roles in a layer, identical layers

_LAYER = re.compile(r"^(?P<pre>.*?)layers\.(?P<i>\d+)\.(?P<role>.+)$")
# Data-flow order inside a decoder layer (named_modules lists modules in definition order, which
# for Llama puts the norms last). Unknown sections/roles follow in the order they appear.
SECTION_ORDER = ["input_layernorm", "self_attn", "post_attention_layernorm", "mlp"]
ROLE_ORDER = ["qkv_proj", "q_proj", "k_proj", "v_proj", "rotary_emb", "attn", "o_proj",
              "gate_up_proj", "gate_proj", "up_proj", "act_fn", "down_proj"]


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
    def of(cls, sk: dict) -> SkeletonView:
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
        diffs = [_describe_difference(a, b) for a, b in zip(groups, groups[1:], strict=False)]
        return cls(below, groups, above, shared, [d for d in diffs if d], n)


def _describe_difference(a: LayerGroup, b: LayerGroup) -> str:
    out = []
    for role in _order(list(a.roles) + list(b.roles), []):
        sa, sb = a.roles.get(role), b.roles.get(role)
        if sa is None or sb is None:
            out.append(f"{role} only in {'the first' if sb is None else 'the second'}")
            continue
        for x, y in zip(sa, sb, strict=False):
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
# fitting text into boxes: a slot's lines wrapped when its row is too wide for one line each

_PAIR = re.compile(r"^<(b|i)>(.*)</\1>$")
_BREAKS = re.compile(r" (?=→ |\[|\()")     # preferred break points: before "→", "[", "("


def _wrap_plain(line: str, width: int) -> list[str]:
    """Break one line into pieces of at most `width` characters: at its preferred points first
    (before "→", "[" or "("), then between words; a longer word stays whole."""
    units: list[str] = []
    for seg in _BREAKS.split(line):
        units += [seg] if len(_plain(seg)) <= width else seg.split(" ")
    out: list[str] = []
    for u in units:
        if out and len(_plain(out[-1])) + 1 + len(_plain(u)) <= width:
            out[-1] += " " + u
        else:
            out.append(u)
    return out


def wrap_label(label: str, width: int) -> str:
    """`label` (the <b>, <i>, <br> subset, lines joined by <br>) with every line longer than
    `width` characters broken into several; a line wrapped whole in <b>/<i> keeps it on each
    piece."""
    lines = []
    for line in label.split("<br>"):
        if len(_plain(line)) <= width:
            lines.append(line)
            continue
        m = _PAIR.match(line)
        tag, inner = (m[1], m[2]) if m and "<" not in m[2] else (None, line)
        pieces = _wrap_plain(inner, width)
        lines += [f"<{tag}>{p}</{tag}>" for p in pieces] if tag else pieces
    return "<br>".join(lines)
