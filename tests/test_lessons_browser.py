"""Every lesson as a teacher runs it: JupyterLab (make lab's flags) in headless Chromium, each
notebook opened at 1366 x 768 with the file browser shown, Run All pressed, then checked from
the page: no stderr block or traceback, no console error; every player's controls and each
diagram it drives on screen together (the controls are sticky, so a diagram scrolled to shows
them above it); where a lesson steers, its buttons beside the lamps and the stream; no text
under 11 px and nothing past its cell's edge. Run All again in the same kernel (the engine is
reused); then every guess a reader makes, each predict cell run again with a guess (no
traceback, and no cell printed its answer before it), and the words beside the players true to
what they show; a save and a reload (the kernel's widgets come back with their steps), and the
same layout checks at 1920 x 1080, where the diagrams must use the wider screen.

Every wait is on the page's state (a player's step, a diagram's drawn step, the kernel's
status), with generous ceilings, never on a fixed time: a loaded machine is slower, not wrong.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import lesson_checks as lc
import pytest
from browser_lab import (
    KERNEL_IDLE,
    PLAYER,
    ROOT,
    code_cells,
    layout,
    open_notebook,
    player_state,
    run_all,
    run_cells,
    show_diagram,
    wait_engine,
)

LESSONS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
# A lesson run twice, every guess and a reload: on 2 idle cores minutes, on a busy machine (load
# 30-45 here) 04 and 06 passed the suite's 900 s; every wait inside is on the page's state, and
# this is their ceiling, not what they take.
pytestmark = pytest.mark.timeout(2700)
SMALL, WIDE = {"width": 1366, "height": 768}, {"width": 1920, "height": 1080}
MIN_FONT = 11
GAP = 4     # px between the sticky controls and a diagram scrolled to (style.css scroll-margin)

# Where each diagram is, relative to its player's sticky controls and the notebook's visible
# area, once the diagram is scrolled to as a reader scrolls to it (show_diagram).
TOGETHER_JS = """([p, d]) => {
    const player = document.querySelectorAll('[data-da-player]')[p];
    const dia = player.querySelectorAll('[data-da-diagram]')[d];
    const box = (e) => { const r = e.getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
    const panel = document.querySelector(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
    const steer = dia.querySelectorAll('[data-da-steer], .da-lamp, [data-da-part=stream]');
    return {name: dia.dataset.daDiagram, view: box(panel), controls:
            box(player.querySelector('.da-controls')), diagram: box(dia),
            steer: [...steer].filter(e => e.getBoundingClientRect().height > 0)
                .map(e => [e.dataset.daSteer || e.className.split(' ')[0], box(e)])}; }"""

COUNTS_JS = """() => [...document.querySelectorAll('[data-da-player]')].map(e =>
    [e.dataset.daSteps, e.dataset.daStep, e.hasAttribute('data-da-drawn')])"""


def _page(browser, viewport):
    page = browser.new_page(viewport=viewport)
    page.errors = []
    page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
    page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
    return page


def _ran(page, name: str, what: str) -> None:
    st = run_all(page, timeout_s=1800)      # a ceiling: a loaded machine is slower, not wrong
    assert not st["stderr"], f"{name}, {what}: a stderr block or traceback:\n" + \
        "\n---\n".join(st["stderr"])
    assert st["done"], f"{name}, {what}: not every cell ran in {st['seconds']} s: {st}"


def _inside(inner: dict, outer: dict) -> bool:
    return inner["top"] >= outer["top"] - 1 and inner["bottom"] <= outer["bottom"] + 1


def _check_screen(page, name: str, size: str) -> None:
    """Each player with each of its diagrams on screen together; steering beside the lamps and
    the stream; text >= 11 px; nothing past a cell's edge or scrolling sideways."""
    players = page.locator(PLAYER).count()
    for p in range(players):
        n = page.evaluate("(p) => document.querySelectorAll('[data-da-player]')[p]"
                          ".querySelectorAll('[data-da-diagram]').length", p)
        assert n >= 1, f"{name}: player {p} drives no diagram"
        for d in range(n):
            show_diagram(page, p, d)        # scrolled to, drawn, its box at rest
            g = page.evaluate(TOGETHER_JS, [p, d])
            where = f"{name} at {size}, player {p}, diagram {g['name']}"
            view, ctl, dia = g["view"], g["controls"], g["diagram"]
            assert _inside(ctl, view), f"{where}: the player's controls are off screen: {g}"
            room = view["bottom"] - ctl["bottom"]
            shown = min(dia["bottom"], view["bottom"]) - max(dia["top"], ctl["bottom"])
            # a diagram taller than the room under the controls fills it down to the screen's edge
            need = min(dia["bottom"] - dia["top"], room - GAP) - 2
            assert shown >= need, f"{where}: the diagram is not on screen under the " \
                f"controls ({shown:.0f} of {need:.0f} px shown): {g}"
            if g["name"] == "1":        # the skeleton: all of it on one screen
                tall = dia["bottom"] - dia["top"]
                assert tall <= room - GAP + 2, f"{where}: diagram 1 is {tall:.0f} px tall, " \
                    f"{room:.0f} px fit under the controls"
            for what, box in g["steer"]:
                assert _inside(box, view), f"{where}: {what} is off screen with its " \
                    f"diagram: {g}"
    for m in layout(page, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output"):
        assert m["n_overflow"] == 0, f"{name} at {size}: an output reaches past its cell: {m}"
        assert m["min_font"] >= MIN_FONT, f"{name} at {size}: text below {MIN_FONT} px: {m}"


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_twice_fits_both_screens_and_survives_a_reload(jupyter, name):
    server, browser = jupyter
    page = _page(browser, SMALL)
    serve_dirs = set(Path(tempfile.gettempdir()).glob("da-lab-serve-*"))
    try:
        open_notebook(page, server, name)
        _ran(page, name, "Run All")
        assert page.locator(PLAYER).count() >= 1, f"{name}: no player after Run All"
        page.wait_for_selector(f"{PLAYER}[data-da-drawn]", timeout=60_000)
        lc.fresh(page, name, "Run All")
        _check_screen(page, name, "1366x768")
        if name.startswith("00"):
            lc.first_play_shows_the_tag(page)
        if name.startswith("07"):
            left = set(Path(tempfile.gettempdir()).glob("da-lab-serve-*")) - serve_dirs
            assert not left, f"07 left its server's folder behind: {left}"
            lc.end_of_07(page)
        small = page.evaluate("() => Math.max(...[...document.querySelectorAll("
                              "'[data-da-diagram]')].map(e => e.getBoundingClientRect().width))")

        first = lc.guess_in_03(page) if name.startswith("03") else None
        _ran(page, name, "Run All a second time")
        page.wait_for_selector(f"{PLAYER}[data-da-drawn]", timeout=60_000)
        lc.fresh(page, name, "a second Run All")
        if first:       # the engine's steps count on; the lesson's words stay the same
            again = lc.guess_in_03(page)
            assert again[1].split(" (engine")[0] == first[1].split(" (engine")[0] or \
                again[0] != first[0], (first, again)
        # issue 56: every guess a reader makes after Run All runs (no KeyError), and no cell
        # printed its answer before it was made; the words beside the players fit the screen
        printed = lc.cells(page)
        answers = lc.guess_every_predict(page, name)
        lc.no_answer_before_its_guess(name, printed, answers)
        lc.words_fit_the_screen(page, name)
        before = page.evaluate(COUNTS_JS)
        assert all(s and int(s) >= 1 for s, _, _ in before), f"{name}: {before}"

        # a save (as Ctrl+S or autosave does) and a reload: the widgets live in the kernel,
        # so the page draws them again with every step they had
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty",
                               timeout=30_000)
        page.reload(timeout=300_000)       # a busy machine loads JupyterLab slowly
        page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell",
                               timeout=120_000)
        # Every step a player had comes back. It may come back with more: the kernel's run
        # holds the steps other cells ran on the same engine since (a predict cell's step_to),
        # which a player not playing had not asked for yet.
        want = [int(b[0]) for b in before]
        try:        # the steps arrive from the kernel after the first is drawn
            wait_engine(page, f"(want) => {{ const c = ({COUNTS_JS})(); return c.length === "
                        "want.length && c.every((x, k) => +x[0] >= want[k]); }", want,
                        what="the steps after a reload", stall_s=120, ceiling_s=600)
        except AssertionError:
            pass    # the assertion below says what the page has
        after = page.evaluate(COUNTS_JS)
        assert len(after) == len(before) and all(
            int(a[0]) >= int(b[0]) for a, b in zip(after, before, strict=True)), \
            f"{name}: steps before the reload {before}, after {after}"
        assert player_state(page)["steps"] is not None

        page.set_viewport_size(WIDE)
        _check_screen(page, name, "1920x1080")      # each diagram waited for, drawn anew
        wide = page.evaluate("() => Math.max(...[...document.querySelectorAll("
                             "'[data-da-diagram]')].map(e => e.getBoundingClientRect().width))")
        assert wide >= small + 400, f"{name}: diagrams {small:.0f} px wide at 1366, " \
            f"{wide:.0f} px at 1920: the wide screen is not used"
        assert page.errors == [], f"{name}: console errors {page.errors}"
    finally:
        # free this lesson's engine before the next lesson starts its own (a failure above is
        # what the test reports, not one in this clean-up)
        with contextlib.suppress(Exception):
            page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")
        page.close()


STATUS = "document.querySelector('[data-da-diagram=\"4\"] .da-steer-status')"

# The first player's step, its steps, whether a step asked of the engine is on its way, and the
# steer buttons enabled now.
BUTTONS_JS = """() => { const p = document.querySelector('[data-da-player]');
    return {step: Number(p.dataset.daStep), steps: Number(p.dataset.daSteps),
            asking: p.hasAttribute('data-da-asking'),
            on: [...p.querySelectorAll('[data-da-steer]')].filter(b => !b.disabled)
                .map(b => b.dataset.daSteer)}; }"""
SETTLED = (f"() => !document.querySelector('{PLAYER}').hasAttribute('data-da-asking') && "
           f"{KERNEL_IDLE}")
WIDGETS_DONE = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) '
    + '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]')]
    .every(o => !o.textContent.includes('Loading widget'))"""


# anywidget 0.11 rejects a model whose module and initialize take over 2 s
# (AbortSignal.timeout(2000)); this page's timer of that length fires at once instead.
ANYWIDGET_LATE = """() => { const t = AbortSignal.timeout.bind(AbortSignal);
    AbortSignal.timeout = (ms) => t(ms === 2000 ? 1 : ms); }"""


def _reopened(page, what: str) -> None:
    """The page reloaded: every widget output rendered (or failed), none says "model not
    found", the players are drawn from the saved state and say so, no console error."""
    page.errors.clear()
    page.reload(timeout=300_000)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=120_000)
    page.wait_for_function(KERNEL_IDLE, timeout=300_000)
    page.wait_for_function(WIDGETS_DONE, timeout=300_000)
    page.wait_for_selector(PLAYER, state="attached", timeout=120_000)
    text = page.inner_text(".jp-NotebookPanel:not(.lm-mod-hidden)")
    assert "model not found" not in text and "Error displaying widget" not in text, \
        (what, [ln for ln in text.splitlines() if "widget" in ln.lower()][:5])
    note = page.locator(f"{PLAYER} .da-player-note").first.inner_text()
    assert "saved with the notebook" in note and "run the cells again" in note, (what, note)
    v = lc.hook_view(page)
    assert "saved with the notebook" in v["off"], (what, v)
    assert page.errors == [], f"{what}: console errors on reopening: {page.errors}"


