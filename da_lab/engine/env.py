"""The lab's process environment, in one place: the settings vLLM must see before it is
imported, which vLLM is installed, and keeping fd 1 clean for one JSON document.

Every entry point that starts an engine (the Lab, the CLI, the bench and its children, the
checks, the variant engines of diagram 1) takes its settings from here, so a setting changes
in one place."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from da_lab.versions.releases import engine_name, engine_version  # noqa: F401 - re-exported

# Set before vLLM is imported: offline, in-process, a KV cache the CPU machine can afford.
LAB_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # A notebook should show the lab, not pages of engine logs; override to see them.
    "VLLM_LOGGING_LEVEL": "ERROR",
}
# vLLM's logs go to stderr, so a child's stdout carries only its JSON document.
LOG_TO_STDERR = {"VLLM_LOGGING_STREAM": "ext://sys.stderr"}
# A multi-process engine (TP workers) started after CUDA may have been touched in this process
# must spawn its workers: a forked child can't re-initialise CUDA (docs: DESIGN §8, TP=2 on
# the H200 failed with "Cannot re-initialize CUDA in forked subprocess" without it).
MULTIPROC_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}

# The folder da_lab is imported from: a child must import the same copy.
_ROOT = str(Path(__file__).resolve().parents[2])


def apply_env(overrides: dict | None = None, *, force: tuple[str, ...] = ()) -> dict:
    """Set LAB_ENV (and `overrides` on top of it) in this process where the caller has not;
    keys in `force` are set whatever the caller had. Returns the values now in effect."""
    want = {**LAB_ENV, **(overrides or {})}
    for k, v in want.items():
        if k in force:
            os.environ[k] = v
        else:
            os.environ.setdefault(k, v)
    return {k: os.environ[k] for k in want}


def child_env(overrides: dict | None = None, *, defaults: dict | None = None) -> dict:
    """The environment of a child process that imports vLLM: this process's environment,
    LAB_ENV and `defaults` where unset, then `overrides` (which win), logs on stderr, and
    PYTHONPATH leading to this copy of da_lab."""
    env = dict(os.environ)
    for k, v in {**LAB_ENV, **LOG_TO_STDERR, **(defaults or {})}.items():
        env.setdefault(k, v)
    env.update(overrides or {})
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys(filter(None, [_ROOT, *env.get("PYTHONPATH", "").split(os.pathsep)])))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@contextmanager
def json_stdout():
    """Point fd 1 (vLLM's logs, C++ prints) at stderr while the block runs and yield a file on
    the real stdout for the one JSON document. Restored on exit."""
    sys.stdout.flush()
    real_fd, saved_fd = os.dup(1), os.dup(1)
    saved_py = sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    real = os.fdopen(real_fd, "w")
    try:
        yield real
    finally:
        real.flush()
        real.close()
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved_py


def quiet_stdout():
    """json_stdout() for a process that exits after writing: no restore needed, returns the
    file on the real stdout (the CLI's --json commands)."""
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(real, "w")
