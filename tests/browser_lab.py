"""The browser test's parts: JupyterLab started the way `make lab` starts it (tools/lab_files.py),
headless Chromium, and what the test reads back from the page (the player's data-da-* hooks,
what each diagram drew: its SVG rows and cells, its text, element boxes and font sizes)."""

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
    page.goto(server.notebook_url(name), timeout=300_000)    # busy: slow, not wrong
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


PLAYER = "[data-da-player]"


def step_shown(page) -> int | None:
    """The engine step on screen (the player's data-da-engine-step), None before any."""
    v = page.locator(PLAYER).first.get_attribute("data-da-engine-step", timeout=60_000)
    return int(v) if v not in (None, "") else None


def player_state(page) -> dict:
    """The player's hooks: step (index on screen), steps (known), drawn (painted since ▶)."""
    return page.evaluate("""(sel) => { const e = document.querySelector(sel);
        const n = (k) => e && e.getAttribute(k) !== null ? Number(e.getAttribute(k)) : null;
        return {step: n('data-da-step'), steps: n('data-da-steps'), drawn: n('data-da-drawn'),
                engine_step: n('data-da-engine-step'),
                playing: !!e && e.classList.contains('da-playing')}; }""", PLAYER)


# What each diagram drew, read from its SVG and text: the runs of its rows (rects with
# data-run), the grid's cells, its text, and the chart's points.
DRAWN_JS = """(n) => { const root = document.querySelector(`[data-da-diagram="${n}"]`);
    if (!root) return null;
    const strips = {};
    for (const g of root.querySelectorAll('[data-strip]')) strips[g.dataset.strip] =
        [...g.querySelectorAll('rect[data-run]')].map(r => [...r.dataset.run.split(',').map(Number),
            r.dataset.fill, r.dataset.id === '' ? null : Number(r.dataset.id)]);
    const read = root.querySelector('[data-series=read]');
    return {strips, cells: root.querySelectorAll('rect[data-cells]').length,
            text: root.innerText, svg_text: [...root.querySelectorAll('svg text')]
                .map(t => t.textContent).join(' | '),
            pulses: root.querySelectorAll('.da-pulse').length,
            chart: read ? read.dataset.y.split(',').filter(x => x).map(Number) : null,
            packet: root.dataset.daPacket || null,
            box: (r => [r.width, r.height])(root.getBoundingClientRect())}; }"""


def drawn(page, n: int) -> dict | None:
    return page.evaluate(DRAWN_JS, n)


