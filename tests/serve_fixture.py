"""A real `da-lab serve` process for the server tests: started on 127.0.0.1 at a free port,
stopped (with vLLM's engine processes) when the test module ends."""

from __future__ import annotations

import os
import time
from importlib.metadata import entry_points
from pathlib import Path

from da_lab.serve.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 600


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


class Server(ServerProcess):
    def __init__(self, tmp: Path, args: list[str], env: dict | None = None) -> None:
        self.trace = tmp / "server.jsonl.gz"      # DA_LAB_TRACE: the hook's step records
        run_env = dict(os.environ, DA_LAB_TRACE=str(self.trace), **(env or {}))
        # The server as a user starts it: not the in-process engine mode a Lab started earlier
        # in this test process set for itself (engine/env.LAB_ENV)
        if "VLLM_ENABLE_V1_MULTIPROCESSING" not in (env or {}):
            run_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        path = [str(ROOT), _plugin_overlay(tmp), run_env.get("PYTHONPATH")]
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        super().__init__(tmp / "server.log", args, run_env, cwd=tmp, timeout=START_TIMEOUT_S)

    def written_trace(self, send) -> Path:
        """The server's trace file, once it exists: the worker writes it at its first DA step,
        so when no DA request ran yet `send()` runs one (30 s at most for the file)."""
        if not self.trace.exists():
            send()
            deadline = time.monotonic() + 30
            while not self.trace.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        return self.trace
