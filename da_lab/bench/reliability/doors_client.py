"""Issue 57's client cases of the doors run (doors.py): `da-lab ask` and `python -m
da_lab.client.check` against every hostile mode of fake_servers.py, each in a process of its
own as a user runs it (its peak RSS read as it exits), and the check tool against the run's
real `da-lab serve --api-key` with the key.

Each hostile run must end within its --timeout (plus start-up) with a non-zero status and one
stderr line, no traceback; the check must fail (status 1) on a server that generates nothing
and pass (status 0) on a working one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from da_lab.bench.reliability.doors_local import ROOT, WITH_RSS
from da_lab.bench.reliability.fake_servers import KEY, MODES, FakeServer

TIMEOUT_S = 5            # the commands' own --timeout
GRACE_S = 60             # start-up on a loaded machine, beyond it: a hang
CHECK_ONLY = {"ranks_text", "state_empty"}      # routes only the check tool reads


def _run(argv: list[str], rss: Path, module: str = "da_lab.cli") -> tuple:
    env = {**os.environ, "DA_RSS_FILE": str(rss), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = WITH_RSS.replace('"da_lab.cli"', repr(module))
    rss.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True,
                           text=True, timeout=TIMEOUT_S + GRACE_S)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, None
    peak = round(int(rss.read_text()) / 1024) if rss.exists() else None
    return p, time.perf_counter() - t0, peak


def hostile(real_url: str | None = None) -> dict:
    res = {"runs": 0, "clear": 0, "tracebacks": 0, "hangs": 0, "unclear": [],
           "peak_rss_mb": 0, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        chunks = []
        for k in range(3):
            chunks.append(d / f"c{k}.txt")
            chunks[-1].write_text(f"Record C{k}: key {k} has value {k * 7}.")
        for mode in sorted(MODES):
            srv = FakeServer(mode)
            try:
                ask = ["ask", "--server", srv.url, "--chunks", *map(str, chunks),
                       "--question", "value?", "--api-key", KEY, "--timeout", str(TIMEOUT_S)]
                check = ["--server", srv.url, "--api-key", KEY, "--timeout", str(TIMEOUT_S)]
                want_ask = (0,) if mode in CHECK_ONLY or mode in ("good", "generates_nothing") \
                    else (1, 2)
                want_check = {"good": (0,), "generates_nothing": (1,)}.get(mode, (2,))
                for cmd, argv, module, want in (
                        ("ask", ask, "da_lab.cli", want_ask),
                        ("check", check, "da_lab.client.check", want_check)):
                    _case(res, f"{mode}/{cmd}", _run(argv, d / "rss", module), want)
            finally:
                srv.close()
        if real_url is not None:
            _case(res, "real_server/check_with_key",
                  _run(["--server", real_url, "--api-key", "sk-doors", "--timeout", "600"],
                       d / "rss", "da_lab.client.check"), (0,))
    return res


def _case(res: dict, name: str, run: tuple, want: tuple[int, ...]) -> None:
    p, wall, peak = run
    res["runs"] += 1
    case = {"wall_s": round(wall, 2), "peak_rss_mb": peak}
    res["peak_rss_mb"] = max(res["peak_rss_mb"], peak or 0)
    if p is None:
        res["hangs"] += 1
        res["unclear"].append(name)
        case["result"] = "hang"
    else:
        lines = p.stderr.strip().splitlines()
        tb = "Traceback" in p.stderr
        res["tracebacks"] += tb
        ok = p.returncode in want and not tb and (p.returncode == 0 or len(lines) == 1
                                                  or '"ok": false' in p.stdout)
        res["clear"] += ok
        case.update(rc=p.returncode, said=(lines[-1] if lines else p.stdout[-120:])[-200:])
        if not ok:
            res["unclear"].append(name)
    res["cases"][name] = case
