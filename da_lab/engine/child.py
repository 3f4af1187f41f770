"""The one way the lab runs vLLM in a child process and reads back one JSON document.

Why a child: vLLM keeps one in-process engine per process (the notebook may hold the Lab's),
and a configuration measured in its own process inherits no plugin, compiled graph or
allocator state from another. The child writes its document either as the last line of its
stdout (`run_json`) or to a file (`ChildProcess`, for children that run in parallel or wait
for their turn); it gets `env.child_env()` so it imports this copy of da_lab with the lab's
settings. A child that fails gives a `ChildError` carrying its exit status and stderr tail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from da_lab.engine.env import child_env

TAIL_CHARS = 3000


class ChildError(RuntimeError):
    """A child process failed: no (readable) document, a non-zero exit, or a timeout."""

    def __init__(self, what: str, message: str, *, returncode: int | None = None,
                 tail: str = "") -> None:
        self.returncode, self.tail = returncode, tail
        super().__init__(f"{what}: {message}" + (f"\n--- its last output ---\n{tail}"
                                                  if tail else ""))


def _tail(text: str, n: int = TAIL_CHARS) -> str:
    return text.strip()[-n:]


def last_json_line(text: str) -> dict:
    """The last non-empty line of `text` as a JSON object; ValueError when there is none."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("it wrote nothing on stdout")
    doc = json.loads(lines[-1])
    if not isinstance(doc, dict):
        raise ValueError(f"its last line is a JSON {type(doc).__name__}, not an object")
    return doc


def run_json(argv: list[str], *, env: dict | None = None, timeout: float = 900,
             what: str | None = None) -> dict:
    """Run `python ARGV...` (e.g. ["-m", "da_lab.bench.speed", "--steps", "8"]) with the lab's
    child environment plus `env`, and return the JSON object on its last stdout line."""
    what = what or "child " + " ".join(argv[:2])
    try:
        proc = subprocess.run([sys.executable, *argv], env=child_env(env), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise ChildError(what, f"did not finish within {timeout:.0f} s",
                         tail=_tail(err or "")) from None
    if proc.returncode:
        raise ChildError(what, f"exited with status {proc.returncode}",
                         returncode=proc.returncode, tail=_tail(proc.stderr))
    try:
        return last_json_line(proc.stdout)
    except ValueError as e:
        raise ChildError(what, f"no JSON document ({e})", returncode=0,
                         tail=_tail(proc.stderr)) from None


class ChildProcess:
    """`python ARGV...` started now, its stdout and stderr in `log`; the child writes its JSON
    document to `out` (rewriting it as it goes, so a crash keeps what it had). `wait()` returns
    (document, error): the document read from `out` ({} when none) and None or what went wrong
    (exit status, timeout, unreadable document), never raising for the child's failure."""

    def __init__(self, argv: list[str], *, out: Path, log: Path, env: dict | None = None,
                 defaults: dict | None = None, what: str | None = None) -> None:
        self.argv, self.out, self.log_path = argv, Path(out), Path(log)
        self.what = what or "child " + " ".join(argv[:2])
        self.t_start = time.time()
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, *argv], stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=child_env(env, defaults=defaults))

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def log_tail(self, n: int = TAIL_CHARS) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace"), n)
        except OSError:
            return ""

    def wait(self, timeout: float | None = None) -> tuple[dict, str | None]:
        err = None
        try:
            rc = self.proc.wait(timeout=timeout)
            if rc:
                err = f"child exited with status {rc}"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            err = f"child killed after {timeout:.0f} s"
        self._log.close()
        doc: dict = {}
        if self.out.exists():
            try:
                doc = json.loads(self.out.read_text())
            except ValueError as e:
                err = (err + "; " if err else "") + f"unreadable child output ({e})"
        elif err is None:
            err = "the child wrote no document"
        return doc, err

    def result(self, timeout: float | None = None) -> dict:
        """wait(), raising ChildError (with the log's tail) when anything went wrong."""
        doc, err = self.wait(timeout)
        if err:
            raise ChildError(self.what, err, returncode=self.proc.returncode,
                             tail=self.log_tail())
        return doc


def write_doc(path: str | Path, doc: dict) -> None:
    """The child's side of ChildProcess: replace `path` with `doc` atomically."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
