"""The real thing in a real browser: JupyterLab started with `make lab`'s flags and settings
(tools/lab_files.py), the tour and the DA-hook notebook run live in headless Chromium (Debian's,
driven by Playwright) at 1366 x 768 with the file browser open. The diagrams are drawn and
played in the page; what is checked is read from it: the player's data-da-* hooks, what each
diagram drew (its rows' runs, its text, the chart's points), element boxes and font sizes, and
the console (no errors). Screenshots go to work/screenshots/ (git-ignored); their paths are
printed at the end of the run.
"""

from __future__ import annotations

import time

import pytest
from browser_lab import (
    KERNEL_IDLE,
    PLAYER,
    ROOT,
    code_cells,
    drawn,
    layout,
    open_notebook,
    player_state,
    run_cells,
    show_diagram,
    stderr_in_cell,
    wait_engine,
)

WINDOW = {"width": 1366, "height": 768}
SHOTS = ROOT / "work" / "screenshots"
TOUR, HOOK = "00_tour.ipynb", "04_da_hook.ipynb"
ACTION = "[data-da-action={}]"
DIAGRAMS = {1: "1 skeleton", 2: "2 blocks", 3: "3 metadata path", 4: "4 DA hook"}
FOCUS_LAMP_ON = ".da-lamp-focus.da-lamp-on"
STREAM = "[data-da-part=stream]"
STATUS = ".da-steer-status"
MIN_FONT = 11      # px: any text on screen
# The notebooks run as a learner gets them: the trained da-tiny-tags (not the random model the
# other tests pin), whose lesson request has no scripted tags: the model writes its own
# <focus Ck>; the test then steers LOCAL, so a further drop in blocks read comes from the button.

# after ⏸: no step asked of the engine on its way, the kernel idle (the page then stays put)
SETTLED = (f"() => !document.querySelector('{PLAYER}').hasAttribute('data-da-asking')"
           f" && {KERNEL_IDLE}")

shots: list[str] = []


@pytest.fixture(scope="module")
def lab(jupyter, request):
    """The module's JupyterLab and Chromium (conftest.jupyter)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield jupyter
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():     # printed even when the tests pass
        print("", *(f"browser screenshot: {s}" for s in shots), sep="\n")


def _page(browser):
    """A page at 1366 x 768 that records console errors and uncaught exceptions."""
    page = browser.new_page(viewport=WINDOW)
    page.errors = []
    page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
    page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
    return page


def _shot(page, name: str, *, element: str | None = None) -> None:
    path = SHOTS / f"{name}.png"
    if element is None:
        page.screenshot(path=str(path))
    else:
        page.locator(element).first.screenshot(path=str(path))
    shots.append(str(path))


def _start(page, server, name: str) -> None:
    """Open `name` (file browser shown), run its first two code cells (the source, the
    diagrams) and wait for the player's first step; no stderr under the first, no toast."""
    open_notebook(page, server, name)
    cells = code_cells(page)
    run_cells(page, cells[:2])
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(f"{PLAYER}[data-da-drawn]", timeout=600_000)
    except PlaywrightTimeout:
        _shot(page, "failed_start")
        outs = page.evaluate("[...document.querySelectorAll('.jp-OutputArea-output')]"
                             ".map(e => e.innerText.slice(-600))")
        raise AssertionError(f"{name}: no player drawn; the outputs: {outs}") from None
    assert stderr_in_cell(page, cells[0]) == [], "the first cell printed to stderr"
    assert page.get_by_text("Jupyter news").count() == 0, "the news toast is showing"
    # to the player, as a learner scrolls (a diagram off screen is drawn when it comes into view)
    page.evaluate("(sel) => document.querySelector(sel).scrollIntoView({block: 'start'})", PLAYER)
    page.wait_for_timeout(300)


def _press(page, action: str) -> None:
    page.locator(ACTION.format(action)).first.dispatch_event("click")


def _wait(page, js: str, arg, timeout_s: float, what: str) -> None:
    """Wait for `js(arg)` while the player keeps moving (browser_lab.wait_engine: a loaded
    machine is slower, not wrong; it fails once nothing has moved for `timeout_s`, at least 4
    minutes), failing with what the page showed (and a screenshot)."""
    try:
        wait_engine(page, js, arg, what=what, stall_s=max(240, timeout_s))
    except AssertionError:
        _shot(page, "failed")
        seen = page.evaluate("""(sels) => sels.map(s => { const e = document.querySelector(s);
            return s + ': ' + (e ? e.innerText.slice(-300) : '(none)'); })""",
                             [".da-step-counter", STREAM, STATUS, ".da-blocks-read",
                              ".da-player-note"])
        raise AssertionError(f"{what}: not seen while the player moved; the page showed:\n"
                             + "\n".join(seen) + f"\nplayer: {player_state(page)}") from None