def _save(page) -> None:
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty",
                           timeout=60_000)


def _new_request_in_both_diagrams(page) -> str:
    """ "+ new request": diagram 4 follows it with its chunk boxes back and none ticked, and
    diagram 2 of the same player names and draws the same request. Returns its id."""
    first = lc.hook_view(page)
    had = page.evaluate(BUTTONS_JS)["steps"]
    page.locator(f"{PLAYER} [data-da-action=new-request]").first.click()
    wait_engine(page, f"() => /following \\S+:/.test({STATUS}.textContent) && "
                f"!{STATUS}.textContent.includes({first['status'].split(':')[0]!r})",
                what="the new request followed")
    v = lc.hook_view(page)
    req = v["status"].split("following ")[1].split(":")[0]
    assert req not in first["status"] and req in v["status"], (first, v)
    wait_engine(page, "(had) => { const p = document.querySelector('[data-da-player]');"
                " return Number(p.dataset.daSteps) > had"
                " && Number(p.dataset.daStep) === Number(p.dataset.daSteps) - 1; }", had,
                what="the new request's first step on screen")
    row = lc.hook_view(page)["row"]
    title = lc.blocks_title(page)
    assert row.startswith(f"{req}'s row") and f" · {req} · " in title, (row, title)
    chunks = page.locator("[data-da-diagram='4'] [data-da-chunk]")
    assert chunks.count() == 12, f"{req}: {chunks.count()} chunk checkboxes, not 12"
    assert page.locator("[data-da-chunk]:checked").count() == 0
    lc.hook_view(page)
    return req


