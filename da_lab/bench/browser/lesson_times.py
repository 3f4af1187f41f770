"""Benchmark: how long each lesson takes, as a learner meets it, with the machine's load.

    BROWSER_PATH=/usr/bin/chromium python -m da_lab.bench.browser.lesson_times \\
        [--notebooks 00_tour.ipynb ...] [--out bench/results/lesson-times-DATE.json]

JupyterLab started as `make lab` starts it (tools/lab_files.py: copies of the lessons, its
settings and flags) on this checkout's notebooks, and headless Chromium at 1366x768. Each lesson
in turn: opened in a workspace of its own, its kernel started (the clock starts when the kernel
is idle), Run All pressed; read from the page every 100 ms:

- first screen: the first code cell has run (the engine's start in 00–04 and 06, the server's
  in 07; in 05 the model's name) — what a learner waits for before anything moves;
- player ready: the first player on the page has drawn a step;
- Run All done: every code cell has run and the kernel is idle.

The load average (1 minute) before and after each lesson says how busy the shared machine was.
Each lesson gets a fresh kernel (so the engine starts, as on a first visit); its kernel is shut
down before the next. A lesson that writes to stderr is marked, not hidden.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KERNEL_IDLE = ("(() => { const w = window.jupyterapp.shell.currentWidget; const k = w && "
               "w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
               " return !!k && k.status === 'idle'; })()")
# what the page shows, polled: code cells run (a count and no '*'), a player drawn, stderr
STATE_JS = """() => { const p = window.jupyterapp.shell.currentWidget;
    const code = p.content.widgets.filter(c => c.model.type === 'code');
    const ran = (c) => c.model.executionCount !== null
        && !(c.node.querySelector('.jp-InputPrompt') || {}).textContent?.includes('*');
    const k = p.sessionContext.session && p.sessionContext.session.kernel;
    return {first: code.length > 0 && ran(code[0]), all: code.every(ran),
            idle: !!k && k.status === 'idle',
            player: !!p.node.querySelector('[data-da-player][data-da-drawn]'),
            stderr: p.content.widgets.some(c => c.model.type === 'code' && c.model.outputs
                .toJSON().some(o => o.output_type === 'error' || o.name === 'stderr'))}; }"""


def _lab_files():
    spec = importlib.util.spec_from_file_location("lab_files", ROOT / "tools" / "lab_files.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _server(work: Path):
    """`jupyter lab` as make lab starts it, on `work`; (process, url, token)."""
    lf = _lab_files()
    lf.write_settings(work)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = lf.server_env(work, dict(os.environ))
    env.pop("DA_LAB_MODEL", None)           # the learner's default model
    env.update(JUPYTERLAB_SETTINGS_DIR=str(work / ".user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / ".workspaces"))
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", *lf.server_flags(work),
            f"--port={port}", f"--IdentityProvider.token={token}",
            "--LabApp.expose_app_in_browser=True"]
    if os.getuid() == 0:
        argv.append("--allow-root")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(480):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
            return proc, url, token
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("JupyterLab did not start")


def time_lesson(page, url: str, token: str, name: str, k: int, limit_s: float) -> dict:
    """One lesson, Run All from its kernel's start: the times of its first screen, its first
    player and the end of Run All, with the load average before and after."""
    page.goto(f"{url}/lab/workspaces/bench-{k}/tree/{name}?reset&token={token}", timeout=300_000)
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=300_000)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=300_000)
    page.wait_for_function(KERNEL_IDLE, timeout=300_000)
    load0 = os.getloadavg()[0]
    # not awaited: the command's promise resolves only when every cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    t0, got = time.monotonic(), {}
    while True:
        page.wait_for_timeout(100)
        st, t = page.evaluate(STATE_JS), round(time.monotonic() - t0, 1)
        if st["first"]:
            got.setdefault("first_screen_s", t)
        if st["player"]:
            got.setdefault("player_ready_s", t)
        if st["all"] and st["idle"]:
            got.setdefault("run_all_s", t)
            # the player draws after its cell has run: wait for it (a minute at most)
            if "player_ready_s" in got or t > got["run_all_s"] + 60:
                break
        if t > limit_s:
            got["gave_up_at_s"] = t
            break
    stderr = page.evaluate(STATE_JS)["stderr"]
    page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")
    return {"notebook": name, **got, "stderr": stderr,
            "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def run(notebooks: list[str], limit_s: float) -> list[dict]:
    from playwright.sync_api import sync_playwright

    base = Path(tempfile.mkdtemp(prefix="da-lesson-times-"))
    work = base / "work"
    work.mkdir()
    for name in ("traces", "bench"):
        (base / name).symlink_to(ROOT / name)
    for nb in notebooks:
        shutil.copy(ROOT / "notebooks" / nb, work / nb)
    proc, url, token = _server(work)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=os.environ.get("BROWSER_PATH", "/usr/bin/chromium"),
                args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
            out = []
            for k, nb in enumerate(notebooks):
                page = browser.new_page(viewport={"width": 1366, "height": 768})
                out.append(time_lesson(page, url, token, nb, k, limit_s))
                print(json.dumps(out[-1]), file=sys.stderr, flush=True)
                page.close()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notebooks", nargs="*",
                    default=sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
    ap.add_argument("--limit", type=float, default=1500, help="seconds a lesson may take")
    ap.add_argument("--out", help="also write the result here (bench/results/...json)")
    args = ap.parse_args()
    t0 = time.monotonic()
    lessons = run(args.notebooks, args.limit)
    doc = {"command": "python -m da_lab.bench.browser.lesson_times " + " ".join(sys.argv[1:]),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "host": {"cpus": os.cpu_count(), "machine": os.uname().machine},
           "wall_s": round(time.monotonic() - t0, 1), "lessons": lessons}
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
