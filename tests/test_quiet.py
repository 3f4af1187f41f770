"""A quiet start: a real Lab started under quiet_engine_start() writes nothing to stderr, while the
same start without it shows the four lines the quieting is for (so the filters are each needed);
output that is not one of those lines, and exceptions, still come through."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NOISE = {
    "triton": "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
    "reduce_op": "FutureWarning: `torch.distributed.reduce_op` is deprecated",
    "numa": "Warning: NUMA binding: Using MEMBIND policy",
}

# The Lab quiets its own start (engine/quiet.py) and turns vLLM's weight-loading bar off.
START = """
from da_lab.engine.lab import Lab, apply_env
apply_env()
lab = Lab()
lab.add_request(lab.seed_prompt(), tags=[(2, "<local>")], max_tokens=12, request_id="seed")
for _ in range(3):
    lab.step()
lab.shutdown()
print("started and stepped")
"""


def run(code: str, **env) -> subprocess.CompletedProcess:
    env = {**os.environ, **env,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "widgets"),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_lab_starts_quietly():
    quiet = run(START)
    assert quiet.returncode == 0, quiet.stderr
    assert "started and stepped" in quiet.stdout
    for name, line in NOISE.items():
        assert line not in quiet.stderr, f"{name} line still printed"
    assert quiet.stderr.strip() == "", f"unexpected stderr on a quiet start:\n{quiet.stderr}"

    # Control: the same start with vLLM's logs asked for (which turns the quieting off) prints
    # every one of those lines, so each filter above is doing work (and this test notices when
    # vLLM's messages change).
    loud = run(START, VLLM_LOGGING_LEVEL="WARNING")
    assert loud.returncode == 0, loud.stderr
    for name, line in NOISE.items():
        assert line in loud.stderr, f"{name} line no longer printed by vLLM: update quiet.py"
    assert loud.stderr.count(NOISE["reduce_op"]) == 2


OTHER = """
import os, sys, warnings
from da_lab.engine.quiet import quiet_engine_start
numa = (b"[W1130 19:37:17.839826766 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy "
        b"for memory allocation on the NUMA nodes (0). Memory allocations will be strictly bound "
        b"to these NUMA nodes. (function init_cpu_memory_env)\\n")
try:
    with quiet_engine_start():
        os.write(2, b"a real C-level error\\n")
        os.write(2, numa)
        print("python stderr line", file=sys.stderr)
        warnings.warn("another FutureWarning", FutureWarning)
        raise RuntimeError("engine failed to start")
except RuntimeError as e:
    print("caught:", e)
"""


def test_other_output_and_errors_pass_through():
    out = run(OTHER)
    assert out.returncode == 0, out.stderr
    assert "caught: engine failed to start" in out.stdout
    for line in ("a real C-level error", "python stderr line", "another FutureWarning"):
        assert line in out.stderr
    assert "NUMA binding" not in out.stderr
    # Asking vLLM for its logs turns the quieting off.
    verbose = run(OTHER, VLLM_LOGGING_LEVEL="INFO")
    assert "NUMA binding" in verbose.stderr and "a real C-level error" in verbose.stderr
