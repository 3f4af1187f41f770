"""`da-lab bench`'s results: ideal speedups, ratios, the repeats' spread, the overlap check,
the table and the plot. Pure, except the plot (plotly; PNG via kaleido)."""

from __future__ import annotations

from pathlib import Path

from da_lab.bench.plan import MODELS, MODES


def log_line(msg: str) -> None:
    import sys

    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def row_stub(model, context, batch, mode) -> dict:
    return {"model": model, "context": context, "batch": batch, "mode": mode,
            "kept_block_fraction": None, "decode_tok_s": None, "attn_ms_per_step": None,
            "ideal_speedup": None}


def add_roofline(row: dict, spec: dict) -> None:
    """A measured row's roofline columns (bench/roofline.py: the paper's estimate on the B200
    and the H200, and the H200 with the weight read as the matmul floor) for its model, mid-
    window sequence length, batch and kept fraction of the global KV; and the measured step
    time over each estimate."""
    import json

    from da_lab.bench.roofline import cost_of, roofline_fields

    if not row.get("step_ms") or row.get("seq_len_mid") is None:
        return
    cfg = json.loads((Path(spec["model_path"]) / "config.json").read_text())
    cost = cost_of(cfg, elt=4 if spec.get("dtype") in ("float32", "float") else 2)
    row.update(roofline_fields(cost, row["seq_len_mid"], row["batch"],
                               row.get("kept_block_fraction") or 1.0))
    for k in ("roofline_b200", "roofline_h200", "roofline_h200_weights"):
        row[f"step_over_{k}"] = round(row["step_ms"] / row[k]["total_ms"], 3)


def ideal_speedup(row: dict) -> float | None:
    """(weight bytes + full KV bytes of the batch) / (weight bytes + KV bytes read), per decode
    step; the full KV is what stock reads at the same model/context/batch."""
    if row["mode"] in ("stock", "global", "global_recording"):
        return 1.0
    w, kvb = row.get("weight_bytes_read"), row.get("kv_bytes_per_token")
    full, read = row.get("kv_blocks_full_per_step"), row.get("kv_blocks_read_per_step")
    if None in (w, kvb, full, read):
        return None
    tok = row["block_size"] * kvb
    return round((w + full * tok) / (w + read * tok), 3)


# decode tok/s ratios the run reports (where both modes ran)
PAIRS = (("focus", "stock_kept"), ("focus", "global"), ("global", "stock"), ("local", "global"),
         ("global_recording", "global"), ("focus", "stock_kept_pairs"),
         ("focus_grouped", "focus"), ("focus_grouped", "stock_kept"),
         ("focus_grouped", "stock_kept_pairs"), ("global_grouped", "global"),
         ("global_grouped", "stock"))


def ratios(rows: list[dict]) -> list[dict]:
    """decode tok/s ratios per model/context/batch, and the attention-time speedup of FOCUS
    (global's attention ms per step / focus's)."""
    by: dict[tuple, dict] = {}
    attn: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["context"], r["batch"])
        if r.get("decode_tok_s"):
            by.setdefault(key, {})[r["mode"]] = r["decode_tok_s"]
        if r.get("attn_ms_per_step"):
            attn.setdefault(key, {})[r["mode"]] = r["attn_ms_per_step"]
    out = []
    for (m, c, b), v in by.items():
        d = {"model": m, "context": c, "batch": b}
        for a, z in PAIRS:
            d[f"{a}/{z}"] = round(v[a] / v[z], 3) if a in v and z in v else None
        t = attn.get((m, c, b), {})
        for a, z in (("global", "focus"), ("focus", "focus_grouped"),
                     ("global", "global_grouped")):
            d[f"attn {a}/{z}"] = round(t[a] / t[z], 3) if a in t and z in t else None
        out.append(d)
    return out


def spread(values: list[float]) -> dict:
    """The repeats of one row: median, min, max and the sample standard deviation (0 for one
    value), rounded for the JSON."""
    import statistics

    vs = sorted(float(v) for v in values)
    if not vs:
        return {"median": None, "min": None, "max": None, "stdev": None}
    return {"median": round(statistics.median(vs), 2), "min": round(vs[0], 2),
            "max": round(vs[-1], 2),
            "stdev": round(statistics.stdev(vs), 2) if len(vs) > 1 else 0.0}


