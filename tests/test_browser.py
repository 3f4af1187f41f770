"""The real thing in a real browser: JupyterLab started with `make lab`'s flags and settings
(tools/lab_files.py), the tour and the DA-hook notebook run live in headless Chromium (Debian's,
driven by Playwright) at 1366 x 768 with the file browser open. What is checked is read from the
page: plotly's data in each graph and the marks its SVG drew, the texts on screen, element
boxes and font sizes. Screenshots go to work/screenshots/ (git-ignored); their paths are
printed at the end of the run.
"""

from __future__ import annotations

import shutil
import time

import pytest
from browser_lab import (
    ROOT,
    Server,
    chart_points,
    code_cells,
    drawn,
    launch,
    layout,
    open_notebook,
    run_cells,
    stderr_in_cell,
    step_shown,
)

WINDOW = {"width": 1366, "height": 768}
SHOTS = ROOT / "work" / "screenshots"
TOUR, HOOK = "00_tour.ipynb", "04_da_hook.ipynb"

# Everything the test clicks or reads, in one place (the widgets' CSS classes).
PLAY = ".da-play button"                      # the player's ▶ / ⏸ (Play's first button)
PAUSED = ".da-play button i.fa-play"          # ▶ shown: not playing
DIAGRAMS = {"1 skeleton": ".da-skeleton", "2 blocks": ".da-blocks",
            "3 metadata path": ".da-metadata-path", "4 DA hook": ".da-dahook"}
STEER = ".da-steer-local button, button.da-steer-local"
FOCUS_LAMP_ON = ".da-lamp-focus.da-lamp-on"
STREAM = ".da-stream"
STATUS = ".da-steer-status"
CHART, CHART_TRACE = ".da-blocks-chart", "blocks read"
BLOCKS_READ = ".da-blocks-read"
ROWS_PLOT = '.da-blocks .nsewdrag[data-subplot="xy"]'    # diagram 2's block-table rows
HIGHLIGHT = ".da-highlight"
SCROLLER = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer"
MIN_FONT, MIN_MARK_FONT = 11, 9     # px: any text; a block id inside its square
# The notebooks run as a learner gets them: the trained da-tiny-tags (not the random model the
# other tests pin), whose lesson request has no scripted tags: the model writes its own
# <focus Ck>; the test then steers LOCAL, so a further drop in blocks read comes from the button.

shots: list[str] = []


@pytest.fixture(scope="module")
def lab(tmp_path_factory, request):
    work = tmp_path_factory.mktemp("lab") / "work"
    work.mkdir()
    for name in (TOUR, HOOK):
        shutil.copy(ROOT / "notebooks" / name, work / name)
    SHOTS.mkdir(parents=True, exist_ok=True)
    server = Server(work, model=None)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        yield server, browser
        browser.close()
    server.stop()
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():     # printed even when the tests pass
        print("", *(f"browser screenshot: {s}" for s in shots), sep="\n")


def _shot(page, name: str, *, element: str | None = None) -> None:
    path = SHOTS / f"{name}.png"
    if element is None:
        page.screenshot(path=str(path))
    else:
        # The whole diagram at the window's width: a taller viewport for the picture only.
        page.set_viewport_size({"width": WINDOW["width"], "height": 2600})
        page.locator(element).first.screenshot(path=str(path))
        page.set_viewport_size(WINDOW)
    shots.append(str(path))


def _start(page, server, name: str) -> None:
    """Open `name` (file browser shown), run its first two code cells (the source, the
    diagrams) and wait for the player; no stderr under the first, no news toast."""
    open_notebook(page, server, name)
    cells = code_cells(page)
    run_cells(page, cells[:2])
    page.wait_for_selector(PLAY, timeout=300_000)
    assert stderr_in_cell(page, cells[0]) == [], "the first cell printed to stderr"
    assert page.get_by_text("Jupyter news").count() == 0, "the news toast is showing"


