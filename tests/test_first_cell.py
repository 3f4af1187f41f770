"""What a learner meets first: the notebooks' first code cell, run in a real Jupyter kernel as
Run All runs it, writes nothing to stderr (no red block), shows the start's progress line with the
measured times, and says what the request is. The progress line itself is checked without an
engine."""

import io
import os
import time
from pathlib import Path

import pytest

from da_lab.engine.startup import Progress

ROOT = Path(__file__).resolve().parents[1]


def test_progress_line_names_each_phase_and_ends_with_the_times():
    out = io.StringIO()
    p = Progress(out, tick_s=0.01)
    p.start("importing")
    time.sleep(0.05)
    p.start("starting")
    time.sleep(0.03)
    total = p.done("ready")
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")      # one line, rewritten with '\r'
    assert "starting vLLM: importing" in text and "starting vLLM: starting" in text
    last = text.rsplit("\r", 1)[1]
    assert last.startswith(f"ready in {total:.1f} s (importing ") and "starting " in last
    assert not p._thread.is_alive()


@pytest.fixture
def learner_env(monkeypatch):
    """The learner's default model (conftest pins the random one for the engine tests)."""
    monkeypatch.delenv("DA_LAB_MODEL", raising=False)
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), str(ROOT / "widgets"), os.environ.get("PYTHONPATH", "")]))


def test_first_cell_of_a_notebook_writes_nothing_to_stderr(learner_env):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "04_da_hook.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "LIVE = True" in first.source and "open_lesson(LIVE, TRACE)" in first.source
    nb.cells = [first]
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outs = first.outputs
    stderr = [o.get("text", "") for o in outs if o.get("name") == "stderr"]
    errors = [o for o in outs if o.get("output_type") == "error"]
    assert not errors, errors
    assert stderr == [], "the first cell wrote to stderr:\n" + "".join(stderr)
    stdout = "".join(o.get("text", "") for o in outs if o.get("name") == "stdout")
    assert "starting vLLM: importing torch and vLLM" in stdout        # the progress line
    assert "vLLM ready (da-tiny-tags) in " in stdout and "starting the engine " in stdout
    assert "q1: 12 chunks of records" in stdout and "da-tiny-tags |" in stdout
