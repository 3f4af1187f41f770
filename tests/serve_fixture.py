"""A real `da-lab serve` process for the server tests: started on 127.0.0.1 at a free port,
stopped (with vLLM's engine processes) when the test module ends."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 300


def _plugin_overlay(tmp: Path) -> str | None:
    """A folder whose dist-info declares da_lab's endpoint plugin, for a checkout whose installed
    metadata predates it (an editable install made before pyproject.toml named it; `make test`
    reinstalls and needs none). vLLM finds endpoint plugins through entry points only."""
    want = "da_lab.serve.endpoint:DAEndpoints"
    if any(e.value == want for e in entry_points(group="vllm.endpoint_plugins")):
        return None
    info = tmp / "plugin_overlay" / "da_lab_serve_plugin-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: da-lab-serve-plugin\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.endpoint_plugins]\nda_lab = {want}\n")
    return str(info.parent)


class Server:
    def __init__(self, tmp: Path, args: list[str], env: dict | None = None) -> None:
        self.log_path = tmp / "server.log"
        self.trace = tmp / "server.jsonl.gz"      # DA_LAB_TRACE: the hook's step records
        run_env = dict(os.environ, DA_LAB_TRACE=str(self.trace), **(env or {}))
        path = [str(ROOT), _plugin_overlay(tmp), run_env.get("PYTHONPATH")]
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        self._log = open(self.log_path, "w")      # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "da_lab.cli", "serve", "--port", "0", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=run_env, cwd=tmp,
            start_new_session=True)
        self.url = self._wait_ready()

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            m = re.search(r"da-lab: serving .* at (http://\S+)/v1", self.log_path.read_text())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("da-lab serve did not come up:\n" + self.log_path.read_text()[-4000:])

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        """SIGTERM to `da-lab serve` (it passes it to vLLM); the process group if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)    # our own group: vLLM's children too
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._log.close()
