"""`make lab`'s preparation (not the server): JupyterLab gets copies of the notebooks, so autosave
leaves the committed ones clean, and a page config without the Jupyter news toast."""

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
_spec = importlib.util.spec_from_file_location("lab_files", ROOT / "tools" / "lab_files.py")
lf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lf)
BIN = Path(sys.executable).parent


def make(*args: str) -> subprocess.CompletedProcess:
    # BIN: this interpreter's venv, so make builds nothing; LAB_DIR is the test's own folder.
    return subprocess.run(["make", "-s", f"BIN={BIN}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def committed_state() -> tuple[str, dict]:
    status = subprocess.run(["git", "status", "--porcelain", "--", "notebooks"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    return status, {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in NOTEBOOKS.glob("*.ipynb")}


def with_output(path: Path) -> None:
    """What JupyterLab's autosave does after a run: outputs written into the open notebook."""
    nb = json.loads(path.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    code["execution_count"] = 1
    path.write_text(json.dumps(nb))


def test_make_lab_files_serves_copies_and_disables_news(tmp_path):
    work = tmp_path / "work"
    before = committed_state()
    run = make("lab-files", f"LAB_DIR={work}")
    assert run.returncode == 0, run.stderr
    assert "copies" in run.stdout and run.stderr == ""
    lessons = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert lessons
    for nb in lessons:
        copy = work / nb.name
        assert copy.is_file() and not copy.is_symlink()
        assert copy.read_bytes() == nb.read_bytes()
        assert os.stat(copy).st_ino != os.stat(nb).st_ino      # not a hard link either

    # The page config, read the way JupyterLab reads it with make lab's JUPYTER_CONFIG_PATH.
    settings = lf.config_dir(work) / "labconfig" / "page_config.json"
    assert settings.is_file()
    read = subprocess.run(
        [sys.executable, "-c", "from jupyterlab_server.config import get_page_config as g; "
         "import json; print(json.dumps(g([], None)['disabledExtensions']))"],
        env={**os.environ, "JUPYTER_CONFIG_PATH": str(lf.config_dir(work))},
        capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    assert lf.ANNOUNCEMENTS in json.loads(read.stdout.strip().splitlines()[-1])

    # A session: outputs autosaved into the copies; the committed notebooks stay as they were,
    # and the next make lab keeps the learner's copies.
    for nb in lessons:
        with_output(work / nb.name)
    again = make("lab-files", f"LAB_DIR={work}")
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    assert all('"ran\\n"' in (work / nb.name).read_text() for nb in lessons)
    assert committed_state() == before


def test_make_lab_command_line(tmp_path):
    """The server line: served from the copies, news off, localhost only, token auth kept."""
    work = tmp_path / "work"
    dry = make("-n", "lab", f"VENV={BIN.parent}", f"LAB_DIR={work}")
    assert dry.returncode == 0, dry.stderr
    server = dry.stdout[dry.stdout.index("JUPYTER_CONFIG_PATH="):]
    assert f"JUPYTER_CONFIG_PATH={lf.config_dir(work)}" in server
    # The browser test starts its server with server_flags/server_env: the same as make lab.
    assert lf.server_env(work, {})["JUPYTER_CONFIG_PATH"] == str(lf.config_dir(work))
    for flag in lf.server_flags(work):
        assert flag in server
    assert not re.search(r"token=|password=|disable_check_xsrf", server)
    assert f"tools/lab_files.py notebooks {work}" in dry.stdout


def lesson(folder: Path, name: str, *sources: str) -> Path:
    nb = {"cells": [{"cell_type": "code", "source": s, "outputs": [], "metadata": {},
                     "execution_count": None} for s in sources],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps(nb))
    return folder / name


def test_updates_reach_copies_without_losing_edits(tmp_path):
    src, work = tmp_path / "notebooks", tmp_path / "work"
    lesson(src, "a.ipynb", "x = 1")
    lesson(src, "b.ipynb", "y = 1")
    assert lf.prepare(src, work)[0].startswith("JupyterLab opens copies")
    with_output(work / "a.ipynb")                    # a: only run
    lesson(work, "b.ipynb", "y = 1  # my note")      # b: edited by the learner
    assert lf.prepare(src, work) == []               # lessons unchanged: copies untouched
    assert '"ran\\n"' in (work / "a.ipynb").read_text()

    lesson(src, "a.ipynb", "x = 2")
    lesson(src, "b.ipynb", "y = 2")
    said = lf.prepare(src, work)
    assert said == ["a.ipynb: updated to the new version of the lesson (run it again)",
                    "b.ipynb: the lesson changed and you had edited your copy; yours is kept "
                    "as b.mine.ipynb"]
    assert (work / "a.ipynb").read_bytes() == (src / "a.ipynb").read_bytes()
    assert (work / "b.ipynb").read_bytes() == (src / "b.ipynb").read_bytes()
    assert "my note" in (work / "b.mine.ipynb").read_text()

    # A second edited copy does not overwrite the first one kept aside; a deleted copy returns.
    lesson(work, "b.ipynb", "y = 2  # again")
    lesson(src, "b.ipynb", "y = 3")
    (work / "a.ipynb").unlink()
    assert lf.prepare(src, work) == ["b.ipynb: the lesson changed and you had edited your copy; "
                                     "yours is kept as b.mine-2.ipynb"]
    assert "my note" in (work / "b.mine.ipynb").read_text()
    assert (work / "a.ipynb").read_bytes() == (src / "a.ipynb").read_bytes()
