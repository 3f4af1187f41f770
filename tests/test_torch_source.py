"""Where `make install` gets torch+cpu (tools/torch_source.py): the decision on recorded outputs of
`pip index versions torch` (no network), and one real probe of this machine's configured indexes."""

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "cpu.lock"
_spec = importlib.util.spec_from_file_location("torch_source", ROOT / "tools" / "torch_source.py")
ts = sys.modules["torch_source"] = importlib.util.module_from_spec(_spec)   # dataclasses need it
_spec.loader.exec_module(ts)

EXPERIMENTAL = ("WARNING: pip index is currently an experimental command. It may be removed/"
                "changed in a future release without prior warning.\n")
# Recorded with pip 23.2.1. This machine: a find-links folder holds the +cpu wheel.
LOCAL_WHEELS = EXPERIMENTAL + """\
WARNING: Location 'file:///opt/pypi/simple/torch/' is ignored: it is neither a file nor a directory.
torch (2.15.0)
Available versions: 2.15.0, 2.14.1, 2.14.0, 2.13.0+cpu, 2.13.0, 2.12.1, 2.12.0, 2.11.0
"""
# A laptop: PyPI only (`--isolated`), torch not installed. PyPI's 2.13.0 is the CUDA build.
PYPI = EXPERIMENTAL + """\
torch (2.15.0)
Available versions: 2.15.0, 2.14.1, 2.14.0, 2.13.0, 2.12.1, 2.12.0, 2.11.0, 2.10.0, 2.9.1
"""
# A second `make install` after the lock changed: the index lacks it, the venv has it.
INSTALLED_ONLY = EXPERIMENTAL + """\
torch (2.14.1)
Available versions: 2.14.1
  INSTALLED: 2.13.0+cpu
  LATEST:    2.14.1
"""
# No network: the index can't be read.
OFFLINE = EXPERIMENTAL + "ERROR: No matching distribution found for torch\n"


def test_configured_indexes_win_when_they_have_it():
    d = ts.decide(LOCAL_WHEELS, "2.13.0+cpu")
    assert (d.reason, d.pip_args, d.message) == (ts.CONFIGURED, (), "")


def test_pypi_alone_adds_pytorchs_index_for_torch_only():
    d = ts.decide(PYPI, "2.13.0+cpu")    # "2.13.0" listed must not count as "2.13.0+cpu"
    assert d.reason == ts.PYTORCH
    assert d.pip_args == ("--extra-index-url", "https://download.pytorch.org/whl/cpu",
                          "torch==2.13.0+cpu")
    assert "\n" not in d.message and "https://download.pytorch.org/whl/cpu" in d.message


def test_installed_build_needs_no_index():
    assert ts.decide(INSTALLED_ONLY, "2.13.0+cpu").reason == ts.INSTALLED
    # ... but an installed build other than the locked one does not count.
    assert ts.decide(INSTALLED_ONLY, "2.14.0+cpu").reason == ts.PYTORCH


def test_failed_probe_falls_back_to_pytorchs_index():
    for probe in (OFFLINE, "", "ERROR: unknown command \"index\"\n", "probe failed: timed out"):
        assert ts.decide(probe, "2.13.0+cpu").reason == ts.PYTORCH


def test_local_folders_are_asked_first_and_indexes_only_when_needed():
    asked = []

    def recorded(local, remote):
        def run_probe(offline=False):
            asked.append(offline)
            return local if offline else remote
        return run_probe

    assert ts.choose("2.13.0+cpu", recorded(LOCAL_WHEELS, OFFLINE)).reason == ts.CONFIGURED
    assert asked == [True]
    asked.clear()
    assert ts.choose("2.13.0+cpu", recorded(OFFLINE, PYPI)).reason == ts.PYTORCH
    assert asked == [True, False]
    asked.clear()
    assert ts.choose("2.13.0+cpu", recorded(OFFLINE, LOCAL_WHEELS)).reason == ts.CONFIGURED


def test_lock_pin_is_read(tmp_path):
    """The torch pin is read off its own line: not a package whose name starts with torch,
    nor a comment, and a marker or hash after it is not part of the version."""
    lock = tmp_path / "cpu.lock"
    lock.write_text("# torch==9.9 in a comment\ntorch-einops-utils==0.2.0\n"
                    "torchvision==0.1 ; sys_platform == 'darwin'\n"
                    "torch==2.13.0+cpu ; platform_machine == 'x86_64' \\\n"
                    "    --hash=sha256:00\n")
    assert ts.locked_torch(lock) == "2.13.0+cpu"
    lock.write_text("torch==3.1.4#local build\n")
    assert ts.locked_torch(lock) == "3.1.4"
    lock.write_text("torchaudio==2.13.0\n")
    with pytest.raises(SystemExit, match="no torch==<version> line"):
        ts.locked_torch(lock)


def local_wheels(version: str) -> list[Path]:
    """torch `version` wheels in the find-links folders pip is configured with here."""
    cfg = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, timeout=60).stdout
    places = re.findall(r"find-links='([^']*)'", cfg) + [os.environ.get("PIP_FIND_LINKS", "")]
    return [w for p in " ".join(places).split()
            for w in Path(p.removeprefix("file://")).glob(f"torch-{version}-*.whl")]


def test_this_machine_real_probe():
    """One real probe of this machine's pip configuration, offline (the find-links folders):
    here a local folder holds torch 2.13.0+cpu, so the configured sources have it."""
    pin = ts.locked_torch(LOCK)
    d = ts.decide(ts.probe(offline=True), pin)
    if local_wheels(pin):
        assert d.reason == ts.CONFIGURED
    else:   # a machine without a local wheel: only an installed torch can settle it offline
        installed = importlib.metadata.version("torch") == pin
        assert d.reason == (ts.INSTALLED if installed else ts.PYTORCH)
    # The script as the Makefile runs it: no torch-only install, nothing said.
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "torch_source.py"), str(LOCK)],
                         capture_output=True, text=True, timeout=300)
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, "", "")
