"""The CLI and Lab half of the doors run (da_lab/bench/reliability/doors.py): files built to hurt
`da-lab replay`, `da-lab export` and `da-lab eval --prompts`, and a Lab used after shutdown()
or handed what isn't a prompt or a tag.

Each CLI case must exit 2 with one stderr line naming the file and no traceback, within
CLI_TIMEOUT_S (else a hang); the 1 GB gzips' peak memory is recorded. Each Lab case must raise
da_lab's own clear error (RuntimeError "this Lab has been shut down", TypeError, ValueError),
never an AttributeError or an error from inside vLLM.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI_TIMEOUT_S = 120
ROOT = Path(__file__).resolve().parents[3]


def _gz(path: Path, *parts) -> Path:
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            data, times = part if isinstance(part, tuple) else (part, 1)
            for _ in range(times):
                f.write(data)
    return path


def _trace_files(d: Path, gb: int) -> dict[str, tuple[Path, str]]:
    """name -> (trace file, what the one line must say)."""
    from da_lab.core.record import SCHEMA

    head = json.dumps({"kind": "da_lab.trace", "schema": SCHEMA, "provenance": {}}).encode()
    rec = json.dumps({"step": 0, "requests": []}).encode()
    mb = 1 << 20
    return {
        "replay_5000_digits": (_gz(d / "digits.jsonl.gz", head + b'\n{"step": ' + b"7" * 5000
                                   + b"}\n"), "Exceeds the limit"),
        "replay_1gb_blank_lines": (_gz(d / "blank.jsonl.gz", head + b"\n" + rec + b"\n",
                                       (b"\n" * mb, 1024 * gb), b"{bad\n"), "is not JSON"),
        "replay_1gb_single_line": (_gz(d / "line.jsonl.gz", head + b'\n{"x": "',
                                       (b"x" * mb, 1024 * gb), b'"}\n'), "longer than 64 MiB"),
        "replay_step_1e30": (_gz(d / "step.jsonl.gz", head + b'\n{"step": ' + b"1" + b"0" * 30
                                 + b', "requests": []}\n'), "outside 0.."),
        "replay_folder": (d, "is a directory"),
    }


def _prompt_files(d: Path) -> dict[str, tuple[Path, str]]:
    good = {"documents": ["Ann Lee was born in 1970.", "Bo Sun was born in 1980."],
            "question": "In which year\u2028was Bo\u0085Sun born?", "answer": ["1980"],
            "needs": [2]}
    line1 = json.dumps(good, ensure_ascii=False)         # raw U+2028 / U+0085: valid JSON
    files = {
        "eval_5000_digits": ('{"documents": [' + "7" * 5000 + "]}", ":1: not JSON"),
        "eval_raw_u2028_line_then_bad_line": (line1 + "\n{nope\n", ":2: not JSON"),
        "eval_deep_nesting": ("[" * 100000 + "\n", ":1: not JSON (nested too deeply"),
    }
    out = {}
    for name, (text, says) in files.items():
        p = d / f"{name}.jsonl"
        p.write_text(text, encoding="utf-8")
        out[name] = (p, says)
    fifo = d / "fifo.jsonl"
    os.mkfifo(fifo)
    out.update(eval_folder=(d, "is a folder"), eval_fifo=(fifo, "is a FIFO"),
               eval_dev_null=(Path("/dev/null"), "is a device"))
    return out


# `da-lab ARGV`, writing its own peak RSS (kB) to $DA_RSS_FILE as it exits: VmHWM, which
# starts afresh at exec (ru_maxrss would keep the forking parent's size).
WITH_RSS = """import atexit, os, runpy, sys
def hwm():
    kb = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmHWM:")]
    open(os.environ["DA_RSS_FILE"], "w").write(kb[0])
