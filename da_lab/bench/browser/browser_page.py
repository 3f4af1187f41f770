"""The page every browser benchmark drives: a JupyterLab server on localhost with a one-cell
notebook (the kernel builds Players there), and headless Chromium (Playwright) with a DevTools
session, as tests/test_browser.py does. da_lab/bench/browser/diagrams_browser.py uses it, once per
checkout
(the kernel imports that checkout's da_lab and widgets)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = os.environ.get("BROWSER_PATH", "/usr/bin/chromium")
NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "id": "bench-00",
                       "metadata": {}, "outputs": [], "source":
                       "import ipywidgets as W\nbox = W.VBox([])\nbox"}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on localhost with the bench notebook; stopped on exit."""

    def __init__(self, code: Path = ROOT) -> None:
        """`code`: the checkout whose da_lab and widgets the kernel imports."""
        self.root = Path(tempfile.mkdtemp(prefix="da-bench-"))
        (self.root / "bench.ipynb").write_text(json.dumps(NOTEBOOK))
        self.port, self.token = _free_port(), secrets.token_hex(16)
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(
            [str(code), str(code / "widgets"), os.environ.get("PYTHONPATH", "")]))
        self.log = open(self.root / "server.log", "w")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
             f"--port={self.port}", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={self.root}", "--LabApp.expose_app_in_browser=True",
             "--allow-root"], stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Lab:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=1)
                return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError("JupyterLab did not start: "
                           + (self.root / "server.log").read_text()[-2000:])

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def traces_named(prefixes: list[str] | None) -> list[Path]:
    """The shipped traces whose names start with one of `prefixes` (all when none)."""
    return [p for p in sorted((ROOT / "traces").glob("*.jsonl.gz"))
            if not prefixes or p.name.startswith(tuple(prefixes))]


@contextlib.contextmanager
def chromium_page(width: int = 1440, height: int = 900, domains: tuple[str, ...] = (),
                  code: Path = ROOT):
    """A JupyterLab (Lab) and a headless Chromium page with a DevTools session: (page, cdp,
    lab); the DevTools `domains` enabled. The caller opens the notebook (open_notebook) once
    whatever must watch the page from the start is attached."""
    from playwright.sync_api import sync_playwright

    with Lab(code) as lab, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            cdp = page.context.new_cdp_session(page)
            for d in domains:
                cdp.send(f"{d}.enable")
            yield page, cdp, lab
        finally:
            browser.close()


def open_notebook(page, lab: Lab) -> None:
    page.goto(f"{lab.url}/lab/tree/bench.ipynb?token={lab.token}")
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=180_000)
    page.wait_for_selector(".jp-Notebook", timeout=180_000)
    page.wait_for_function(
        "(() => { const w = window.jupyterapp.shell.currentWidget;"
        " const k = w && w.sessionContext && w.sessionContext.session"
        " && w.sessionContext.session.kernel; return k && k.status === 'idle'; })()",
        timeout=180_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_selector(".jp-OutputArea .widget-vbox", state="attached", timeout=180_000)


# Run code in the notebook's kernel; resolves to its stdout (and any error).
KERNEL_EXEC = """async (code) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const fut = k.requestExecute({code, store_history: false});
  let out = '';
  fut.onIOPub = (m) => {
    if (m.header.msg_type === 'stream') out += m.content.text;
    if (m.header.msg_type === 'error') out += 'ERROR ' + m.content.ename + ': ' + m.content.evalue;
  };
  await fut.done;
  return out;
}"""


def kernel(page, code: str) -> str:
    out = page.evaluate(KERNEL_EXEC, code)
    if "ERROR" in out:
        raise RuntimeError(out[-2000:])
    return out


class Wire:
    """Bytes on the page's websockets (the kernel channel): to the page and from it."""

    def __init__(self, page) -> None:
        self.recv = self.sent = 0
        page.on("websocket", self._attach)

    def _attach(self, ws) -> None:
        ws.on("framereceived", lambda f: self._add("recv", f))
        ws.on("framesent", lambda f: self._add("sent", f))

    def _add(self, way: str, frame) -> None:
        n = len(frame.encode() if isinstance(frame, str) else frame)
        setattr(self, way, getattr(self, way) + n)

    def take(self) -> tuple[int, int]:
        out = self.recv, self.sent
        self.recv = self.sent = 0
        return out
