"""Every notebook as a teacher runs it, in the session's JupyterLab and Chromium (conftest
`jupyter`): Run All at 1366 x 768 with the file browser open, Run All again in the same kernel,
then save and reload the tab; no stderr block (a traceback is one) at any point, and every
player comes back after the reload with the steps it had. Each notebook runs twice (the second
time on the engine the first started: engine/one_lab.py); at each size every diagram is
scrolled to and checked beside its player's controls, as wide as its cell, text >= 11 px (the
wide screen is the same page resized: the diagrams lay out again when their width changes).
"""

from __future__ import annotations

import shutil

import pytest
from browser_lab import PLAYER, ROOT, layout, open_notebook, run_all

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
SMALL, WIDE = {"width": 1366, "height": 768}, {"width": 1920, "height": 1080}
MIN_FONT = 11      # px
PLAYERS_JS = """(sel) => [...document.querySelectorAll(sel)].map(e => ({
    steps: Number(e.dataset.daSteps || 0), step: Number(e.dataset.daStep || -1)}))"""


def _page(browser, size):
    page = browser.new_page(viewport=size)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
    return page


def _ran(st: dict, name: str, what: str) -> None:
    assert st["stderr"] == [], f"{name}, {what}: a stderr block:\n" + "\n---\n".join(st["stderr"])
    assert st["done"], f"{name}, {what}: not finished in {st['seconds']} s: {st}"


# For each player and each of its diagrams, scrolled to as a reader scrolls to it: the
# player's controls (▶, the slider) and the diagram's top both inside the notebook's visible
# area, the controls not covering the diagram; and the diagram's width beside its cell's.
TOGETHER_JS = """(sel) => { const nb = document.querySelector(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer').getBoundingClientRect();
    const out = [];
    for (const p of document.querySelectorAll(sel)) for (const d of p.querySelectorAll(
            '[data-da-diagram]')) {
        d.scrollIntoView({block: 'start'});
        const c = p.querySelector('.da-controls').getBoundingClientRect();
        const r = d.getBoundingClientRect();
        const cell = p.closest('.jp-OutputArea-output').getBoundingClientRect();
        out.push({diagram: d.dataset.daDiagram, controls: [c.top, c.bottom], top: r.top,
                  view: [nb.top, nb.bottom], width: r.width, cell: cell.width});
    }
    return out; }"""


def _together(page, name: str, size: dict) -> None:
    """Every diagram on screen with its player's controls, as wide as its cell; no text under
    11 px."""
    for m in page.evaluate(TOGETHER_JS, PLAYER):
        where = f"{name} at {size['width']}x{size['height']}, diagram {m['diagram']}: {m}"
        lo, hi = m["view"]
        assert lo - 1 <= m["controls"][0] and m["controls"][1] <= hi + 1, "controls off " + where
        assert m["controls"][1] - 1 <= m["top"] < hi - 100, "diagram not beside controls " + where
        assert m["width"] >= 0.95 * m["cell"], "diagram narrower than its cell " + where
    for m in layout(page, "[data-da-diagram]"):
        assert m["min_font"] >= MIN_FONT, f"{name}: text under {MIN_FONT} px: {m}"


def _players(page) -> list[dict]:
    page.wait_for_selector(PLAYER, timeout=120_000)
    return page.evaluate(PLAYERS_JS, PLAYER)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_run_all_twice_then_reload(jupyter, name):
    server, browser = jupyter
    page = _page(browser, SMALL)
    try:
        open_notebook(page, server, name)
        _ran(run_all(page), name, "Run All")
        first = _players(page)
        assert first, f"{name}: no player after Run All"
        page.wait_for_timeout(1000)
        _together(page, name, SMALL)
        again = run_all(page)
        _ran(again, name, "Run All a second time")
        second = _players(page)
        assert len(second) == len(first), (first, second)
        # save, reload: the widgets render again from their models in the running kernel
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_timeout(1500)
        page.reload()
        page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell",
                               timeout=120_000)
        page.wait_for_function(f"document.querySelectorAll('{PLAYER}').length === "
                               f"{len(second)}", timeout=120_000)
        page.wait_for_function(
            "([sel, n]) => [...document.querySelectorAll(sel)].map(e => Number("
            "e.dataset.daSteps || 0)).join() === n", arg=[PLAYER, ",".join(
                str(p["steps"]) for p in second)], timeout=60_000)
        red = page.locator('.jp-OutputArea-output[data-mime-type='
                           '"application/vnd.jupyter.stderr"]').count()
        assert red == 0, f"{name}: a stderr block after the reload"
        page.set_viewport_size(WIDE)
        page.wait_for_timeout(1500)     # the diagrams lay out again at their new width
        _together(page, name, WIDE)
        assert page.errors == [], page.errors
    finally:
        page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")
        page.close()
        # the session's other tests open this notebook fresh, not with this kernel's widgets
        shutil.copy(ROOT / "notebooks" / name, server.work / name)
