"""`make install`'s system packages (tools/system_packages.sh) beside someone else's apt: it says
what it installs and why, waits while another apt or dpkg holds the lock (saying so), gives up
with a clear message after APT_LOCK_WAIT, and asks a user who is not root to install it. A
stand-in apt-get (APT_GET) plays the lock; the real one is what CI's `make test` runs as root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "system_packages.sh"
LOCKED = ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 "
          "(apt-get)\nE: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend),"
          " is another process using it?")


def _apt(tmp_path: Path, held: int) -> Path:
    """An apt-get that fails on the lock for its first `held` calls, then succeeds; it logs
    its arguments."""
    fake = tmp_path / "apt-get"
    fake.write_text(f"""#!/bin/sh
n=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/n
echo "$@" >> {tmp_path}/calls
if [ "$n" -lt {held} ]; then printf '%s\\n' "{LOCKED}" >&2; exit 100; fi
echo ok
""")
    fake.chmod(0o755)
    return fake


def _run(tmp_path: Path, held: int, wait: int, uid: str = "0"):
    env = dict(os.environ, APT_GET=str(_apt(tmp_path, held)), APT_LOCK_WAIT=str(wait),
               APT_LOCK_POLL="0.2", DA_LAB_UID=uid)
    return subprocess.run(["sh", str(SCRIPT), "chromium", "fonts-dejavu-core"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_held_lock_is_waited_for_and_said(tmp_path):
    run = _run(tmp_path, held=3, wait=60)
    assert run.returncode == 0, run.stderr
    assert "needs Debian's chromium fonts-dejavu-core" in run.stdout
    assert "Playwright" in run.stdout and "export" in run.stdout          # why
    assert run.stdout.count("another apt or dpkg holds the lock; waited") == 3
    assert run.stdout.rstrip().endswith("installed: chromium fonts-dejavu-core")
    calls = (tmp_path / "calls").read_text().splitlines()
    assert all("-o DPkg::Lock::Timeout=60" in c for c in calls)
    assert calls[-1].endswith("install -y -qq chromium fonts-dejavu-core")


def test_a_lock_held_past_the_wait_stops_make_with_what_to_do(tmp_path):
    run = _run(tmp_path, held=10**6, wait=1)
    assert run.returncode == 1
    assert "Gave up after 1 s: another apt or dpkg still holds the lock" in run.stderr
    assert "held by process 4242" in run.stderr                 # whose lock it is
    assert "run it again once the other package manager has finished" in run.stderr
    assert "install -y" not in (tmp_path / "calls").read_text()    # update never got through


def test_not_root_is_told_the_command(tmp_path):
    run = _run(tmp_path, held=0, wait=5, uid="1000")
    assert run.returncode == 1 and "sudo apt-get install chromium fonts-dejavu-core" in run.stderr
    assert not (tmp_path / "calls").exists()


def test_make_installs_system_packages_first_and_make_lab_none():
    make = (ROOT / "Makefile").read_text()
    assert "install: $(CHROMIUM) $(STAMP)" in make
    assert "tools/system_packages.sh chromium fonts-dejavu-core" in make
    lab = next(line for line in make.splitlines() if line.startswith("lab:"))
    assert "install" not in lab and "CHROMIUM" not in lab, lab