def _press(page, sel: str) -> None:
    """A click event on the button itself: the stream growing while the page scrolls to it
    can move it between Playwright's aim and its click (2 missed presses in ~12 runs)."""
    button = page.locator(sel).first
    button.scroll_into_view_if_needed(timeout=60_000)
    button.dispatch_event("click")


def _wait(page, js: str, arg, timeout_s: float, what: str) -> None:
    """page.wait_for_function, failing with what the page showed (and a screenshot)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(js, arg=arg, timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        _shot(page, "failed")
        seen = page.evaluate("""(sels) => sels.map(s => { const e = document.querySelector(s);
            return s + ': ' + (e ? e.innerText.slice(-300) : '(none)'); })""",
                             [".da-step-counter", STREAM, STATUS, BLOCKS_READ, PLAY])
        raise AssertionError(f"{what}: not seen in {timeout_s} s; the page showed:\n"
                             + "\n".join(seen)) from None


def _play_until(page, steps: int, timeout: float = 180) -> int:
    """Press ▶ and wait until the counter moved `steps` on; returns the step shown."""
    start = step_shown(page) or 0
    _press(page, PLAY)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        now = step_shown(page)
        if now is not None and now >= start + steps:
            return now
        page.wait_for_timeout(250)
    raise AssertionError(f"the player did not move {steps} steps from {start} in {timeout} s")


def _pause(page, settle_s: float = 2.0) -> int:
    """Press ⏸ and wait until the step shown stays put for `settle_s` (a busy kernel may
    still run the ticks that reached it before the pause); returns that step."""
    _press(page, PLAY)
    page.wait_for_selector(PAUSED, timeout=60_000)
    last, since = step_shown(page), time.monotonic()
    while time.monotonic() - since < settle_s:
        page.wait_for_timeout(250)
        now = step_shown(page)
        if now != last:
            last, since = now, time.monotonic()
    return last


def _assert_drawn(page, name: str, sel: str) -> None:
    graphs = [g for root in drawn(page, sel)[:1] for g in root]
    assert graphs, f"diagram {name}: no plotly graph on the page"
    for k, g in enumerate(graphs):
        assert sum(g["points"]) > 0 and g["marks"] > 0, f"diagram {name}, graph {k}: {g}"
        assert g["xrange"] != [-1, 6], f"diagram {name}, graph {k}: plotly's empty axes"


def _assert_fits(page) -> None:
    for name, sel in DIAGRAMS.items():
        for m in layout(page, sel):
            assert m["n_overflow"] == 0, f"diagram {name} overflows its cell: {m}"
            assert m["min_font"] >= MIN_FONT, f"diagram {name}: text below {MIN_FONT} px: {m}"
            assert m["min_mark_font"] >= MIN_MARK_FONT, f"diagram {name}: {m}"


def _scroll(page, to: str) -> None:
    page.evaluate(f"document.querySelector('{SCROLLER}').scrollTop = "
                  + ("0" if to == "top" else "1e9"))


def _shutdown_kernels(page) -> None:
    page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")


def test_tour_draws_every_diagram_while_playing(lab):
    server, browser = lab
    page = browser.new_page(viewport=WINDOW)
    _start(page, server, TOUR)
    _assert_fits(page)
    _shot(page, "tour_1366x768_start")
    _play_until(page, 3)
    for name, sel in DIAGRAMS.items():
        _assert_drawn(page, name, sel)
    # A figure updated while out of view shows the current step when it comes back.
    _scroll(page, "bottom")
    page.wait_for_timeout(500)
    before = step_shown(page)
    t0 = time.monotonic()
    while step_shown(page) < before + 3 and time.monotonic() - t0 < 120:
        page.wait_for_timeout(250)
    step = _pause(page)
    _scroll(page, "top")
    page.locator(PLAY).first.scroll_into_view_if_needed()
    page.wait_for_function(
        "([sel, step]) => [...document.querySelectorAll(sel + ' .shape-label-text')]"
        ".some(e => e.textContent.startsWith('step ' + step + ':'))",
        arg=[DIAGRAMS["1 skeleton"], step], timeout=30_000)
    _shot(page, "tour_1366x768_played")
    for name, sel in DIAGRAMS.items():
        _shot(page, f"tour_{name.replace(' ', '_')}", element=sel)
    _shutdown_kernels(page)
    page.close()


def test_da_hook_steer_mid_run_and_a_second_tab(lab):
    server, browser = lab
    page = browser.new_page(viewport=WINDOW)
    _start(page, server, HOOK)
    _assert_fits(page)
    page.locator(CHART).first.scroll_into_view_if_needed()
    _play_until(page, 2)
    for name in ("2 blocks", "4 DA hook"):
        _assert_drawn(page, name, DIAGRAMS[name])
    # The model writes its own <focus Ck>: wait for FOCUS, then note what a step reads.
    page.wait_for_selector(FOCUS_LAMP_ON, timeout=180_000)
    page.wait_for_timeout(1500)
    read = chart_points(page, CHART, CHART_TRACE)
    assert len(read) >= 2 and read[-1] < max(read), read      # its own tag hid blocks
    # Steer while it plays: <local> appears in the stream and blocks read per step drops
    # below what the model's own FOCUS read.
    _press(page, STEER)
    _wait(page, "(sel) => document.querySelector(sel).innerText.includes('writes <local>')",
          STATUS, 60, "the kernel taking the LOCAL press")
    _wait(page, "(sel) => document.querySelector(sel).innerText.includes('<local>')", STREAM,
          180, "the LOCAL tag in the stream")
    _wait(page, "([sel, name, top]) => { const gd = document.querySelector(sel + "
          "' .js-plotly-plot'); const t = (gd.data || []).find(t => t.name === name);"
          " return t && t.y.length && t.y[t.y.length - 1] < top; }",
          [CHART, CHART_TRACE, read[-1]], 180, "blocks read dropping after LOCAL")
    label = page.locator(BLOCKS_READ).first.inner_text()
    assert int(label.split(":")[1].split()[0]) < read[-1], label
    step = _pause(page)
    _shot(page, "da_hook_1366x768_steered")
    # Hover a block of the physical cache: its id is followed across the diagrams.
    # The rows are runs under a per-block hover layer: block 0 of the staged row (the middle
    # of the three rows' plot area).
    rows = page.locator(ROWS_PLOT).first
    rows.scroll_into_view_if_needed()
    box = rows.bounding_box()
    page.mouse.move(box["x"] + 3, box["y"] + box["height"] / 2)
    page.wait_for_function(f"document.querySelector('{HIGHLIGHT}').innerText"
                           ".includes('physical')", timeout=60_000)

    # A second tab on the same live kernel draws the figures as they are now.
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_timeout(1000)
    other = browser.new_page(viewport=WINDOW)
    open_notebook(other, server, HOOK)
    other.locator(CHART).first.scroll_into_view_if_needed(timeout=120_000)
    t0 = time.monotonic()       # both tabs read at the same moment: a late tick moves both
    while True:
        mine, theirs = (chart_points(p, CHART, CHART_TRACE) for p in (page, other))
        if mine and theirs == mine or time.monotonic() - t0 > 120:
            break
        other.wait_for_timeout(500)
    assert theirs == mine and len(mine) >= len(read), (theirs, mine)
    for name in ("2 blocks", "4 DA hook"):
        _assert_drawn(other, name, DIAGRAMS[name])
    assert step_shown(other) == step_shown(page) >= step
    _shot(other, "da_hook_second_tab")
    other.close()
    for name in ("2 blocks", "4 DA hook"):
        _shot(page, f"da_hook_{name.replace(' ', '_')}", element=DIAGRAMS[name])
    _shutdown_kernels(page)
    page.close()