def _play_until(page, steps: int, timeout: float = 240) -> int:
    """Press ▶ and wait until `steps` more steps are on screen; returns the index shown."""
    start = player_state(page)["step"]
    _press(page, "play")
    _wait(page, "([sel, n]) => Number(document.querySelector(sel).dataset.daStep) >= n",
          [PLAYER, start + steps], timeout, f"{steps} steps played")
    return player_state(page)["step"]


def _assert_drawn(page, n: int) -> None:
    d = drawn(page, n)
    assert d is not None, f"diagram {DIAGRAMS[n]}: no data-da-diagram={n} on the page"
    step = player_state(page)["engine_step"]
    if n == 1:
        assert f"step {step}: attention call" in d["svg_text"], d["svg_text"][-400:]
    elif n == 2:
        assert all(d["strips"].get(k) for k in ("logical", "staged", "device", "kernel")), d
        assert d["cells"] > 0
    elif n == 3:
        assert f"step {step} ·" in d["text"] and d["packet"], d["text"][:300]
    else:
        assert d["strips"].get("held") and d["chart"], d
        assert "blocks read:" in d["text"]


def _assert_fits(page) -> None:
    for n, name in DIAGRAMS.items():
        for m in layout(page, f'[data-da-diagram="{n}"]'):
            assert m["n_overflow"] == 0, f"diagram {name} overflows its cell: {m}"
            assert m["min_font"] >= MIN_FONT, f"diagram {name}: text below {MIN_FONT} px: {m}"


def _hover_block(page) -> int:
    """Rest the mouse on the first block of diagram 2's staged row; returns the physical block
    the page took it for."""
    g = page.locator('[data-da-diagram="2"] [data-strip=staged] rect[data-run]').first
    g.scroll_into_view_if_needed()
    box = g.bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    page.wait_for_function("[...document.__daLabPage.hubs.values()].some((h) => h.block !== null)")
    return page.evaluate("[...document.__daLabPage.hubs.values()].find((h) => h.block !== null)"
                         ".block")


def test_tour_draws_every_diagram_plays_scrubs_and_pulses(lab):
    server, browser = lab
    page = _page(browser)
    _start(page, server, TOUR)
    ids = page.evaluate("[...document.querySelectorAll('[data-da-diagram]')]"
                        ".map(e => e.dataset.daDiagram)")
    assert ids == ["1", "2", "3", "4"]
    _assert_fits(page)
    _shot(page, "tour_1366x768_start")
    _play_until(page, 3)
    _press(page, "pause")
    _wait(page, SETTLED, None, 240, "the step asked for before ⏸")
    st = player_state(page)
    assert not st["playing"] and st["drawn"] >= 1 and st["steps"] >= st["step"] + 1
    for n in DIAGRAMS:
        show_diagram(page, 0, n - 1)        # scrolled to, drawn at the step on screen
        _assert_drawn(page, n)
    # hover a block: its physical block pulses in diagram 2 and in diagram 4's row
    p = _hover_block(page)
    _wait(page, "() => document.querySelectorAll('[data-da-diagram=\"4\"] .da-pulse').length"
          " > 0", None, 10, "the hovered block pulsing in diagram 4")
    assert drawn(page, 2)["pulses"] >= 2 and f"block {p}:" in drawn(page, 2)["text"]
    assert f"physical block {p}:" in drawn(page, 3)["text"]
    page.mouse.move(2, 2)
    _wait(page, "() => document.querySelectorAll('.da-pulse').length === 0", None, 10,
          "the pulse gone once the mouse left")
    assert f"block {p}:" not in drawn(page, 2)["text"], "the hover label stayed"
    assert f"physical block {p}:" not in drawn(page, 3)["text"], "diagram 3's label stayed"
    # scrub back to the first step: every diagram shows it, nothing from later steps
    page.locator(ACTION.format("scrub")).first.scroll_into_view_if_needed()
    page.evaluate("(sel) => { const s = document.querySelector(sel); s.value = 0;"
                  " s.dispatchEvent(new Event('input')); }", ACTION.format("scrub"))
    assert player_state(page)["step"] == 0
    first = player_state(page)["engine_step"]
    # (a diagram off screen is drawn when it comes into view)
    show_diagram(page, 0, 3)
    assert len(drawn(page, 4)["chart"]) <= 1
    show_diagram(page, 0, 0)
    assert f"step {first}: attention call" in drawn(page, 1)["svg_text"]
    _shot(page, "tour_1366x768_played")
    for n, name in DIAGRAMS.items():
        _shot(page, f"tour_{name.replace(' ', '_')}", element=f'[data-da-diagram="{n}"]')
    assert page.errors == []
    page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")
    page.close()


