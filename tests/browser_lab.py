"""The browser test's parts: JupyterLab started the way `make lab` starts it (tools/lab_files.py),
headless Chromium, and what the test reads back from the page (plotly's own data in each graph
div, the SVG it drew, element boxes and font sizes)."""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("BROWSER_PATH", "/usr/bin/chromium")
_spec = importlib.util.spec_from_file_location("lab_files", ROOT / "tools" / "lab_files.py")
lab_files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab_files)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`jupyter lab` on `work` with make lab's flags and settings; the learner's own JupyterLab
    settings and workspaces are kept out (a fresh folder each), so the test sees the defaults
    make lab gives."""

    def __init__(self, work: Path, model: str | None = "") -> None:
        """model: DA_LAB_MODEL for the kernels; None: unset (the learner's default model);
        "": as this process has it."""
        self.work = work
        self.pages = 0
        lab_files.write_settings(work)
        self.port, self.token = _free_port(), secrets.token_hex(16)
        env = lab_files.server_env(work, dict(os.environ))
        if model is None:
            env.pop("DA_LAB_MODEL", None)
        elif model:
            env["DA_LAB_MODEL"] = model
        env.update(JUPYTERLAB_SETTINGS_DIR=str(work / ".user-settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(work / ".workspaces"))
        argv = [sys.executable, "-m", "jupyterlab", "--no-browser", *lab_files.server_flags(work),
                f"--port={self.port}", f"--IdentityProvider.token={self.token}",
                "--LabApp.expose_app_in_browser=True"]
        if os.getuid() == 0:
            argv.append("--allow-root")
        self.log = work / "server.log"
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "w"), env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=1)
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("JupyterLab did not start: " + self.log.read_text()[-2000:])

    def notebook_url(self, name: str) -> str:
        """`name` alone, in a workspace of its own (a second tab would otherwise restore the
        first one's open notebooks too)."""
        self.pages += 1
        return (f"{self.url}/lab/workspaces/test-{self.pages}/tree/{name}"
                f"?reset&token={self.token}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def launch(playwright):
    if not shutil.which(CHROMIUM):
        raise RuntimeError(f"no Chromium at BROWSER_PATH={CHROMIUM!r}")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"])


# ---- driving JupyterLab ----------------------------------------------------------------------

KERNEL_IDLE = ("(() => { const w = window.jupyterapp.shell.currentWidget;"
               " const k = w && w.sessionContext && w.sessionContext.session"
               " && w.sessionContext.session.kernel; return k && k.status === 'idle'; })()")


def open_notebook(page, server: Server, name: str, *, side_panel: bool = True) -> None:
    """Open `name`, with the file browser shown in the left side panel, and wait for its
    kernel."""
    page.goto(server.notebook_url(name))
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=120_000)
    if side_panel:
        page.evaluate("window.jupyterapp.commands.execute('filebrowser:activate')")
        page.wait_for_function("!window.jupyterapp.shell.leftCollapsed", timeout=30_000)
    page.wait_for_function(KERNEL_IDLE, timeout=180_000)


def run_cells(page, indices: list[int]) -> None:
    """Queue the notebook's cells at `indices` (cell positions) for execution, in order."""
    page.evaluate("""async (indices) => {
        const panel = window.jupyterapp.shell.currentWidget;
        for (const k of indices) {
            panel.content.activeCellIndex = k;
            panel.content.deselectAll();
            window.jupyterapp.commands.execute('notebook:run-cell');
            await new Promise(r => setTimeout(r, 50));
        }
    }""", indices)


def code_cells(page) -> list[int]:
    return page.evaluate("""() => window.jupyterapp.shell.currentWidget.content.widgets
        .map((c, k) => [c.model.type, k]).filter(x => x[0] === 'code').map(x => x[1])""")


def stderr_in_cell(page, index: int) -> list[str]:
    """The text of every stderr block in cell `index`'s output."""
    return page.evaluate("""(k) => {
        const cell = window.jupyterapp.shell.currentWidget.content.widgets[k].node;
        return [...cell.querySelectorAll(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
            .map(e => e.innerText);
    }""", index)


def step_shown(page) -> int | None:
    text = page.locator(".da-step-counter").first.inner_text(timeout=60_000)
    parts = text.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


# ---- what the page drew ------------------------------------------------------------------------

# Per plotly graph under each root: plotly's data in the page (points per trace), the marks its
# SVG holds (paths with geometry, drawn texts: counts, not one mark per block), its annotation
# texts and the x range it drew. A graph drawn before its data came has no points and shows
# plotly's empty-figure axes (-1 to 6).
DRAWN_JS = """(sel) => [...document.querySelectorAll(sel)].map(root =>
    [...root.querySelectorAll('.js-plotly-plot')].map(gd => {
        const n = t => Math.max((t.x || []).length, (t.y || []).length);
        const marks = [...gd.querySelectorAll(
            '.cartesianlayer .trace path, .cartesianlayer .trace text')]
            .filter(e => (e.getAttribute('d') || e.textContent || '').trim().length > 0
                         && e.getAttribute('d') !== 'M0,0Z').length;
        const fl = gd._fullLayout || {};
        return {points: (gd.data || []).map(n), marks: marks,
                notes: [...gd.querySelectorAll('.annotation-text')].map(e => e.textContent),
                xrange: fl.xaxis ? fl.xaxis.range : null};
    }))"""


def drawn(page, selector: str) -> list[list[dict]]:
    return page.evaluate(DRAWN_JS, selector)


def chart_points(page, selector: str, trace: str) -> list[float]:
    """The y values plotly holds in the page for the trace named `trace` under `selector`."""
    return page.evaluate("""([sel, name]) => {
        const gd = document.querySelector(sel + ' .js-plotly-plot');
        const t = gd && (gd.data || []).find(t => t.name === name);
        return t ? Array.from(t.y || []) : [];
    }""", [selector, trace])


# Layout at the window's size: for each root, the output cell it sits in, every element or
# SVG text that reaches past that cell's edges (or its own SVG's edge: SVG clips, so text past
# it is cut off), any box that scrolls sideways, and the smallest text on screen (SVG font size
# times the SVG's scale), apart from the labels inside marks (block ids in their squares), whose
# smallest size is reported on its own.
LAYOUT_JS = """(sel) => [...document.querySelectorAll(sel)].map(root => {
    const cell = root.closest('.jp-OutputArea-output') || root;
    const box = cell.getBoundingClientRect();
    const over = [];
    const name = e => e.tagName.toLowerCase() + (e.getAttribute('class')
        ? '.' + e.getAttribute('class').split(' ').slice(0, 2).join('.') : '') +
        (e.textContent ? ' "' + e.textContent.trim().slice(0, 40) + '"' : '');
    let minFont = 1e9, minText = '', minMark = 1e9, minMarkText = '';
    for (const e of root.querySelectorAll('*')) {
        // plotly's drag handles: invisible, and partly outside the plot by design
        if (e.closest('.draglayer') || e.querySelector('.draglayer')) continue;
        const r = e.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) continue;
        if (r.right > box.right + 1 || r.left < box.left - 1) over.push(name(e));
        const svg = e.ownerSVGElement;
        if (svg && e.tagName === 'text' && e.textContent.trim()) {
            const s = svg.getBoundingClientRect();
            if (r.right > s.right + 1 || r.left < s.left - 1) over.push('clipped ' + name(e));
            const scale = s.width / (svg.width.baseVal.value || s.width);
            const f = parseFloat(getComputedStyle(e).fontSize) * scale;
            // a label inside a mark: a block's id in its square (scatter text, heatmap cell)
            if (e.closest('.textpoint') || e.closest('.heatmaplayer')) {
                if (f < minMark) { minMark = f; minMarkText = name(e); }
            } else if (f < minFont) { minFont = f; minText = name(e); }
        } else if (!svg && [...e.childNodes].some(
                c => c.nodeType === 3 && c.textContent.trim())) {
            const f = parseFloat(getComputedStyle(e).fontSize);
            if (f < minFont) { minFont = f; minText = name(e); }
        }
    }
    for (const e of [cell, ...cell.querySelectorAll('.widget-box, .widget-hbox, .widget-vbox')])
        if (e.scrollWidth > e.clientWidth + 1) over.push('scrolls ' + name(e));
    return {cell_width: box.width, overflow: over.slice(0, 12), n_overflow: over.length,
            min_font: minFont, min_text: minText, min_mark_font: minMark,
            min_mark_text: minMarkText};
})"""


def layout(page, selector: str) -> list[dict]:
    return page.evaluate(LAYOUT_JS, selector)
