"""The lessons' poll-slice patch (notebooks/conftest.py) holds only where it was measured: the
releases it names are the lock's, another release stops the run with what to do, and a run whose
missed wake-ups pass the stated ceiling fails (issue 54, item 4)."""

import importlib.util
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def nbconf():
    spec = importlib.util.spec_from_file_location("nb_conftest", ROOT / "notebooks/conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_patch_names_the_locked_releases(nbconf):
    lock = set((ROOT / "requirements/cpu.lock").read_text().split())
    assert {f"{p}=={v}" for p, v in nbconf.MEASURED_ON.items()} <= lock


def test_another_release_stops_the_run_with_what_to_do(nbconf, monkeypatch):
    real = metadata.version
    monkeypatch.setattr(metadata, "version",
                        lambda p: "9.0.0" if p == "jupyter_client" else real(p))
    with pytest.raises(RuntimeError, match=r"jupyter_client': '9.0.0'.*Re-measure"):
        nbconf._check_releases()


def test_missed_wakeups_past_the_ceiling_fail_the_run(nbconf, monkeypatch):
    lines = []
    session = SimpleNamespace(exitstatus=0, config=SimpleNamespace(
        get_terminal_writer=lambda: SimpleNamespace(line=lambda t, **kw: lines.append(t))))
    monkeypatch.setattr(nbconf, "MISSED", ["stream"] * nbconf.MISSED_CEILING)
    nbconf.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0 and not lines
    monkeypatch.setattr(nbconf, "MISSED", ["stream"] * (nbconf.MISSED_CEILING + 1))
    nbconf.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1 and "over the ceiling" in lines[0]