def test_da_hook_steer_while_playing_step_back_and_a_second_tab(lab):
    server, browser = lab
    page = _page(browser)
    _start(page, server, HOOK)
    _assert_fits(page)
    _play_until(page, 2)
    # The model writes its own <focus Ck>: wait for FOCUS, then note what a step reads.
    _wait(page, f"() => !!document.querySelector('{FOCUS_LAMP_ON}')", None, 240,
          "the model's own FOCUS")
    _wait(page, "() => { const e = document.querySelector('[data-da-diagram=\"4\"] "
          "[data-series=read]'); const y = e ? e.dataset.y.split(',').map(Number) : [];"
          " return y.length >= 2 && y[y.length - 1] < Math.max(...y); }", None, 240,
          "blocks read dropping after the model's tag")
    read = drawn(page, 4)["chart"]
    assert len(read) >= 2 and read[-1] < max(read), read      # its own tag hid blocks
    # Steer while it plays: <local> appears in the stream and blocks read per step drops
    # below what the model's own FOCUS read.
    assert player_state(page)["playing"]
    page.locator("[data-da-steer=local]").first.dispatch_event("click")
    _wait(page, "(sel) => document.querySelector(sel).innerText.includes('writes <local>')",
          STATUS, 60, "the kernel taking the LOCAL press")
    _wait(page, "(sel) => document.querySelector(sel).innerText.includes('<local>')", STREAM,
          180, "the LOCAL tag in the stream")
    # the stream follows the newest token: the last token's box inside the stream's box
    box = page.evaluate("""(sel) => { const b = document.querySelector(sel);
        const n = [...b.querySelectorAll('.da-new')].pop(); if (!n) return null;
        const r = n.getBoundingClientRect(), o = b.getBoundingClientRect();
        return [r.top >= o.top - 1, r.bottom <= o.bottom + 1]; }""", STREAM)
    assert box == [True, True], f"the newest token is outside the stream box: {box}"
    _wait(page, "(top) => { const e = document.querySelector('[data-da-diagram=\"4\"] "
          "[data-series=read]'); const y = e ? e.dataset.y.split(',').map(Number) : [];"
          " return y.length && y[y.length - 1] < top; }", read[-1], 180,
          "blocks read dropping after LOCAL")
    _press(page, "pause")
    _wait(page, SETTLED, None, 240, "the step asked for before ⏸")
    st = player_state(page)
    assert not st["playing"] and st["drawn"] > 2
    # step back: the page shows the earlier step at once, and steering says why it is off
    _press(page, "prev")
    assert player_state(page)["step"] == st["step"] - 1
    assert "you are looking at step" in page.inner_text(".da-steer-off")
    assert page.locator("[data-da-steer=local]").first.is_disabled()
    _press(page, "next")
    assert player_state(page)["step"] == st["step"]
    _shot(page, "da_hook_1366x768_steered")

    # A second tab on the same live kernel gets every step the first has, and the step on
    # screen.
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty",
                           timeout=60_000)
    other = _page(browser)
    open_notebook(other, server, HOOK)
    _wait(other, "([sel, n]) => { const e = document.querySelector(sel);"
          " return e && Number(e.dataset.daSteps) === n; }", [PLAYER, st["steps"]], 120,
          "the second tab getting every step")
    t0 = time.monotonic()
    while player_state(other)["step"] != st["step"] and time.monotonic() - t0 < 30:
        other.wait_for_timeout(250)
    assert player_state(other)["step"] == st["step"]
    other.evaluate("(sel) => document.querySelector(sel).scrollIntoView({block: 'start'})",
                   PLAYER)
    _wait(other, "(i) => document.querySelector('[data-da-diagram=\"4\"]').dataset.daShows"
          " == i", st["step"], 30, "the second tab drawing diagram 4")
    assert drawn(other, 4)["chart"] == drawn(page, 4)["chart"]
    _shot(other, "da_hook_second_tab")
    assert other.errors == [] and page.errors == []
    other.close()
    for n in (2, 4):
        _shot(page, f"da_hook_{DIAGRAMS[n].replace(' ', '_')}", element=f'[data-da-diagram="{n}"]')
    page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")
    page.close()
