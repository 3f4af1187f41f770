"""Benchmark: a fresh clone to diagram 4 animating, the way README's "Your first ten minutes" goes.

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python -m da_lab.bench.browser.first_ten_minutes \\
        [--repo .] [--notebook 00_tour.ipynb] [--out bench/results/first-ten-minutes-DATE.json]

1. `git clone` the repository into a scratch folder (a fresh clone: no .venv, no built model);
2. `make lab` there, exactly as a learner types it (install, lab files, the tiny model, then
   JupyterLab); the clock reads when it prints JupyterLab's URL;
3. headless Chromium (Playwright, 1366x768) opens the notebook from that URL, waits for its
   kernel, runs all cells (JupyterLab's own `notebook:run-all-cells` command), notes when the
   first cell (the engine's start) has run, waits for the player, presses ▶ and waits until the
   engine step on screen has moved on two steps and diagram 4 has drawn them.
Every phase's time from the start is reported, with the load average when it started and ended
(the machine is shared: the load says how busy it was). The only addition to what a learner
runs is a JupyterLab config on JUPYTER_CONFIG_PATH that exposes `window.jupyterapp` to the page
(how the test reads the kernel's state); `make lab` keeps a JUPYTER_CONFIG_PATH it is given.
What the machine already holds counts: pip's cache and the local wheel folder make the install
faster than on a laptop that downloads torch (the result says which pip cache was used).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
URL = re.compile(r"(http://127\.0\.0\.1:\d+)/lab\?token=([0-9a-f]+)")
KERNEL_IDLE = ("(() => { const w = window.jupyterapp.shell.currentWidget;"
               " const k = w && w.sessionContext && w.sessionContext.session"
               " && w.sessionContext.session.kernel; return k && k.status === 'idle'; })()")
# the step diagram 4 shows (an index into the run; the player's data-da-* hooks) and the
# engine step on screen
DA4_SHOWS = """() => { const d = document.querySelector('[data-da-diagram="4"]');
    return d && d.dataset.daShows !== undefined ? +d.dataset.daShows : null; }"""
STEP = """() => { const e = document.querySelector('[data-da-player]');
    const s = e && e.getAttribute('data-da-engine-step'); return s ? +s : null; }"""
FIRST_CELL = """() => { const c = window.jupyterapp.shell.currentWidget.content.widgets
    .find(c => c.model.type === 'code'); return !!c && c.model.executionCount !== null
    && !c.node.querySelector('.jp-InputPrompt').textContent.includes('*'); }"""


def _lab(clone: Path, log: Path, marks: dict, t0: float) -> subprocess.Popen:
    cfg = log.parent / "jupyter-config"      # inside the scratch folder: removed with it
    cfg.mkdir(exist_ok=True)
    (cfg / "jupyter_server_config.json").write_text(
        json.dumps({"LabApp": {"expose_app_in_browser": True}}))
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(cfg))
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "DA_LAB_MODEL"):     # a fresh shell has none
        env.pop(k, None)
    proc = subprocess.Popen(["make", "lab"], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def read():
        with log.open("w") as f:
            for line in proc.stdout:
                f.write(line)
                f.flush()
                if "url" not in marks and (m := URL.search(line)):
                    marks["url"] = (m.group(1), m.group(2))
                    marks["lab_url_s"] = round(time.monotonic() - t0, 1)

    threading.Thread(target=read, daemon=True).start()
    return proc


def _browser(url: str, token: str, notebook: str, marks: dict, t0: float) -> None:
    from playwright.sync_api import sync_playwright

    def mark(name):
        marks[name] = round(time.monotonic() - t0, 1)

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=os.environ.get("BROWSER_PATH",
                                                             "/usr/bin/chromium"),
                              args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = b.new_page(viewport={"width": 1366, "height": 768})
        page.goto(f"{url}/lab/tree/{notebook}?token={token}")
        page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=180_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=180_000)
        page.wait_for_function(KERNEL_IDLE, timeout=300_000)
        mark("kernel_ready_s")
        # not awaited: the command's promise resolves only when every cell has run
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.wait_for_function(f"({FIRST_CELL})()", timeout=600_000, polling=200)
        mark("first_cell_done_s")
        page.wait_for_selector("[data-da-player] [data-da-action=play]", timeout=600_000)
        mark("player_ready_s")
        page.wait_for_function(KERNEL_IDLE, timeout=600_000)
        mark("run_all_done_s")
        first = page.evaluate(STEP) or 0
        page.evaluate("document.querySelector('[data-da-diagram=\"4\"]').scrollIntoView()")
        page.locator("[data-da-player] [data-da-action=play]").first.click()
        mark("play_pressed_s")
        page.wait_for_function(f"(() => {{ const s = ({STEP})(); return s !== null && "
                               f"s >= {first + 2} && ({DA4_SHOWS})() >= 2; }})()",
                               timeout=300_000)
        mark("diagram4_animating_s")
        marks["step_seen"] = page.evaluate(STEP)
        marks["first_cell_s"] = round(marks["first_cell_done_s"] - marks["kernel_ready_s"], 1)
        b.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=str(ROOT), help="what to clone (default: this checkout)")
    ap.add_argument("--notebook", default="00_tour.ipynb")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the clone")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ftm-"))
    clone, log = work / "da_lab", work / "make-lab.log"
    marks: dict = {}
    load0 = round(os.getloadavg()[0], 2)
    t0 = time.monotonic()
    subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
    marks["clone_s"] = round(time.monotonic() - t0, 1)
    proc = _lab(clone, log, marks, t0)
    error = None
    try:
        while "url" not in marks:
            if proc.poll() is not None:
                raise RuntimeError(f"make lab exited with {proc.returncode}:\n"
                                   + log.read_text()[-3000:])
            if time.monotonic() - t0 > 1200:
                raise RuntimeError("make lab printed no URL in 20 minutes")
            time.sleep(0.5)
        _browser(*marks.pop("url"), args.notebook, marks, t0)
    except Exception as e:   # noqa: BLE001 - the document says how far it got
        error = f"{type(e).__name__}: {e}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    marks.pop("url", None)
    doc = {"command": "python -m da_lab.bench.browser.first_ten_minutes "
                      + " ".join(argv or sys.argv[1:]),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "code": subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip(),
           "machine": platform.machine(), "cpus": os.cpu_count(),
           "load_avg_1m_start": load0, "load_avg_1m_end": round(os.getloadavg()[0], 2),
           "pip_cache": os.environ.get("PIP_CACHE_DIR") or "~/.cache/pip (pip's default)",
           "notebook": args.notebook, "seconds_from_clone_start": marks, "error": error,
           "make_lab_log_tail": log.read_text()[-1500:] if error else None}
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
