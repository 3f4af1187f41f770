"""What a lesson must look like right after Run All, read from the page (issue 39): every player
at the first step of its request (07: a step where the request it follows is on screen), no
predict cell showing its answer, no chunk ticked for FOCUS, no "steering needs a Lab running in
this kernel" where there is none; and the few lesson-specific checks (the tour's first ▶, 03's
steps counted per request, 07's end and its temporary folder)."""

from __future__ import annotations

import re

from browser_lab import run_cells

PAGE_JS = """() => { const panel = window.jupyterapp.shell.currentWidget;
    const code = panel.content.widgets.filter(c => c.model.type === 'code');
    return {
        steps: [...panel.node.querySelectorAll('[data-da-player]')].map(p => p.dataset.daStep),
        predict: code.filter(c => c.model.sharedModel.getSource().includes('PREDICT = None'))
            .map(c => c.model.outputs.toJSON().map(o => [].concat(o.text || (o.data || {})
                ['text/plain'] || []).join('')).join('')),
        ticked: panel.node.querySelectorAll('[data-da-chunk]:checked').length,
        off: [...panel.node.querySelectorAll('.da-steer-off')].map(e => e.textContent)}; }"""

# Cell k's printed text, from the notebook's model (a cell scrolled far away may not be drawn)
OUT_JS = """(k) => window.jupyterapp.shell.currentWidget.content.widgets[k].model.outputs.toJSON()
    .map(o => [].concat(o.text || (o.data || {})['text/plain'] || []).join('')).join('')"""

# What a predict cell prints only once the reader has guessed (the engine's or trace's answer).
ANSWERS = ("✓ right", "✗ you said", "blocks read", "staged row", "kernel read", "wrote:",
           "reply:", "seq_lens the kernel got", "engine step", "impl classes")
OLD_CLAIM = "steering needs a Lab running in this kernel"

# Diagram 4 of player p scrolled into view (so it draws), then its row's title and stream.
HOOK_JS = """(p) => { const d = document.querySelectorAll('[data-da-player]')[p]
        .querySelector('[data-da-diagram="4"]');
    if (!d) return null;
    d.scrollIntoView({block: 'start'});
    const titles = [...d.querySelectorAll(':scope > .da-title')].map(e => e.textContent);
    return {row: titles[titles.length - 1], stream: d.querySelector('.da-stream').innerText,
            bands: d.querySelector('.da-bands').innerText,
            status: d.querySelector('.da-steer-status').textContent,
            off: d.querySelector('.da-steer-off').textContent}; }"""


def hook_view(page, p: int = 0) -> dict | None:
    page.evaluate(HOOK_JS, p)
    page.wait_for_timeout(400)          # the scroll settles, the diagram draws
    return page.evaluate(HOOK_JS, p)


def fresh(page, name: str, when: str) -> None:
    st = page.evaluate(PAGE_JS)
    where = f"{name}, after {when}"
    if not name.startswith("07"):
        assert st["steps"] and all(s == "0" for s in st["steps"]), \
            f"{where}: a player is not at its request's first step: {st['steps']}"
    for text in st["predict"]:
        assert "predict first" in text, f"{where}: a predict cell did not ask first: {text!r}"
        shown = [a for a in ANSWERS if a in text]
        assert not shown, f"{where}: a predict cell shows {shown} before a guess: {text!r}"
    assert st["ticked"] == 0, f"{where}: {st['ticked']} chunk(s) ticked for FOCUS by default"
    assert not any(OLD_CLAIM in t for t in st["off"]), f"{where}: {st['off']}"
    for p in range(len(st["steps"])):
        v = hook_view(page, p)
        if v is not None:
            assert "not scheduled" not in v["row"], \
                f"{where}: player {p}'s diagram 4 shows a step without its request: {v}"


def first_play_shows_the_tag(page) -> None:
    """The tour's first ▶: from the request's first step the model writes its <focus Ck>."""
    v = hook_view(page)
    assert "<focus" not in v["stream"], f"the tour opens after the tag was written: {v}"
    page.locator("[data-da-player] [data-da-action=play]").first.click()
    page.wait_for_function("""() => /<focus C\\d+>/.test(document.querySelector(
        '[data-da-diagram="4"] .da-stream').innerText)""".replace("\n", " "), timeout=90_000)
    page.locator("[data-da-player] [data-da-action=pause]").first.click()


def _set_predict(page, guess: str) -> int:
    """Put `PREDICT = guess` in the predict cell's source; returns the cell's index."""
    return page.evaluate("""(g) => { const cells = window.jupyterapp.shell.currentWidget
            .content.widgets;
        const k = cells.findIndex(c => /^PREDICT = /m.test(c.model.sharedModel.getSource()));
        const m = cells[k].model.sharedModel;
        m.setSource(m.getSource().replace(/^PREDICT = .*$/m, `PREDICT = ${g}`));
        return k; }""", guess)


def guess_in_03(page) -> tuple[str, str]:
    """Guess 1 in 03's predict cell, run it, put the cell back; returns (request, its step
    line)."""
    k = _set_predict(page, "1")
    run_cells(page, [k])
    page.wait_for_function(f"(k) => ({OUT_JS})(k).includes('✗ you said')", arg=k,
                           timeout=120_000)
    out = page.evaluate(OUT_JS, k)
    _set_predict(page, "None          # a number")
    m = re.search(r"(\S+)'s step (\d+) \(engine step \d+\): it holds (\d+) tokens", out)
    assert m and m[2] == "16", f"03 does not count the request's own steps: {out!r}"
    prompt = re.search(r"prompt: (\d+) tokens", out)
    assert prompt and int(m[3]) == int(prompt[1]) + 16, \
        f"03's prose says prompt + 16 tokens at step 16: {out!r}"
    return m[1], m[0]


def end_of_07(page) -> None:
    """▶ to the end of the server's trace once the server has stopped: the note says so."""
    speed = page.locator("[data-da-player] [data-da-action=speed]").first
    speed.fill("30")
    speed.dispatch_event("change")
    page.locator("[data-da-player] [data-da-action=play]").first.click()
    page.wait_for_function("!document.querySelector('[data-da-player]')"
                           ".classList.contains('da-playing')", timeout=120_000)
    note = page.locator("[data-da-player] .da-player-note").first.inner_text()
    assert "server has stopped" in note and "complete" in note and "no new steps" not in note, \
        f"07's end: {note!r}"
