"""Where `make install` gets torch+cpu: the configured pip indexes when they offer the locked
build, otherwise PyTorch's own CPU wheel index (torch's +cpu builds are not on PyPI).

    python tools/torch_source.py requirements/cpu.lock

prints the pip arguments that install torch alone before the lock (nothing when the configured
indexes have it or it is installed already) and, when it adds PyTorch's index, one line saying
so on stderr. The probe is `pip index versions torch`: it reads the listings for this
interpreter, downloads no wheel and installs nothing. It asks the local find-links folders first
(`--no-index`: no network), and the configured indexes only when those don't settle it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CONFIGURED = "configured indexes have it"
INSTALLED = "already installed"
PYTORCH = "PyTorch's CPU index added"


@dataclass(frozen=True)
class Decision:
    reason: str                 # CONFIGURED, INSTALLED or PYTORCH
    pip_args: tuple[str, ...]   # a separate `pip install --no-deps` of torch; () when not needed
    message: str                # the line `make` shows; "" when nothing changes


def _listed(probe: str, label: str) -> list[str]:
    """The versions on the probe's "<label>:" line, e.g. "Available versions: 2.1, 2.0"."""
    m = re.search(rf"^\s*{label}:\s*(.*)$", probe, re.MULTILINE)
    return [v.strip().lower() for v in m.group(1).split(",")] if m else []


def decide(probe: str, version: str) -> Decision:
    """From `pip index versions torch`'s output (stdout and stderr), where torch==version comes
    from. Versions match exactly: "2.13.0" on PyPI is not "2.13.0+cpu". A failed probe (no
    network, an unknown command) lists nothing and falls back to PyTorch's index."""
    version = version.strip().lower()
    if version in _listed(probe, "Available versions"):
        return Decision(CONFIGURED, (), "")
    if version in _listed(probe, "INSTALLED"):
        return Decision(INSTALLED, (), "")
    return Decision(PYTORCH, ("--extra-index-url", PYTORCH_CPU_INDEX, f"torch=={version}"),
                    f"torch {version} is not on the configured pip indexes: installing it "
                    f"from PyTorch's CPU wheel index ({PYTORCH_CPU_INDEX})")


def locked_torch(lock: Path) -> str:
    m = re.search(r"^torch==([^\s;#\\]+)", lock.read_text(), re.MULTILINE)
    if not m:
        raise SystemExit(f"{lock}: no torch==<version> line")
    return m.group(1)


def probe(offline: bool = False, python: str = sys.executable) -> str:
    """What pip's configuration offers this interpreter (stdout and stderr together); offline:
    the find-links folders only."""
    cmd = [python, "-m", "pip", "index", "versions", "torch"] + (["--no-index"] * offline)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"probe failed: {e}"
    return run.stdout + run.stderr


def choose(version: str, run_probe=probe) -> Decision:
    d = decide(run_probe(offline=True), version)
    return d if d.reason != PYTORCH else decide(run_probe(), version)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: torch_source.py <requirements lock>", file=sys.stderr)
        return 2
    d = choose(locked_torch(Path(argv[0])))
    if d.message:
        print(d.message, file=sys.stderr)
    print(" ".join(d.pip_args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
