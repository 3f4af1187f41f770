"""A `da-lab serve` child process: started at a free port on 127.0.0.1, its URL read from the
line it prints once vLLM answers, stopped with its engine processes. The server tests and the
reliability run start their servers this way."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 600


class ServerProcess:
    def __init__(self, log_path: Path, args: list[str], env: dict | None = None,
                 cwd: Path | None = None, timeout: float = START_TIMEOUT_S) -> None:
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")      # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "da_lab.cli", "serve", "--port", "0", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
            start_new_session=True)
        self.url = self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"da-lab: serving .* at (http://\S+)/v1", self.log_path.read_text())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        log = self.log_path.read_text()
        causes = [ln for ln in log.splitlines() if "Error:" in ln and "Engine core init" not in ln]
        raise RuntimeError("da-lab serve did not come up: " + (causes[-1].strip() if causes else
                                                                 log[-4000:]))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text()

    def processes(self) -> list:
        """`da-lab serve` and every process under it (vLLM's, in a group of their own)."""
        import psutil

        try:
            top = psutil.Process(self.proc.pid)
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace_s: float = 60) -> None:
        """SIGTERM to `da-lab serve` (it passes it to vLLM); whatever lingers after `grace_s`
        is killed: its group and every process that was under it."""
        import psutil

        under = self.processes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)    # our own group
        except ProcessLookupError:
            pass
        for p in under:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait()
        self._log.close()