def _pause_lands_on_the_engine(page, rounds: int = 3) -> None:
    """⏸ while ▶ follows the engine: the page lands on the engine's step, where a steer button
    works; an enabled button is always one the kernel accepts."""
    for _ in range(rounds):
        at = page.evaluate(BUTTONS_JS)["steps"]
        page.locator(f"{PLAYER} [data-da-action=play]").first.click()
        wait_engine(page, "(n) => Number(document.querySelector('[data-da-player]')"
                    ".dataset.daSteps) >= n + 2", at, what="▶ following the engine")
        page.locator(f"{PLAYER} [data-da-action=pause]").first.click()
        b = page.evaluate(BUTTONS_JS)
        assert not b["on"] or b["step"] == b["steps"] - 1, \
            f"just after ⏸: {b['on']} enabled at step {b['step']} of {b['steps']}"
        wait_engine(page, SETTLED, what="the step asked for before ⏸ arriving")
        b = page.evaluate(BUTTONS_JS)
        assert b["step"] == b["steps"] - 1 and "local" in b["on"], \
            f"⏸ left the page behind the engine: step {b['step']} of {b['steps']}, " \
            f"enabled {b['on']}: {lc.hook_view(page)['off']}"


def _steer_then_drag_back(page, req: str) -> None:
    """FOCUS C1 (lesson questions never have their answer in C1, so not the model's tag) into
    `req`, played until diagram 4 shows it; the slider dragged back before the press: the
    status line says the steer comes later."""
    page.locator("[data-da-diagram='4'] [data-da-chunk]").first.check()
    page.wait_for_selector("[data-da-steer=focus]:not([disabled])", timeout=60_000)
    page.locator("[data-da-steer=focus]").first.click()
    wait_engine(page, f"() => {STATUS}.textContent.includes('<focus C1> into {req}')",
                what="the kernel taking the FOCUS press")
    pressed = page.evaluate(BUTTONS_JS)["steps"]
    page.locator(f"{PLAYER} [data-da-action=play]").first.click()
    wait_engine(page, "() => document.querySelector('[data-da-diagram=\"4\"] .da-bands')"
                ".innerText.includes('directive focus C1')",
                what=f"diagram 4 showing {req}'s FOCUS C1")
    page.locator(f"{PLAYER} [data-da-action=pause]").first.click()
    wait_engine(page, SETTLED, what="the last step asked for")
    v = lc.hook_view(page)
    assert v["row"].startswith(f"{req}'s row"), v
    page.evaluate("""(i) => { const s = document.querySelector(
        '[data-da-player] [data-da-action=scrub]'); s.value = i;
        s.dispatchEvent(new Event('input')); }""", pressed - 3)
    v = lc.hook_view(page)
    assert "later, at step" in v["status"] and "<focus C1>" in v["status"], v


