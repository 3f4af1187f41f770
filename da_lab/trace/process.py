"""A trace writer whose encoding and compression run in a child process.

One step record at batch 64 and 8k context holds ~130k block ids; JSON-encoding and
compressing it takes tens of milliseconds. On the engine's thread that time comes straight off
decode throughput, and a thread beside it would hold the GIL the engine needs. So
`ProcessTraceWriter.write()` only checks the record's shape and pickles it (numpy rows stay
arrays: a memory copy), and a feeder thread sends it down a pipe to a child process, which
writes it with a plain `TraceWriter`. The file is exactly what `TraceWriter` writes.

- Order: one pipe, one feeder, one child: records land in the order they were written.
- Bounded: at most `max_pending` records wait in this process; a child that falls behind
  slows `write()` down instead of filling memory.
- Nothing lost: `close()` waits until the child has written and closed the file. If this
  process dies first, the child sees the pipe close and still closes the file.
- Detached (`detach=True`, a server's trace): the child leaves this process's tree and session,
  so a shutdown that kills the engine's process tree (vLLM's, on SIGTERM or Ctrl-C: it does
  not wait for its workers) or its process group can't kill it: it reads what the pipe holds,
  closes the file and exits. While the file is open the child holds an exclusive flock on it;
  `wait_closed(path)` returns once it is released (`da-lab serve` waits so before it exits).
- Errors: the child's first error is raised by the next `write()` and by `close()`.
"""

from __future__ import annotations

import atexit
import functools
import os
import pickle
import queue
import re
import secrets
import select
import subprocess
import sys
import threading
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from da_lab.core.record import StepRecord
from da_lab.trace.format import ROW_GROUP_SIZE, TraceError, check_writable, compact_json, format_of
from da_lab.trace.writer import TraceWriter

__all__ = ["ProcessTraceWriter", "ArrayReuseEncoder"]


class ProcessTraceWriter:
    """`TraceWriter`'s interface (write, close, count, path, header; a context manager), with
    the work done in a child process (`python -m da_lab.trace.process`, started in well under
    a second; not multiprocessing, which would re-run the caller's main script in it)."""

    def __init__(self, path, header: dict, *, row_group_size: int = ROW_GROUP_SIZE,
                 max_pending: int = 16, detach: bool = False) -> None:
        self.path = Path(path)
        format_of(self.path)                   # an unknown format fails here, not in the child
        if not isinstance(header, dict):
            raise TraceError(f"{self.path}: header must be a dict, got {type(header).__name__}")
        self.count = 0
        self._closed = False
        self._error: BaseException | None = None
        records_r, records_w = os.pipe()
        results_r, results_w = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])      # where da_lab is importable from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        # Only the child's two ends are passed: when this process closes (or loses) the
        # writing end, the child reads EOF, writes what it has and closes the file.
        self._detached = bool(detach)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "da_lab.trace.process", str(records_r), str(results_w)]
            + (["--detach"] if detach else []),
            pass_fds=(records_r, results_w), env=env, stdin=subprocess.DEVNULL)
        os.close(records_r)
        os.close(results_w)
        self._records = Connection(records_w, readable=False)
        self._results = Connection(results_r, writable=False)
        # Checked on every write(): a poll object is ~50x cheaper than Connection.poll().
        self._results_ready = select.poll()
        self._results_ready.register(results_r, select.POLLIN)
        self._records.send((str(self.path), header, row_group_size))
        kind, value = self._receive()
        if kind != "ready":
            self._records.close()
            self._results.close()
            self._proc.wait()
            raise value
        self.header = value
        self._pending: queue.Queue = queue.Queue(max(1, int(max_pending)))
        self._feeder = threading.Thread(target=self._feed, name="da-lab-trace-feeder",
                                        daemon=True)
        self._feeder.start()
        # Close at interpreter exit if the caller did not: the records sent so far are kept.
        self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    # ---- this process ----------------------------------------------------------------------
    def write(self, record: StepRecord | dict) -> None:
        """Queue one record (a StepRecord, pickled with its numpy rows; or its JSON dict)."""
        if self._closed:
            raise TraceError(f"{self.path}: write() after close()")
        self._raise_child_error()
        check_writable(self.path, self.count, record)
        # Pickled now: later changes to the caller's record do not reach the file.
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending.put(data)
        self.count += 1

    def wait_sent(self) -> None:
        """Return once every record written so far is in the pipe to the child (from then on
        it reaches the file even if this process dies)."""
        self._pending.join()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        self._pending.put(None)
        self._feeder.join()
        while self._error is None:
            kind, value = self._receive()
            if kind == "done":
                break
            if kind == "error":
                self._error = value
        self._proc.wait()
        self._results.close()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> ProcessTraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _feed(self) -> None:
        """Feeder thread: hand pickled records to the child, in order. Blocking pipe writes
        release the GIL, so the engine's thread runs on meanwhile."""
        broken = False
        while True:
            data = self._pending.get()
            if data is None:
                break
            try:
                if not broken:      # else keep draining so write() never blocks on a dead child
                    self._records.send_bytes(data)
            except OSError:         # the child died; _receive() says why
                broken = True
            finally:
                self._pending.task_done()
        self._pending.task_done()
        self._records.close()       # the child's EOF: write the rest, close the file

    def _receive(self) -> tuple[str, object]:
        try:
            return self._results.recv()
        except (EOFError, OSError):
            try:
                code = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            # Detached, the process waited for is the one that started the writer and left.
            said = "" if self._detached else f" (exit code {code})"
            return "error", TraceError(f"{self.path}: the trace writer process ended "
                                       f"unexpectedly{said}")

    def _raise_child_error(self) -> None:
        if self._error is None and self._results_ready.poll(0):
            kind, value = self._receive()
            if kind == "error":
                self._error = value
        if self._error is not None:
            raise self._error


