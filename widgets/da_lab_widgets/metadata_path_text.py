"""Diagram 3's words: the step's real values (from one step record) and the texts that show
them — the packet's card at each box, the line of all values, the packet's hover."""

from __future__ import annotations

import html

from da_lab.core.record import StepRecord

from .rows import kernel_row, phys_row

N_SHOW = 6                              # list items shown before "…"
MAX_REQS = 3                            # requests listed on the card and the values line


def short(xs, n: int = N_SHOW) -> str:
    if xs is None:
        return "—"
    xs = list(xs)
    return (str(xs) if len(xs) <= n
            else "[" + ", ".join(map(str, xs[:n])) + f", … +{len(xs) - n}]")


def impl_of(header: dict) -> tuple[str, str, int]:
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


def _body(key: str, v: dict, impl: str, n_attn: int) -> str:
    reqs = v["requests"][:MAX_REQS]
    if key == "scheduler":
        return "<br>".join(f"{s['req']}: {s['query_len']} token"
                           f"{'s' if s['query_len'] != 1 else ''} scheduled"
                           for s in v["scheduled"][:MAX_REQS]) or "nothing scheduled"
    if key == "block_table":
        return "<br>".join(f"{r['req']}: staged row {r['blocks_staged']} blocks "
                           f"{short(r['staged'])}<br>seq_len {r['seq_len']}" for r in reqs)
    if key == "hook":
        return "<br>".join(
            f"{r['req']} ({r['mode']}): seq_len {r['seq_len']} → {r['kernel_seq_len']}<br>"
            f"row {r['blocks_staged']} → {r['blocks_read']} blocks {short(r['built'])}"
            + ("  (unchanged)" if r["seq_len"] == r["kernel_seq_len"] else "")
            for r in reqs)
    if key == "builder":
        return (f"query_start_loc {short(v['query_start_loc'])}<br>seq_lens "
                f"{short(v['seq_lens_kernel'])} (full: {short(v['seq_lens_full'])})<br>"
                f"block_table {tuple(v['block_table_shape'] or ())}, max_seq_len "
                f"{v['max_seq_len']}<br>slot_mapping {short(v['slot_mapping'])}")
    if key == "context":
        return (f"one {v['backend']} metadata for this forward,<br>read by all "
                f"{n_attn} attention layers")
    if key == "layer":
        return (f"{v['n_slots']} new token{'s' if v['n_slots'] != 1 else ''} of "
                f"q, k, v per layer → {html.escape(impl)}")
    body = "<br>".join(
        f"{r['req']}: reads {r['blocks_read']} of {r['blocks_staged']} blocks "
        f"({r['kernel_seq_len']} of {r['seq_len']} tokens)" for r in reqs)
    return body + f"<br>writes KV at slots {short(v['slot_mapping'])}"


def card_text(v: dict, key: str, title: str, impl: str, n_attn: int) -> str:
    """What the packet carries at the box `key` (titled `title`)."""
    head = f"<b>step {v['step']} · {html.escape(title)}</b><br>"
    if not v["has_metadata"]:
        return head + "no attention metadata recorded this step"
    listed = {"scheduler": v["scheduled"], "block_table": v["requests"], "hook": v["requests"],
              "impl": v["requests"]}.get(key, ())
    more = len(listed) - MAX_REQS
    return (head + _body(key, v, impl, n_attn)
            + (f"<br>… and {more} more request{'s' if more > 1 else ''}" if more > 0 else ""))


def _joined(items: list[str], width: int) -> list[str]:
    """items joined with " · ", a new line before an item that would pass `width` chars."""
    lines: list[str] = []
    for it in items:
        plain = len(it.replace("<b>", "").replace("</b>", ""))
        if lines and lines[-1][1] + 3 + plain <= width:
            lines[-1] = (lines[-1][0] + " · " + it, lines[-1][1] + 3 + plain)
        else:
            lines.append((it, plain))
    return [t for t, _ in lines]


def values_text(v: dict, impl: str, width: int) -> str:
    """Every value of the step, in lines of at most `width` characters."""
    if not v["has_metadata"]:
        return f"<b>step {v['step']}</b>: no attention metadata recorded"
    items = [f"<b>step {v['step']}</b>", f"backend {v['backend']}",
             f"impl {html.escape(impl)}", f"query_start_loc {short(v['query_start_loc'])}",
             f"seq_lens full {short(v['seq_lens_full'])} → kernel "
             f"{short(v['seq_lens_kernel'])}",
             f"block_table shape {tuple(v['block_table_shape'] or ())}",
             f"slot_mapping {short(v['slot_mapping'])} ({v['n_slots']} slots)"]
    lines = _joined(items, width)
    for r in v["requests"][:MAX_REQS]:
        lines += _joined([f"{r['req']}: blocks staged {r['blocks_staged']} "
                          f"{short(r['staged'], 10)}",
                          f"blocks read {r['blocks_read']} {short(r['built'], 10)}"], width)
    if len(v["requests"]) > MAX_REQS:
        lines.append(f"… and {len(v['requests']) - MAX_REQS} more requests (hover the packet)")
    return "<br>".join(lines)


def hover_text(v: dict, impl: str) -> str:
    if not v["has_metadata"]:
        return f"step {v['step']}: no attention metadata"
    rows = [f"<b>step {v['step']}</b> → {html.escape(impl)} ({v['backend']})",
            f"query_start_loc {v['query_start_loc']}",
            f"seq_lens full   {v['seq_lens_full']}",
            f"seq_lens kernel {v['seq_lens_kernel']}",
            f"block_table shape {v['block_table_shape']}",
            f"slot_mapping {short(v['slot_mapping'], 8)}"]
    for r in v["requests"]:
        rows.append(f"{r['req']}: staged {r['blocks_staged']} blocks, read "
                    f"{r['blocks_read']}")
    return "<br>".join(rows)