def test_04_new_request_steers_and_a_saved_lesson_reopens_with_a_fresh_kernel(jupyter):
    """04's player and diagrams 4 and 2 (its first two cells), with anywidget's initialize timer
    firing before the player's modules come (as on a busy machine): "+ new request" brings the
    chunk checkboxes back for the new request, and both diagrams name and draw it; ⏸ while ▶
    follows the engine lands on the engine's step, where a steer button works, and no button is
    enabled that the kernel would refuse; FOCUS on a chunk of the new request changes its row;
    the slider dragged back shows that steer as a later one. Then saved, the kernel restarted,
    the page reloaded, saved again and reloaded again: the players are drawn from the saved
    widget state each time, say so, and nothing reads "model not found" or logs an error. Every
    wait is on the page's state (issue 56)."""
    server, browser = jupyter
    page = _page(browser, SMALL)
    try:
        open_notebook(page, server, "04_da_hook.ipynb")
        # an earlier test saved the whole lesson; its widgets died with its kernel: no outputs
        page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        # as on a busy machine: anywidget's 2 s initialize timer fires before the players'
        # modules come (it then dropped every kernel message: issue 56); all below must work
        page.evaluate(ANYWIDGET_LATE)
        run_cells(page, code_cells(page)[:2])
        page.wait_for_selector(f"{PLAYER}[data-da-drawn]", timeout=600_000)
        page.wait_for_function(KERNEL_IDLE, timeout=300_000)
        req = _new_request_in_both_diagrams(page)
        _pause_lands_on_the_engine(page)
        _steer_then_drag_back(page, req)
        # saved, a fresh kernel, the page reloaded; then saved again (as autosave does) and
        # reloaded again: JupyterLab alone keeps no widget state for a dead kernel's players
        _save(page)
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session"
                      ".kernel.restart()")          # resolves once the kernel has restarted
        page.wait_for_function(KERNEL_IDLE, timeout=300_000)
        _reopened(page, "restarted and reloaded")
        _save(page)
        _reopened(page, "saved again and reloaded")
    finally:
        with contextlib.suppress(Exception):
            page.evaluate("window.jupyterapp.serviceManager.sessions.shutdownAll()")
        page.close()


def test_an_exported_page_says_why_it_cannot_steer(jupyter, tmp_path):
    """No kernel and no engine behind an exported page: diagram 4 says so, in those words.
    (The module's Chromium: a second Playwright would be refused while it runs.)"""
    from page_lab import TRACES, open_page, write_page

    page = open_page(jupyter[1], write_page(TRACES / "seed_cpu.jsonl.gz", tmp_path / "run.html",
                                            eager=True))
    try:
        off = page.inner_text("[data-da-diagram='4'] .da-steer-off")
        assert lc.OLD_CLAIM not in off and "exported" in off and "no engine" in off, off
        assert page.errors == []
    finally:
        page.close()