def per_block(runs: list) -> dict[int, tuple[str, int | None]]:
    """{slot: (fill, physical id)} from a strip's runs (ids count up by one inside a run)."""
    out = {}
    for a, b, fill, first in runs:
        for j in range(a, b):
            assert j not in out, f"two runs cover slot {j}"
            out[j] = (fill, None if first is None else first + j - a)
    return out


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
    let minFont = 1e9, minText = '';
    for (const e of root.querySelectorAll('*')) {
        const r = e.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) continue;
        if (r.right > box.right + 1 || r.left < box.left - 1) over.push(name(e));
        const svg = e.ownerSVGElement;
        if (svg && e.tagName === 'text' && e.textContent.trim()) {
            const s = svg.getBoundingClientRect();
            if (r.right > s.right + 1 || r.left < s.left - 1) over.push('clipped ' + name(e));
            const scale = s.width / (svg.width.baseVal.value || s.width);
            const f = parseFloat(getComputedStyle(e).fontSize) * scale;
            if (f < minFont) { minFont = f; minText = name(e); }
        } else if (!svg && [...e.childNodes].some(
                c => c.nodeType === 3 && c.textContent.trim())) {
            const f = parseFloat(getComputedStyle(e).fontSize);
            if (f < minFont) { minFont = f; minText = name(e); }
        }
    }
    for (const e of [cell, ...cell.querySelectorAll('.widget-box, .widget-hbox, .widget-vbox')])
        if (e.scrollWidth > e.clientWidth + 1) over.push('scrolls ' + name(e));
    return {cell_width: box.width, overflow: over.slice(0, 12), n_overflow: over.length,
            min_font: minFont, min_text: minText};
})"""


def layout(page, selector: str) -> list[dict]:
    return page.evaluate(LAYOUT_JS, selector)


# ---- Run All, as a teacher presses it --------------------------------------------------------

RUN_STATE_JS = """() => { const p = window.jupyterapp.shell.currentWidget;
    const cells = p.content.widgets.filter(c => c.model.type === 'code');
    const k = p.sessionContext.session && p.sessionContext.session.kernel;
    const red = [...p.node.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')];
    return {counts: cells.map(c => c.model.executionCount),
            running: cells.filter(c => (c.node.querySelector('.jp-InputPrompt') || {})
                .textContent?.includes('*')).length,
            idle: !!k && k.status === 'idle',
            stderr: red.map(e => e.innerText.slice(-1500))}; }"""


def run_all(page, timeout_s: float = 900) -> dict:
    """Press Run All and wait until every code cell ran again (its execution count above every
    count before) and the kernel is idle, or a stderr block (a traceback is one) appears.
    Returns the last state: counts, running, idle, stderr (each block's text) and seconds."""
    before = max([c or 0 for c in page.evaluate(RUN_STATE_JS)["counts"]] + [0])
    t0 = time.monotonic()
    # not awaited: the command's promise resolves only when every cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    while True:
        page.wait_for_timeout(1000)
        st = page.evaluate(RUN_STATE_JS)
        done = all((c or 0) > before for c in st["counts"]) and st["idle"] and not st["running"]
        if done or st["stderr"] or time.monotonic() - t0 > timeout_s:
            st["seconds"] = round(time.monotonic() - t0, 1)
            st["done"] = done
            return st


# ---- waiting on the page's state, never on a fixed time ---------------------------------------
# A loaded machine makes every engine step slower, not wrong: a wait for the engine goes on as
# long as the engine gets on (a player's steps grow, or the step on screen moves), and fails
# only when nothing has moved for `stall_s`, or at `ceiling_s` (generous: a guard, not a clock).

PROGRESS_JS = """() => [...document.querySelectorAll('[data-da-player]')].map(e =>
    [e.dataset.daSteps, e.dataset.daStep].join(':')).join(' ')"""


def wait_engine(page, cond_js: str, arg=None, *, what: str, stall_s: float = 240,
                ceiling_s: float = 1800) -> None:
    """Wait until `cond_js(arg)` holds in the page while the players keep moving."""
    t0 = last = time.monotonic()
    seen = page.evaluate(PROGRESS_JS)
    while not page.evaluate(cond_js, arg):
        page.wait_for_timeout(250)
        now, sig = time.monotonic(), page.evaluate(PROGRESS_JS)
        if sig != seen:
            seen, last = sig, now
        if now - last > stall_s or now - t0 > ceiling_s:
            raise AssertionError(f"{what}: not there after {now - t0:.0f} s, and no player "
                                 f"moved in the last {now - last:.0f} s (players: {seen})")


# Scroll player p's diagram d into view and resolve once it has drawn the player's step and its
# box has stopped moving (the notebook lays out cells around it): what a reader sees.
SHOWN_JS = """async ([p, d]) => {
    const player = document.querySelectorAll('[data-da-player]')[p];
    const dia = player.querySelectorAll('[data-da-diagram]')[d];
    const frame = () => new Promise(r => requestAnimationFrame(() => r()));
    // Scrolled to, then drawn and still for 10 frames; again while the page moved it after
    // the scroll (a resize reflows the cells above it: diagrams re-fit their new width).
    for (let attempt = 0; attempt < 4; attempt++) {
        dia.scrollIntoView({block: 'start'});
        const landed = dia.getBoundingClientRect().top;
        let top = null, still = 0;
        for (let k = 0; k < 600 && still < 10; k++) {
            await frame();
            const r = dia.getBoundingClientRect().top;
            const drawn = dia.dataset.daShows === player.dataset.daStep
                || Number(player.dataset.daStep) < 0;
            still = drawn && top !== null && Math.abs(r - top) < 0.5 ? still + 1 : 0;
            top = r;
        }
        if (still < 10) return false;
        if (Math.abs(top - landed) < 0.5) return true;
    }
    return true; }"""


def show_diagram(page, p: int, d: int) -> None:
    """Player p's diagram d on screen, drawn at the player's step (see SHOWN_JS)."""
    assert page.evaluate(SHOWN_JS, [p, d]), f"player {p}'s diagram {d} did not draw its step"


# A cell's tracebacks and stderr text, read from the notebook's model (a cell far from the view
# may not be drawn).
CELL_ERRORS_JS = """(k) => window.jupyterapp.shell.currentWidget.content.widgets[k].model.outputs
    .toJSON().filter(o => o.output_type === 'error' || o.name === 'stderr')
    .map(o => o.output_type === 'error' ? (o.traceback || []).join('\\n').slice(-1500)
                                        : [].concat(o.text).join(''))"""


def run_cell(page, index: int, *, timeout_s: float = 900) -> dict:
    """Run cell `index` alone and wait until it has run (its execution count moved on, its
    prompt shows no '*', the kernel idle) or it wrote to stderr. Returns RUN_STATE_JS's
    state for the cell: {"stderr": [...], "done": bool, "seconds": float}."""
    count = ("(k) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[k];"
             " return c.model.executionCount; }")
    before = page.evaluate(count, index)
    t0 = time.monotonic()
    run_cells(page, [index])
    while True:
        page.wait_for_timeout(250)
        st = page.evaluate(RUN_STATE_JS)
        now = page.evaluate(count, index)
        red = page.evaluate(CELL_ERRORS_JS, index)
        done = now is not None and now != before and st["idle"] and not st["running"]
        if done or red or time.monotonic() - t0 > timeout_s:
            return {"stderr": red, "done": done, "seconds": round(time.monotonic() - t0, 1)}
