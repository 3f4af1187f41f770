"""Traces built to hurt the reader (issue 38): a 5,000-digit integer, a gzip of hundreds of MB
of blank lines, one line of 100 MB, a step of 10**30. Each is one clear line from `load` and
from `da-lab replay` / `da-lab export`, at once and in bounded memory. No vLLM needed."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from records_fixture import HEADER, RECORDS, raises

from da_lab.core.record import SCHEMA
from da_lab.trace import load

ROOT = Path(__file__).resolve().parents[1]
HEAD = json.dumps({"kind": "da_lab.trace", "schema": SCHEMA, **HEADER}).encode()
REC = [json.dumps(r).encode() for r in RECORDS]


def gz(path: Path, *parts) -> Path:
    """A .jsonl.gz of `parts`: bytes, or (bytes, times) written `times` times (streamed: a
    part of hundreds of MB is never held whole)."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            data, times = part if isinstance(part, tuple) else (part, 1)
            for _ in range(times):
                f.write(data)
    return path


def cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "da_lab.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=300)


def one_line(p: subprocess.CompletedProcess, needle: str) -> None:
    err = p.stderr.strip()
    assert p.returncode == 2 and "Traceback" not in err and "\n" not in err, p.stderr[-2000:]
    assert needle in err, err


def test_an_integer_of_5000_digits_is_one_line_in_load_and_replay(tmp_path):
    bad = json.loads(REC[1])
    bad["hook_us"] = "X"
    line = json.dumps(bad).encode().replace(b'"X"', b"7" * 5000)
    path = gz(tmp_path / "digits.jsonl.gz", HEAD + b"\n" + REC[0] + b"\n" + line + b"\n")
    raises(path, "line 3 is not JSON (Exceeds the limit", "after 1 record")
    one_line(cli("replay", str(path)), "line 3 is not JSON")


def test_blank_lines_by_the_hundred_million_are_skipped_at_once_and_counted(tmp_path):
    """21 kB of gzip holding 20M blank lines took 7-10 s; a GB of them never ended."""
    mb = b"\n" * (1 << 20)
    path = gz(tmp_path / "blank.jsonl.gz", HEAD + b"\n", REC[0] + b"\n", (mb, 256),
              b"  \t\r\n" * 3, REC[1] + b"\n", (mb, 64), b"{broken\n")
    t0 = time.perf_counter()
    raises(path, f"line {2 + 256 * (1 << 20) + 3 + 1 + 64 * (1 << 20) + 1} is not JSON",
           "after 2 records")
    assert time.perf_counter() - t0 < 30           # the old reader: minutes
    good = gz(tmp_path / "good.jsonl.gz", HEAD + b"\n", (mb, 64),
              b"\n".join(REC) + b"\n", (mb, 64))
    assert [r.step for r in load(good)] == [r["step"] for r in RECORDS]


def test_a_line_of_100_mb_is_refused_in_bounded_memory(tmp_path):
    """A 1 GB single line once peaked at 2.2 GB of memory before it was called "not JSON"."""
    path = gz(tmp_path / "long.jsonl.gz", HEAD + b"\n" + REC[0] + b'\n{"x": "',
              (b"x" * (1 << 20), 100), b'"}\n')
    tracemalloc.start()
    try:
        raises(path, "line 3 is longer than 64 MiB")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20, f"peak {peak / 2**20:.0f} MiB"
    one_line(cli("replay", str(path)), "line 3 is longer than 64 MiB")


def test_a_step_of_10_to_the_30_fails_at_once_in_replay_and_export(tmp_path):
    """export once spent 62 s in Chromium before a timeout; the range is checked on reading."""
    huge = json.loads(REC[1])
    huge["step"] = 10**30
    path = gz(tmp_path / "step.jsonl.gz", b"\n".join([HEAD, REC[0], json.dumps(huge).encode()]))
    raises(path, '"step" is a 31-digit number, outside 0..2251799813685247')
    t0 = time.perf_counter()
    one_line(cli("export", str(path), "--html", str(tmp_path / "run.html")), "outside 0..")
    assert time.perf_counter() - t0 < 30 and not (tmp_path / "run.html").exists()
    one_line(cli("replay", str(path)), "outside 0..")


def test_a_folder_or_device_is_called_what_it_is_whatever_its_name(tmp_path):
    raises(tmp_path, "is a directory")               # was "unknown trace format"
    (tmp_path / "null.txt").symlink_to("/dev/null")
    raises(tmp_path / "null.txt", "is a device")
    raises(tmp_path / "nope.txt", "unknown trace format")    # a missing file: its name first
