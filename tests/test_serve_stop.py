"""A `da-lab serve` with DA_LAB_TRACE stopped as its user stops it (issue 57): Ctrl-C leaves a
complete trace that loads, a da_id used twice is two runs in it, each with its own entry, and
a trace file that is already there is never overwritten."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from serve_fixture import ROOT, Server

from da_lab.core.layout import seed_texts
from da_lab.trace import load


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    s = Server(tmp_path_factory.mktemp("stop"), ["--model", tiny_model])
    yield s
    s.stop()


def test_an_existing_trace_file_is_refused_before_vllm_starts(tmp_path, tiny_model):
    """F14: DA_LAB_TRACE naming a file that exists was overwritten at the next start."""
    old = tmp_path / "kept.jsonl.gz"
    old.write_bytes(b"an earlier server's trace")
    env = dict(os.environ, DA_LAB_TRACE=str(old),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "serve", "--model", tiny_model,
                        "--port", "0"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "already exists" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert old.read_bytes() == b"an earlier server's trace"


def test_ctrl_c_leaves_a_complete_trace_with_each_run_of_a_reused_id(server):
    """F3 + F5. Two requests, one after the other, with the same da_id (allowed once the first
    has finished) and prompts of different lengths; then Ctrl-C (SIGINT to the whole process
    group, as a terminal sends it). vLLM's shutdown kills the engine's process tree; the trace
    writer, detached, still closes the file. On the old code the gzip was cut ("stream ended
    early") and the second run had no `added` entry and the first one's prompt_len."""
    from da_lab.client import DAClient

    c = DAClient(server.url)
    _, chunks, _ = seed_texts()
    first = c.send(c.prompt(chunks, "What is the value of key 31?"), request_id="again",
                   tags=[(2, "<focus C3>")], max_tokens=24, ignore_eos=True)
    long = c.prompt(chunks + chunks[:4], "What is the value of key 31?")
    second = c.send(long, request_id="again", tags=[(2, "<local>")], max_tokens=20,
                    ignore_eos=True)
    c.close()
    # The worker writes a run's last tokens once it learns the run ended (at the engine's next
    # step, which delivers the finished ids): a Ctrl-C sent before that step loses them
    # (noticed, not fixed). The server says when it has: the run is no longer live.
    deadline = time.monotonic() + 60
    while httpx.get(f"{server.url}/da/requests/again", timeout=30).json().get("live") \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    serving = server.log()
    os.killpg(server.proc.pid, signal.SIGINT)
    assert server.proc.wait(180) in (0, 130), server.log()[-3000:]
    tr = load(server.trace)                        # complete: the gzip was closed
    added = {a["req"]: a for r in tr for a in r.added}
    assert set(added) == {"again", "again#2"}, added
    assert added["again#2"]["prompt_len"] == len(long.token_ids) > added["again"]["prompt_len"]
    assert [t for _, t in added["again#2"]["tags"]] == ["<local>"]
    toks = {name: [t for r in tr for h in r.requests if h.req == name
                   for t in (h.new_token_ids or [])] for name in added}
    assert toks == {"again": first.token_ids, "again#2": second.token_ids}
    assert "Traceback" not in serving
    # vLLM's own shutdown (it kills its engine at once) sometimes logs its output handler
    # meeting the dead engine; that one is vLLM's, and nothing else may be there.
    log = server.log()[len(serving):]
    assert log.count("Traceback") == log.count("AsyncLLM output_handler failed"), log[-3000:]