def check_overlap(doc: dict) -> None:
    """With --overlap-import (off by default), child k+1 imports vLLM while child k runs. Flag
    child k's rows if that import was still going when k's first timed window began (CPU
    contention, normally nil on a many-core GPU host, but it is recorded, not assumed).
    Without it, child k+1 starts only after child k has exited: nothing can overlap."""
    if not doc["settings"].get("overlap_import"):
        return
    kids = doc["children"]
    for k, nk in zip(kids, kids[1:], strict=False):
        t_meas, t_imp = k.get("t_first_window"), nk.get("t_imported")
        if t_meas and t_imp and t_imp > t_meas:
            k["import_overlapped_measurement"] = True
            for r in doc["rows"]:
                if r["model"] == k["model"] and r["mode"] == k["mode"] and r.get("decode_tok_s"):
                    r["note"] = ((r.get("note") or "") + " next child's vLLM import overlapped "
                                 "the timed steps").strip()


def sort_key(r: dict) -> tuple:
    return (MODELS.index(r["model"]) if r["model"] in MODELS else 9, r["context"], r["batch"],
            MODES.index(r["mode"]) if r["mode"] in MODES else 9)


def _fmt(v, spec="") -> str:
    if v is None:
        return "-"
    return format(v, spec) if spec else str(v)


def table(doc: dict) -> str:
    lines = [f"run {doc['run_id']}  {doc['vllm']}  {doc['device']}  runner "
             f"{', '.join(doc['runner']) or '-'}",
             f"{'model':<15} {'context':>7} {'batch':>5} {'mode':<16} {'kept':>6} {'cost':>6} "
             f"{'tok/s':>10} {'min..max (n)':>20} {'attn ms':>8} {'KV GB':>6} {'/union':>6} "
             f"{'ideal':>6}  note"]
    for r in doc["rows"]:
        note = r.get("error") or r.get("skipped") or r.get("note") or ""
        gb = r.get("kv_bytes_read_per_step")          # KV bytes attention reads per step
        sp = r.get("decode_tok_s_spread") or {}
        rng = (f"{sp['min']:.1f}..{sp['max']:.1f} ({len(r.get('decode_tok_s_repeats', []))})"
               if sp.get("min") is not None else "-")
        lines.append(f"{r['model']:<15} {r['context']:>7} {r['batch']:>5} {r['mode']:<16} "
                     f"{_fmt(r['kept_block_fraction'], '.3f'):>6} "
                     f"{_fmt(r.get('decoding_attention_cost'), '.3f'):>6} "
                     f"{_fmt(r['decode_tok_s'], '.1f'):>10} {rng:>20} "
                     f"{_fmt(r['attn_ms_per_step'], '.3f'):>8} "
                     f"{_fmt(gb and gb / 1e9, '.2f'):>6} "
                     f"{_fmt(r.get('kv_read_over_union'), '.3f'):>6} "
                     f"{_fmt(r['ideal_speedup'], '.2f'):>6}  {note[:90]}")
    keys = tuple(f"{a}/{z}" for a, z in PAIRS) + (
        "attn global/focus", "attn focus/focus_grouped", "attn global/global_grouped")
    shown = [k for k in keys if any(x.get(k) is not None for x in doc["ratios"])]
    if shown:
        lines += ["", f"{'model':<15} {'context':>7} {'batch':>5} "
                  + " ".join(f"{k:>17}" for k in shown)]
        for x in doc["ratios"]:
            lines.append(f"{x['model']:<15} {x['context']:>7} {x['batch']:>5} "
                         + " ".join(f"{_fmt(x[k], '.3f'):>17}" for k in shown))
    return "\n".join(lines + roofline_table(doc["rows"]))


ROOFLINE_HEAD = ("model", "context", "batch", "mode", "kept", "step ms", "H200 paper",
                 "H200 weights", "B200 paper", "x H200w", "glob attn", "SWA/GDN", "attn ?",
                 "matmul", "other")


