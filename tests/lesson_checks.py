"""What a lesson must look like right after Run All, read from the page (issue 39): every player
at the first step of its request (07: a step where the request it follows is on screen), no
predict cell showing its answer, no chunk ticked for FOCUS, no "steering needs a Lab running in
this kernel" where there is none; and the few lesson-specific checks (the tour's first ▶, 03's
steps counted per request, 07's end and its temporary folder)."""

from __future__ import annotations

import re

from browser_lab import run_cell, show_diagram, wait_engine

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

# Diagram 4 of player p (scrolled into view and drawn: hook_view): its row's title and stream.
HOOK_JS = """(p) => { const d = document.querySelectorAll('[data-da-player]')[p]
        .querySelector('[data-da-diagram="4"]');
    if (!d) return null;
    const titles = [...d.querySelectorAll(':scope > .da-title')].map(e => e.textContent);
    return {row: titles[titles.length - 1], stream: d.querySelector('.da-stream').innerText,
            bands: d.querySelector('.da-bands').innerText,
            read: d.querySelector('.da-blocks-read').innerText,
            status: d.querySelector('.da-steer-status').textContent,
            off: d.querySelector('.da-steer-off').textContent}; }"""

# Player p's diagrams: their numbers, in order (where diagram 4 is).
KINDS_JS = """(p) => [...document.querySelectorAll('[data-da-player]')[p]
    .querySelectorAll('[data-da-diagram]')].map(e => e.dataset.daDiagram)"""


def shown(page, p: int, kind: str) -> bool:
    """Player p's diagram `kind` scrolled to and drawn at the player's step; False: it has
    none."""
    kinds = page.evaluate(KINDS_JS, p)
    if kind not in kinds:
        return False
    show_diagram(page, p, kinds.index(kind))
    return True


def hook_view(page, p: int = 0) -> dict | None:
    return page.evaluate(HOOK_JS, p) if shown(page, p, "4") else None


def blocks_title(page, p: int = 0) -> str | None:
    """Diagram 2's title in player p (scrolled to and drawn), None if it has no diagram 2."""
    if not shown(page, p, "2"):
        return None
    return page.evaluate("""(p) => document.querySelectorAll('[data-da-player]')[p]
        .querySelector('[data-da-diagram="2"] .da-title').textContent""", p)


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
            assert "no row to read" not in v["row"], \
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
    st = run_cell(page, k)
    assert st["done"] and not st["stderr"], st
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
    wait_engine(page, "() => !document.querySelector('[data-da-player]')"
                ".classList.contains('da-playing')", what="07 played to its end")
    note = page.locator("[data-da-player] .da-player-note").first.inner_text()
    assert "server has stopped" in note and "complete" in note and "no new steps" not in note, \
        f"07's end: {note!r}"
    # the last frame says why the request followed has no row there, in every diagram (issue
    # 56: "blocks read: –", no lamp, and empty rows labelled "reads 3")
    v = hook_view(page)
    if "blocks read: –" in v["read"]:
        assert "(" in v["read"] and "no row to read" in v["row"], v
        assert "none, not in this step" in page.inner_text("[data-da-diagram='4'] .da-lamps")
        labels = page.evaluate("""() => [...document.querySelectorAll(
            '[data-da-diagram="2"] svg text')].map(t => t.textContent)
            .filter(t => t.startsWith('(c) kernel row'))""")
        assert labels and all("reads" not in t for t in labels), labels


# ---- every guess after Run All, and no answer shown before its guess (issue 56) -------------

# Each code cell's source and printed text (streams, and plain text of outputs that are not a
# widget: a widget's repr names its state, not what the page shows), from the notebook's model.
CELLS_JS = """() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => {
    if (c.model.type !== 'code') return null;
    const outs = c.model.outputs.toJSON();
    const widget = (o) => !!(o.data || {})['application/vnd.jupyter.widget-view+json'];
    return {source: c.model.sharedModel.getSource(), widget: outs.some(widget),
            text: outs.filter(o => !widget(o)).map(o => [].concat(o.text || (o.data || {})
                ['text/plain'] || []).join('')).join('')}; })"""
PREDICT = re.compile(r"^PREDICT = None", re.M)
VERDICT = ("✓ right: ", "✗ you said ")


def cells(page) -> list[dict | None]:
    return page.evaluate(CELLS_JS)


def _guess(source: str) -> str:
    """A guess the cell's comment allows (its e.g., a mode, or a number), as Python source."""
    m = re.search(r'^PREDICT = None.*?e\.g\. "([^"]+)"', source, re.M)
    if m:
        return f'"{m[1]}"'
    return '"LOCAL"' if '"GLOBAL"' in source else "1"


def _set_source(page, k: int, text: str) -> None:
    page.evaluate("""([k, t]) => window.jupyterapp.shell.currentWidget.content.widgets[k]
        .model.sharedModel.setSource(t)""", [k, text])


def answer_of(line: str) -> str:
    """The engine's answer in check()'s verdict line (da_lab/predict.py): "✓ right: WHAT is
    ANSWER (why)" or "✗ you said G; WHAT is ANSWER (why)"."""
    head = line.split("; ", 1)[1] if line.startswith(VERDICT[1]) else line[len(VERDICT[0]):]
    answer = head.partition(" is ")[2]
    return answer.rsplit(" (", 1)[0] if answer.endswith(")") and " (" in answer else answer


