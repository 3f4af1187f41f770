"""Run All -> player ready, for one notebook of a checkout: headless (nbclient) or in JupyterLab +
headless Chromium. The kernel is started first (as JupyterLab does when a notebook opens); the
clock starts at Run All.

    python -m da_lab.bench.browser.runall_time ROOT notebooks/04_da_hook.ipynb            # headless
    python -m da_lab.bench.browser.runall_time ROOT notebooks/04_da_hook.ipynb --browser  # \
        JupyterLab

Headless: per code cell up to the player's, wall seconds and the kernel's CPU seconds (all its
threads), and whether it wrote to stderr. Browser: when each cell's prompt settles and when the
player and its plots (points drawn) appear, read from the page every 100 ms. ROOT's own da_lab and
widgets are imported (PYTHONPATH), so two checkouts compare under the same environment.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CPU = ("import resource as _r; _u = _r.getrusage(_r.RUSAGE_SELF); "
       "_c0 = _u.ru_utime + _u.ru_stime\n")
CPU_END = ("\n_u = _r.getrusage(_r.RUSAGE_SELF); "
           "print('@@cpu', round(_u.ru_utime + _u.ru_stime - _c0, 2))")


def headless(nb_path: Path) -> str:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(nb_path, as_version=4)
    upto = next(i for i, c in enumerate(nb.cells) if "player.widget" in c.source) + 1
    nb.cells = nb.cells[:upto]
    for c in nb.cells:
        if c.cell_type == "code":
            c.source = CPU + c.source.replace("player.widget", "_w = player.widget") + CPU_END
    client = NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(nb_path.parent)}})
    out = []
    with client.setup_kernel():
        t0 = time.perf_counter()
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code":
                continue
            s = time.perf_counter()
            client.execute_cell(c, i)
            cpu = [o["text"].split()[-1] for o in c.outputs
                   if o.get("name") == "stdout" and "@@cpu" in o.get("text", "")]
            err = sum(o.get("name") == "stderr" or o.get("output_type") == "error"
                      for o in c.outputs)
            out.append(f"cell {i}: {time.perf_counter() - s:.1f} s wall, "
                       f"{cpu[-1] if cpu else '?'} s CPU, stderr outputs {err}")
        out.append(f"player ready {time.perf_counter() - t0:.1f} s after Run All")
    return " | ".join(out)


MARKS = ".scatterlayer .point, .scatterlayer path.js-line, .heatmaplayer image, .barlayer path"
WATCH = """() => { window.__ev = []; const t0 = performance.now(); const seen = {};
  const at = () => ((performance.now() - t0) / 1000).toFixed(1);
  const log = (...e) => __ev.push([at(), ...e]);
  setInterval(() => {
    document.querySelectorAll('.jp-CodeCell .jp-InputPrompt').forEach((el, i) => {
      const t = el.innerText.trim();
      if (seen[i] !== t) { seen[i] = t; log('cell' + i, t); } });
    if ((document.querySelector('.da-play')
         || document.querySelector('[data-da-player][data-da-drawn]')) && !seen.play) {
      seen.play = 1; log('player'); }
    const figs = [...document.querySelectorAll('.js-plotly-plot')];
    const d = figs.filter(f => f.querySelector(MARKS)).length + '/' + figs.length;
    if (figs.length && seen.drawn !== d) { seen.drawn = d; log('plots drawn ' + d); }
  }, 100); }""".replace("MARKS", repr(MARKS))
KERNEL_IDLE = ("(() => { const w = window.jupyterapp.shell.currentWidget; const k = w && "
               "w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
               " return k && k.status === 'idle'; })()")


def browser(root: Path, nb_path: Path) -> str:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp())
    (work / "notebooks").mkdir()
    shutil.copy(nb_path, work / "notebooks" / nb_path.name)
    os.symlink(root / "traces", work / "traces")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(8)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.expose_app_in_browser=True", "--allow-root", "--LabApp.news_url=None"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{root / 'widgets'}"))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=os.environ.get("BROWSER_PATH",
                                                                 "/usr/bin/chromium"),
                                  args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
            page = b.new_page(viewport={"width": 1500, "height": 2200})
            page.goto(f"{url}/lab/tree/notebooks/{nb_path.name}?token={token}")
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell",
                                   timeout=180_000)
            page.wait_for_selector(".jp-Notebook", timeout=180_000)
            page.wait_for_function(KERNEL_IDLE, timeout=180_000)
            page.evaluate(WATCH)
            # not awaited: the command's promise resolves only when every cell has run
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_selector(".da-play, [data-da-player][data-da-drawn]", timeout=300_000)
            page.wait_for_function(KERNEL_IDLE, timeout=600_000)
            events = page.evaluate("window.__ev")
            b.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return " ".join(f"{t} s {' '.join(e)};" for t, *e in events if e[-1] != "[*]:")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a checkout of da_lab")
    ap.add_argument("notebook", help="path inside the checkout, e.g. notebooks/00_tour.ipynb")
    ap.add_argument("--browser", action="store_true", help="JupyterLab + headless Chromium")
    args = ap.parse_args()
    root = args.root.resolve()
    os.environ["PYTHONPATH"] = f"{root}{os.pathsep}{root / 'widgets'}"
    load = os.getloadavg()[0]
    res = browser(root, root / args.notebook) if args.browser else headless(root / args.notebook)
    print(f"{root.name} {args.notebook} (load {load:.1f} -> {os.getloadavg()[0]:.1f}): {res}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