def roofline_table(rows: list[dict]) -> list[str]:
    """Measured step time against the paper's roofline (same model, mid-window length, batch,
    kept fraction; docs/benchmarks.md) and where the profiled step's time went, in ms."""
    rs = [r for r in rows if r.get("roofline_h200")]
    if not rs:
        return []
    out = ["", "  ".join(ROOFLINE_HEAD)]
    for r in rs:
        sp = r.get("time_split_ms") or {}
        cells = [r["model"], r["context"], r["batch"], r["mode"],
                 _fmt(r["kept_block_fraction"], ".3f"), _fmt(r["step_ms"], ".3f"),
                 _fmt(r["roofline_h200"]["total_ms"], ".3f"),
                 _fmt(r["roofline_h200_weights"]["total_ms"], ".3f"),
                 _fmt(r["roofline_b200"]["total_ms"], ".3f"),
                 _fmt(r.get("step_over_roofline_h200_weights"), ".2f")]
        cells += [_fmt(sp.get(k), ".3f") for k in ("global_attention", "local",
                                                    "attention_unsplit", "matmul", "other")]
        out.append("  ".join(str(c) for c in cells))
    return out


def figure(doc: dict):
    """decode tok/s and attention ms per step against context, per model (columns)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    models = [m for m in dict.fromkeys(r["model"] for r in doc["rows"])]
    fig = make_subplots(rows=2, cols=max(1, len(models)), shared_xaxes=True,
                        subplot_titles=[f"{m}: decode tokens/s" for m in models]
                        + [f"{m}: attention ms per step" for m in models],
                        vertical_spacing=0.12)
    colors = {"stock": "#444444", "stock_kept": "#999999", "global": "#1f77b4",
              "focus": "#d62728", "local": "#2ca02c", "global_recording": "#9467bd",
              "global_grouped": "#17becf", "focus_grouped": "#ff7f0e",
              "stock_kept_pairs": "#bcbd22"}
    dashes = ["solid", "dash", "dot", "dashdot", "longdash"]
    batches = sorted({r["batch"] for r in doc["rows"]})
    for j, m in enumerate(models, start=1):
        for mode in dict.fromkeys(r["mode"] for r in doc["rows"]):
            for k, b in enumerate(batches):
                rs = sorted((r for r in doc["rows"] if r["model"] == m and r["mode"] == mode
                             and r["batch"] == b), key=lambda r: r["context"])
                if not rs:
                    continue
                for i, key in ((1, "decode_tok_s"), (2, "attn_ms_per_step")):
                    fig.add_trace(go.Scatter(
                        x=[r["context"] for r in rs], y=[r[key] for r in rs],
                        mode="lines+markers", name=f"{mode} b{b}",
                        legendgroup=f"{mode} b{b}", showlegend=(i == 1 and j == 1),
                        line={"color": colors.get(mode), "dash": dashes[k % len(dashes)]},
                        customdata=[[r["kept_block_fraction"], r["ideal_speedup"]] for r in rs],
                        hovertemplate=(f"{mode} batch {b}<br>context %{{x}}<br>{key} %{{y}}"
                                       "<br>kept %{customdata[0]}<br>ideal x%{customdata[1]}"
                                       "<extra></extra>")), row=i, col=j)
        for i in (1, 2):
            fig.update_xaxes(type="log", title_text="context (tokens)" if i == 2 else None,
                             row=i, col=j)
            fig.update_yaxes(type="log", row=i, col=j)
    fig.update_layout(title=f"da-lab bench {doc['run_id']} — {doc['vllm']} on {doc['device']}",
                      width=600 * max(1, len(models)) + 200, height=800)
    return fig


def write_plot(doc: dict, json_path: Path) -> list[Path]:
    """bench-<run_id>.html next to the JSON, and .png when kaleido + a Chromium are here."""
    fig = figure(doc)
    base = json_path.with_suffix("")
    html = base.with_suffix(".html")
    fig.write_html(str(html), include_plotlyjs=True, full_html=True)
    written = [html]
    try:
        import kaleido
        from da_lab_widgets.export import browser_path

        png = base.with_suffix(".png")
        kaleido.write_fig_from_object_sync(
            [{"fig": fig, "path": str(png),
              "opts": {"format": "png", "width": fig.layout.width, "height": fig.layout.height,
                       "scale": 1}}],
            kopts={"path": browser_path(), "enable_sandbox": False, "mathjax": False})
        written.append(png)
    except Exception as e:   # noqa: BLE001 - the HTML is the plot; the PNG is a convenience
        log_line(f"no PNG ({type(e).__name__}: {e}); `da-lab bench --plot {json_path}` on a "
             "machine with kaleido + Chromium makes it")
    return written