def guess_every_predict(page, name: str) -> list[dict]:
    """After Run All, as a reader goes on: each predict cell in turn gets a guess and is run
    again, then the cells after it that waited for that guess ("predict first"). None may
    raise (04's KeyError, issue 56); each says its verdict. Returns, per guess, its cell, the
    guess, the verdict line and the answer in it."""
    before = cells(page)
    predict = [k for k, c in enumerate(before) if c and PREDICT.search(c["source"])]
    waiting = [k for k, c in enumerate(before)
               if c and k not in predict and "predict first" in c["text"]]
    out = []
    for n, k in enumerate(predict):
        src, guess = before[k]["source"], _guess(before[k]["source"])
        _set_source(page, k, PREDICT.sub(f"PREDICT = {guess}", src, count=1))
        st = run_cell(page, k)
        _set_source(page, k, src)
        where = f"{name}: the guess cell {k} run again after Run All with PREDICT = {guess}"
        assert not st["stderr"], f"{where} raised:\n" + "\n".join(st["stderr"])
        assert st["done"], f"{where} did not finish in {st['seconds']} s"
        text = cells(page)[k]["text"]
        line = next((x for x in text.splitlines() if x.startswith(VERDICT)), None)
        assert line, f"{where} printed no verdict: {text!r}"
        out.append({"cell": k, "guess": guess, "line": line, "answer": answer_of(line)})
        upto = predict[n + 1] if n + 1 < len(predict) else len(before)
        for j in (j for j in waiting if k < j < upto):
            st = run_cell(page, j)
            assert not st["stderr"] and st["done"], \
                f"{name}: cell {j}, run after the guess in cell {k}: {st}"
            assert "predict first" not in cells(page)[j]["text"], \
                f"{name}: cell {j} still waits after the guess in cell {k}"
    return out


def _leak(answer: str) -> re.Pattern | None:
    """How a printed line would give `answer` away: a tag as written; a mode as the mode of a
    step; a number as a count of blocks read, hidden or held, a seq_len, a backend count."""
    a = answer.strip()
    if a.startswith("<") and a.endswith(">"):
        return re.compile(re.escape(a))
    if a in ("GLOBAL", "FOCUS", "LOCAL"):
        return re.compile(rf"\b(?:mode|in|is) {a}\b")
    if re.fullmatch(r"\d+(\.\d+)?", a):
        n = rf"(?<![\d.]){re.escape(a)}(?![\d.])"
        return re.compile(rf"(?:blocks? read|\breads?|\bhidden|\bhold|\bholds|seq_lens?)\W{{1,3}}"
                          rf"{n}|{n} (?:blocks? (?:read|hidden)|distinct|physical blocks|"
                          rf"(?:attention )?backends?)")
    return None


# A cell that prints rows of a committed eval file (lesson 06's ablation rows, its tables).
COMMITTED = re.compile(r"nl_demo\.(?:load_doc|eval_summary)\(")


def no_answer_before_its_guess(name: str, before: list[dict | None], answers: list[dict]):
    """Every cell's printed text after Run All (`before`: cells(page) then, no guess made)
    against every guess's answer: no cell but the guess's own may print it (06's "its own tag :
    <focus C6>" after Run All, issue 56). The eval tables of other prompts are not about the
    reader's question: a cell before the one that shows the guess's player is not read, nor a
    cell that prints a committed eval's rows (COMMITTED: other prompts' tags and replies)."""
    for a in answers:
        pat = _leak(a["answer"])
        if pat is None:
            continue
        first = max((j for j, c in enumerate(before[:a["cell"]]) if c and c["widget"]),
                    default=0)
        for j, c in enumerate(before):
            if j < first or not c or j == a["cell"] or PREDICT.search(c["source"]) \
                    or COMMITTED.search(c["source"]):
                continue
            hit = next((x for x in c["text"].splitlines() if pat.search(x)), None)
            assert hit is None, (f"{name}: cell {j} prints the answer of the guess in cell "
                                 f"{a['cell']} ({a['answer']!r}) before it is made: {hit!r}")


# The steering panel's words and each player's note, per player.
WORDS_JS = """() => [...document.querySelectorAll('[data-da-player]')].map(p => ({
    note: (p.querySelector('.da-player-note') || {}).textContent || '',
    status: (p.querySelector('.da-steer-status') || {}).textContent || '',
    off: (p.querySelector('.da-steer-off') || {}).textContent || ''}))"""


def words_fit_the_screen(page, name: str) -> None:
    """What the players say agrees with what they show (issue 56): no "steer it while it runs"
    beside "steering is off" because the request finished (05); where a lesson adds questions
    with its Ask button, no player tells the reader to add one "in a cell" (06)."""
    for k, w in enumerate(page.evaluate(WORDS_JS)):
        where = f"{name}, player {k}"
        assert not ("while it runs" in w["status"] and "finished" in w["off"]), \
            f"{where}: {w['status']!r} beside {w['off']!r}"
        if name.startswith("06"):
            assert "in a cell" not in w["note"] + w["off"], f"{where}: {w}"
    if name.startswith("04"):       # the speed cell says how far its times can be trusted
        said = [c["text"] for c in cells(page) if c and "measure(" in c["source"]]
        assert said and any("too noisy to read" in t or "quiet enough to read" in t
                            for t in said), f"{name}: the speed cell gives no verdict: {said}"