def _close_at_exit(ref) -> None:
    writer = ref()
    if writer is not None:
        try:
            writer.close()
        except Exception:   # noqa: BLE001 - at exit there is no one left to tell
            pass


# ---- the child process ---------------------------------------------------------------------
class _ReusingTraceWriter(TraceWriter):
    """A TraceWriter that encodes repeated arrays once (see ArrayReuseEncoder)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = ArrayReuseEncoder()

    def _encode(self, record: dict) -> str:
        return self._encoder.dumps(record)


def wait_closed(path, timeout: float) -> bool:
    """Wait until no trace writer holds `path` open (its child releases the flock once the file
    is closed); False when one still does after `timeout` seconds. True for a missing file."""
    import fcntl
    import time

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
    finally:
        os.close(fd)


def _detach() -> None:
    """Leave the parent's process tree and session: the parent's Popen sees this process exit
    at once, and a grandchild (adopted by init) goes on with the inherited pipes."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def _child(records_fd: int, results_fd: int) -> None:
    import fcntl
    import signal

    # Ctrl-C reaches the whole process group; the parent decides when recording ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    records = Connection(records_fd, writable=False)
    results = Connection(results_fd, readable=False)

    def tell(message) -> None:
        try:
            results.send(message)
        except OSError:         # the parent is gone (a server's stop): the file still closes
            pass

    try:
        path, header, row_group_size = records.recv()
        writer = _ReusingTraceWriter(path, header, row_group_size=row_group_size)
        lock = os.open(path, os.O_RDONLY)       # held until the file is closed: wait_closed
        fcntl.flock(lock, fcntl.LOCK_EX)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        tell(("error", _sendable(e)))
        return
    tell(("ready", writer.header))
    error = None
    while True:
        try:
            data = records.recv_bytes()
        except (EOFError, OSError):
            break
        if error is not None:
            continue                # drain: the parent's writes must not block
        try:
            writer.write(pickle.loads(data))
        except BaseException as e:  # noqa: BLE001
            error = e
            tell(("error", _sendable(e)))
    try:
        writer.close()
    except BaseException as e:  # noqa: BLE001
        if error is None:
            error = e
            tell(("error", _sendable(e)))
    os.close(lock)                  # the file is complete: wait_closed() may return
    if error is None:
        tell(("done", writer.count))


def _sendable(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:   # noqa: BLE001 - an exception that does not pickle: keep its message
        return TraceError(f"{type(e).__name__}: {e}")


# ---- encoding --------------------------------------------------------------------------------
class ArrayReuseEncoder:
    """`compact_json(record)`, exactly, for records holding numpy arrays (the hook's block rows),
    faster when arrays repeat: from one step to the next a request's staged row only grows by
    a block every block_size tokens, and its kept blocks change only with its directive. Each
    distinct array is encoded once and reused while it keeps appearing.

    The arrays of a record's requests and metadata are swapped for placeholder strings, the
    rest is encoded by json, and the placeholders are replaced by the arrays' JSON text."""

    def __init__(self) -> None:
        tag = secrets.token_hex(8)          # no real string in a record carries it
        self._tag = f"\x00{tag}:"
        self._find = re.compile(r'"\\u0000' + tag + r':(\d+)"')
        self._known: dict[tuple, str] = {}  # arrays of the last record: their JSON text

    def dumps(self, record: dict) -> str:
        texts: list[str] = []
        used: dict[tuple, str] = {}

        def swap(d):
            if not isinstance(d, dict):
                return d
            out = {}
            for k, v in d.items():
                if isinstance(v, np.ndarray) and not v.dtype.hasobject:
                    key = (v.dtype.str, v.shape, v.tobytes())
                    text = used.get(key) or self._known.get(key) or compact_json(v.tolist())
                    used[key] = text
                    out[k] = f"{self._tag}{len(texts)}"
                    texts.append(text)
                else:
                    out[k] = v
            return out

        rec = dict(record)
        if isinstance(rec.get("requests"), list):
            rec["requests"] = [swap(r) for r in rec["requests"]]
        if "metadata" in rec:
            rec["metadata"] = swap(rec["metadata"])
        line = compact_json(rec)
        self._known = used
        return self._find.sub(lambda m: texts[int(m.group(1))], line) if texts else line


if __name__ == "__main__":
    if "--detach" in sys.argv[3:]:
        _detach()
    _child(int(sys.argv[1]), int(sys.argv[2]))
