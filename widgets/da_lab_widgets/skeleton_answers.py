"""Diagram 1's answers to its "what if" buttons, as HTML: one backend everywhere (from the
skeleton alone) and a variant engine's result (da_lab.engine.variants) against the lab's model."""

from __future__ import annotations

import html
import json

from .skeleton_view import SkeletonView, _order, _plain, attention_backends, slot_label


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
            "<p><span style='font-size:11px'>Computed from this run's skeleton (introspected at "
            "load time).</span></p>")


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
    from da_lab.engine.variants import ENGINE_ARGS  # data only: imports no vLLM

    esc = html.escape
    title = res.get("title") or res.get("kind")
    changes = ", ".join(f"{k}={json.dumps(v)}"
                        for k, v in (res.get("config_changes") or {}).items())
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
            parts.append(f"<p>✘ vLLM refused {esc(argtxt)}: {esc(one_line(a['error'] or ''))}"
                         f"</p>{_details(a['error'])}")
    if not res.get("attempts") and res.get("error"):
        parts.append(f"<p>✘ {esc(one_line(res['error']))}</p>{_details(res['error'])}")
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
            parts.append(f"<p>It runs: {len(res['generated'])} greedy tokens from a short prompt → "
                         f"{res['generated']}.</p>")
    parts.append(f"<p>The DA hook's own precheck on this model: "
                 f"<b>{esc(str(res.get('da_hook')))}</b>.</p>")
    return "".join(parts)


def _details(error: str | None) -> str:
    """The whole error, folded away under its one line."""
    if not error:
        return ""
    return ("<details><summary>the whole error</summary><pre style='white-space:pre-wrap;"
            f"font-size:11px'>{html.escape(error)}</pre></details>")


def one_line(error: str) -> str:
    """The line of an engine error a reader can act on: pydantic's "Value error, ..." (vLLM
    wraps config errors in a ValidationError), else the innermost cause's first line."""
    for ln in error.splitlines():
        ln = ln.strip()
        if ln.lower().startswith("value error,"):
            return ln[len("value error,"):].split(" [type=")[0].strip()
    parts = [p for p in error.split("caused by ") if p.strip()] or [""]
    return parts[-1].strip().splitlines()[0] if parts[-1].strip() else "no message"
