"""Issue 57 F6/F7: `da-lab ask` and `python -m da_lab.client.check` against servers that are no
DA server (da_lab/bench/reliability/fake_servers.py): every failure is one line on stderr and a
non-zero status, never a traceback, within the command's --timeout; a 110 MB answer is refused
at the client's limit instead of read; the check tool takes --api-key for every call it makes
and fails when nothing was generated. On the old client 21 of these cases failed (tracebacks:
IndexError, KeyError, TypeError, AttributeError, ZeroDivisionError, RecursionError; a check
that passed a server generating nothing; no way to send a key), and the drip and the silent
server held it without end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import da_lab
from da_lab.bench.reliability.fake_servers import KEY, MODES, FakeServer

# The checkout whose da_lab the tests import: the commands run its code too.
ROOT = Path(da_lab.__file__).resolve().parents[1]
CHECK_ONLY = {"ranks_text", "state_empty"}


@pytest.fixture
def chunk_files(tmp_path):
    files = []
    for k in range(3):
        f = tmp_path / f"c{k}.txt"
        f.write_text(f"Record C{k}: key {k} has value {k * 7}.")
        files.append(str(f))
    return files


def ask(url, chunk_files, *extra):
    from da_lab.cli import main

    return main(["ask", "--server", url, "--chunks", *chunk_files, "--question", "value?",
                 "--api-key", KEY, "--timeout", "3", *extra])


def check(url, *extra, timeout="3"):
    from da_lab.client.check import main

    return main(["--server", url, "--timeout", timeout, *extra])


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def test_the_check_tool_sends_the_api_key_and_passes_a_working_server(capsys):
    s = FakeServer("good")
    try:
        assert check(s.url, "--api-key", KEY, timeout="120") == 0, capsys.readouterr()
        out = capsys.readouterr()
        assert '"ok": true' in out.out and not out.err
        assert check(s.url) == 2                            # no key: one line, the route named
        line = one_line(capsys.readouterr().err)
        assert "HTTP 401" in line and "--api-key" in line
    finally:
        s.close()


def test_the_check_fails_when_nothing_was_generated(capsys):
    s = FakeServer("generates_nothing")
    try:
        assert check(s.url, "--api-key", KEY, timeout="120") == 1
        assert '"generated": false' in capsys.readouterr().out
    finally:
        s.close()


@pytest.mark.parametrize("mode", sorted(m for m in MODES if m not in ("good", "drip_headers",
                                                                      "generates_nothing")))
def test_a_hostile_server_is_one_line_for_ask_and_check(mode, chunk_files, capsys):
    s = FakeServer(mode)
    try:
        t0 = time.monotonic()
        if mode in CHECK_ONLY:             # routes only the check tool reads
            assert ask(s.url, chunk_files) == 0
            said = capsys.readouterr().err
        else:
            assert ask(s.url, chunk_files) in (1, 2)
            said = one_line(capsys.readouterr().err)
        assert check(s.url, "--api-key", KEY) == 2
        assert one_line(capsys.readouterr().err)
        assert time.monotonic() - t0 < 20, "past the 3 s --timeout of each"
        if mode == "stats_huge":
            assert "over 16 MiB" in said
        if mode in ("drip", "silent"):
            assert "time limit" in said or "--timeout" in said
    finally:
        s.close()


def test_a_server_that_drips_its_headers_meets_the_overall_timeout(chunk_files):
    """No read ever times out (a byte comes every 0.2 s); the command's --timeout still ends
    it, in a process of its own as a user runs it."""
    s = FakeServer("drip_headers")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "da_lab.cli", "ask", "--server", s.url,
                            "--chunks", *chunk_files, "--question", "q", "--api-key", KEY,
                            "--timeout", "3"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert time.monotonic() - t0 < 60
        assert p.returncode == 1 and "--timeout" in one_line(p.stderr)
    finally:
        s.close()