atexit.register(hwm)
sys.argv = ["da-lab", *sys.argv[1:]]
runpy.run_module("da_lab.cli", run_name="__main__")
"""


def _cli(argv: list[str], rss_file: Path,
         extra_env: dict | None = None) -> tuple[subprocess.CompletedProcess | None, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DA_RSS_FILE": str(rss_file),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           **(extra_env or {})}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", WITH_RSS, *argv], env=env,
                           capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0
    return p, time.perf_counter() - t0


def cli_cases(gb: int = 1) -> dict:
    res = {"runs": 0, "clear": 0, "tracebacks": 0, "hangs": 0, "unclear": [], "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "traces").mkdir()
        (d / "prompts").mkdir()
        (d / "devnull.jsonl.gz").symlink_to("/dev/null")     # a trace name, a device
        runs = [(name, ["replay", str(path)], says)
                for name, (path, says) in _trace_files(d / "traces", gb).items()]
        runs.append(("replay_dev_null", ["replay", str(d / "devnull.jsonl.gz")], "is a device"))
        step = d / "traces" / "step.jsonl.gz"
        runs.append(("export_step_1e30", ["export", str(step), "--html", str(d / "r.html")],
                     "outside 0.."))
        runs += [(name, ["eval", "--model", "smollm2-da", "--prompts", str(path)], says)
                 for name, (path, says) in _prompt_files(d / "prompts").items()]
        kept = _issue57_runs(d, runs)           # files each run must leave as they were
        for name, argv, says, *env in runs:
            rss = d / "rss"
            rss.unlink(missing_ok=True)
            p, wall = _cli(argv, rss, *env)
            res["runs"] += 1
            case = {"wall_s": round(wall, 2)}
            if rss.exists():
                case["peak_rss_mb"] = round(int(rss.read_text()) / 1024)
            if p is None:
                res["hangs"] += 1
                case["result"] = "hang"
            else:
                err = p.stderr.strip()
                last = err.splitlines()[-1] if err else ""
                tb = "Traceback" in p.stderr
                res["tracebacks"] += tb
                ok = p.returncode == 2 and not tb and says in last
                res["clear"] += ok
                case.update(rc=p.returncode, said=last[-200:])
                if not ok:
                    res["unclear"].append(name)
            res["cases"][name] = case
        res["files_lost"] = [str(f.name) for f, data in kept.items()
                             if not f.is_file() or f.read_bytes() != data]
    return res


def _issue57_runs(d: Path, runs: list) -> dict[Path, bytes]:
    """Issue 57's CLI cases, appended to `runs`: export writing its page over its input (F4),
    a trace of steps the page can't draw (F13: refused, not a 60 s wait), a 60 MB prompt
    line (refused before tokenizing), `da-lab serve` with DA_LAB_TRACE naming a file that
    exists (F14). Returns {file: bytes} that must be unchanged afterwards."""
    seed = ROOT / "traces" / "seed_cpu.jsonl.gz"
    mine = d / "traces" / "mine.jsonl.gz"
    mine.write_bytes(seed.read_bytes())
    runs.append(("export_html_over_its_input", ["export", str(mine), "--html", str(mine)],
                 "is the input trace"))
    big = d / "traces" / "step251.jsonl.gz"
    with gzip.open(seed, "rt") as f, gzip.open(big, "wt") as g:
        g.write(f.readline())
        for i, line in enumerate(f):
            g.write(json.dumps(dict(json.loads(line), step=2**51 + i)) + "\n")
    runs.append(("export_out_step_2_51", ["export", str(big), "--out", str(d / "img")],
                 "outside 0.."))
    long = d / "prompts" / "line_60mb.jsonl"
    rec = {"documents": ["word " * 12_000_000], "question": "q?", "answer": ["a"], "needs": [1]}
    long.write_text(json.dumps(rec) + "\n")
    runs.append(("eval_60mb_line", ["eval", "--model", "smollm2-da", "--prompts", str(long)],
                 "positions"))
    old = d / "traces" / "earlier_server.jsonl.gz"
    old.write_bytes(seed.read_bytes())
    runs.append(("serve_existing_trace_file", ["serve", "--port", "0"], "already exists",
                 {"DA_LAB_TRACE": str(old)}))
    return {mine: mine.read_bytes(), old: old.read_bytes()}


def _steer_after_closing(lab, res: dict) -> None:
    """F9: a steer that lands past a scripted </focus> (GLOBAL again) must be accepted."""
    from da_lab.core.layout import seed_texts

    focus = '<focus magic_chunks="3">'
    n = len(lab.encode(focus))
    da_id = lab.add_request(lab.paper_prompt("What is the value of key 31?", seed_texts()[1][:5]),
                            tags=[(0, focus), (n + 4, "</focus>")], max_tokens=60)
    lab.step()
    plan = lab.steer_check(da_id, focus)
    res["calls"] += 1
    if plan.ok:
        res["clear"] += 1
    else:
        res["unclear"].append(f"steer after a scripted </focus>: refused: {plan.reason}"[:200])
    lab.abort(da_id)


def lab_cases(model: str, rounds: int = 20) -> dict:
    """Bad arguments to a live Lab, then every call after shutdown(); `rounds` of each."""
    from da_lab.engine.lab import Lab

    res = {"calls": 0, "clear": 0, "unclear": []}

    def expect(name: str, call, kind: type, says: str) -> None:
        res["calls"] += 1
        try:
            call()
        except kind as e:
            if says in str(e) and "NoneType" not in str(e):
                res["clear"] += 1
                return
            res["unclear"].append(f"{name}: {type(e).__name__}: {e}"[:200])
        except Exception as e:   # noqa: BLE001 - counted: any other error is unclear
            res["unclear"].append(f"{name}: {type(e).__name__}: {e}"[:200])
        else:
            res["unclear"].append(f"{name}: accepted")

    lab = Lab(model)
    seed = lab.seed_prompt()
    _steer_after_closing(lab, res)
    for _ in range(rounds):
        expect("string prompt", lambda: lab.add_request("What is key 3?"), TypeError,
               "lab.encode")
        expect("float ids", lambda: lab.add_request([1, 2.5]), TypeError, "must be ints")
        expect("float tag index", lambda: lab.add_request(seed, tags=[(1.7, "<local>")],
                                                          max_tokens=20),
               ValueError, "whole number")
        expect("None tag", lambda: lab.add_request(seed, tags=[(2, None)], max_tokens=20),
               ValueError, "tag text")
    lab.shutdown()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, call in (("step", lab.step), ("run", lab.run),
                               ("add_request", lambda: lab.add_request(seed)),
                               ("has_unfinished", lab.has_unfinished),
                               ("record", lambda: lab.record(Path(tmp) / "t.jsonl.gz")),
                               ("steer", lambda: lab.steer("x", "<local>"))):
                expect(name, call, RuntimeError, "this Lab has been shut down")
    lab.shutdown()
    return res
