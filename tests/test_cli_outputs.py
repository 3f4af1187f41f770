"""Issue 57: commands never lose what they did not make, and refuse early what they can't do.
`da-lab export` refuses an output that is its input (F4) and a page name held by a file it did
not write; a server's DA_LAB_TRACE never overwrites a file (F14: refused by `da-lab serve`,
written beside by the worker); `export` refuses steps its page can't draw before Chromium waits
60 s (F13); `eval --prompts` refuses a line too long for the model before tokenizing it. No
engine is started here."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

import da_lab
from da_lab.trace import load

# The checkout whose da_lab the tests import: the commands run its code too.
ROOT = Path(da_lab.__file__).resolve().parents[1]
SEED = ROOT / "traces" / "seed_cpu.jsonl.gz"


def run_cli(*argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), str(ROOT / "widgets"), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "da_lab.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_line(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_export_refuses_to_write_its_page_over_its_input(tmp_path):
    """F4: `da-lab export T --html T` wrote the page over the trace and exited 0."""
    trace = tmp_path / "t.jsonl.gz"
    trace.write_bytes(SEED.read_bytes())
    assert "is the input trace" in one_line(run_cli("export", str(trace), "--html", str(trace)))
    linked = tmp_path / "same.jsonl.gz"
    os.link(trace, linked)                          # another name of the same file
    assert "is the input trace" in one_line(run_cli("export", str(trace), "--html",
                                                    str(linked)))
    assert trace.read_bytes() == SEED.read_bytes() and len(load(trace).records) > 0


def test_export_never_overwrites_a_page_it_did_not_write(tmp_path):
    from da_lab.cli import export_problem

    mine = tmp_path / "notes.html"
    mine.write_text("<html><body>my notes</body></html>")
    args = Namespace(trace=str(SEED), html=str(mine), out=None, animate=False, steps=None)
    assert "not a page `da-lab export` wrote" in export_problem(args)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "run.html").write_text("<html>someone else's</html>")
    args = Namespace(trace=str(SEED), html=None, out=str(folder), animate=True, steps=None)
    assert "--animate" in export_problem(args)
    inside = folder / "1_skeleton.png"
    inside.write_bytes(SEED.read_bytes())           # a trace named like an output
    args = Namespace(trace=str(inside), html=None, out=str(folder), animate=False, steps=None)
    assert "is the input trace" in export_problem(args)
    page = tmp_path / "page.html"                   # its own page: written again, no question
    p = run_cli("export", str(SEED), "--html", str(page))
    assert p.returncode == 0, p.stderr
    p = run_cli("export", str(SEED), "--html", str(page))
    assert p.returncode == 0 and page.stat().st_size > 10_000, p.stderr


def test_export_refuses_steps_its_page_cannot_draw(tmp_path):
    """F13: a trace with steps near 2**52 made `export --out` wait 60 s for Chromium and
    fail (from 2**51 on, measured); refused at once, naming the step and the bound."""
    from da_lab.trace.format import MAX_STEP

    big = tmp_path / "big.jsonl.gz"
    with gzip.open(SEED, "rt") as f, gzip.open(big, "wt") as g:
        g.write(f.readline())
        for i, line in enumerate(f):
            rec = json.loads(line)
            rec["step"] = 2**52 - 496 + i
            g.write(json.dumps(rec) + "\n")
    t0 = time.monotonic()
    for opt in (["--out", str(tmp_path / "img")], ["--html", str(tmp_path / "p.html")]):
        said = one_line(run_cli("export", str(big), *opt))
        assert str(2**52 - 496) in said and str(MAX_STEP) in said
    assert time.monotonic() - t0 < 50, "the refusal came after Chromium's 60 s wait"


def test_a_server_trace_is_never_written_over_an_existing_file(tmp_path):
    """F14, both layers: `da-lab serve` refuses the path before vLLM starts; a worker whose
    DA_LAB_TRACE exists anyway (a plain `vllm serve`, two servers) writes beside it."""
    from da_lab.hook.trace import unused_path
    from da_lab.serve.launch import trace_problem

    old = tmp_path / "t.jsonl.gz"
    assert trace_problem(str(old)) is None
    old.write_bytes(b"kept")
    assert "already exists" in trace_problem(str(old))
    assert "trace" in trace_problem(str(tmp_path / "t.txt"))
    assert unused_path(old) == tmp_path / "t.1.jsonl.gz"
    (tmp_path / "t.1.jsonl.gz").write_bytes(b"also kept")
    assert unused_path(old) == tmp_path / "t.2.jsonl.gz"
    assert unused_path(tmp_path / "new.parquet") == tmp_path / "new.parquet"


@pytest.mark.parametrize("model", ["smollm2-da"])
def test_eval_refuses_a_prompt_line_too_long_before_tokenizing_it(tmp_path, model):
    """A 60 MB line took 172 s of tokenizing before the eval refused it."""
    f = tmp_path / "p.jsonl"
    good = {"documents": ["Ann was born in 1970."], "question": "When was Ann born?",
            "answer": ["1970"], "needs": [1]}
    f.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, documents=["word " * 12_000_000]))
                 + "\n")
    t0 = time.monotonic()
    said = one_line(run_cli("eval", "--model", model, "--prompts", str(f), timeout=600))
    assert ":2:" in said and "positions" in said
    assert time.monotonic() - t0 < 120, "refused after tokenizing"
