"""The page that needs no kernel (`da-lab export TRACE --html`), from file:// with the network
refused, for every shipped trace: what each diagram draws at every step equals the record it
came from (read back from the drawing: runs of blocks, grid cells, the chart, the texts), and
the player works as a learner uses it: ▶ at 20 steps/s paints every step, the slider scrubs
back, the keyboard steps and plays, a hovered block pulses in every diagram."""

import pytest
from browser_lab import per_block
from page_lab import SHIPPED, TRACES, open_page, write_page

from da_lab.trace import apply_kv_changes, load

MASKED, FREE, CACHED = "#d0d0d0", "#eeeeee", "#f3e9c6"
PLAYER = "[data-da-player]"


@pytest.fixture(scope="module", params=SHIPPED)
def shipped(request, browser, tmp_path_factory):
    path = TRACES / f"{request.param}.jsonl.gz"
    # every diagram drawn at every step, in view or not (as image export draws them)
    html = write_page(path, tmp_path_factory.mktemp("page") / f"{request.param}.html",
                      eager=True)
    yield load(path), html


# One step drawn and read back in one call: the rows' runs, the grid's cells, the texts.
READ_JS = """(i) => {
  daLab.goto(i);
  const q = (sel) => document.querySelector(sel);
  const strips = (n) => { const out = {};
    for (const g of q(`[data-da-diagram="${n}"]`).querySelectorAll('[data-strip]'))
      out[g.dataset.strip] = [...g.querySelectorAll('rect[data-run]')].map((r) =>
        [...r.dataset.run.split(',').map(Number), r.dataset.fill,
         r.dataset.id === '' ? null : Number(r.dataset.id)]);
    return out; };
  const cells = [];
  for (const r of document.querySelectorAll('[data-da-diagram="2"] rect[data-cells]')) {
    const [a, b] = r.dataset.cells.split(',').map(Number);
    for (let p = a; p < b; p++) cells[p] = r.dataset.fill;
  }
  const read = q('[data-da-diagram="4"] [data-series=read]');
  const fill = q('[data-da-diagram="2"] [data-fill-tokens]');
  return { note: q('[data-da-diagram="1"] [data-da-part=note]').textContent,
           d2: strips(2), d4: strips(4), cells, fill: fill ? fill.dataset.fillTokens : null,
           card: q('[data-da-part=card]').textContent,
           chart: read ? read.dataset.y.split(',').filter((x) => x).map(Number) : [],
           blocks_read: q('[data-da-part=blocks-read]').textContent,
           lamps: [...document.querySelectorAll('.da-lamp-on')].map((e) => e.dataset.mode),
           buffer: q('.da-tag-buffer').textContent };
}"""


def test_every_step_draws_its_records_values(shipped, browser):
    tr, html = shipped
    page = open_page(browser, html)
    da_id = tr.records[0].added[0]["req"]
    bs = tr.provenance["block_size"]
    owner_colors: dict[str, str] = {}
    kv: dict[int, dict] = apply_kv_changes({}, tr.header.get("initial_kv") or {})
    for i, rec in enumerate(tr.records):
        d = page.evaluate(READ_JS, i)
        h = rec.request(da_id)
        assert (f"step {rec.step}: attention call" if rec.metadata is not None
                else f"step {rec.step}: no attention metadata") in d["note"]
        mine = [x.request(da_id) for x in tr.records[: i + 1]]
        assert d["chart"] == [m.blocks_read for m in mine if m is not None and m.hooked]
        # the grid: free, free but prefix-cached, or its owner's colour (one per owner)
        apply_kv_changes(kv, rec.kv)
        cells = d["cells"]
        for p, v in kv.items():
            owners, cached = v["owners"], v["cached"]
            want = owner_colors.setdefault(owners[0], cells[p]) if owners else (
                CACHED if cached else FREE)
            assert cells[p] == want, f"step {rec.step}: physical block {p}"
        if h is None or not h.hooked:
            # ...and why: not run yet, finished (its last step), or not scheduled this step
            ran = [x.step for x in tr.records if (q := x.request(da_id)) is not None and q.hooked]
            why = (f"{da_id} has not run yet" if not ran or rec.step < ran[0] else
                   f"{da_id} has finished (its last step was step {ran[-1]})"
                   if rec.step > ran[-1] else f"{da_id} was not scheduled this step")
            assert d["blocks_read"] == f"blocks read: – ({why})"
            continue
        kept = set(h.kept.tolist())
        staged, total = h.staged_row.tolist(), h.blocks_total
        s2 = {k: per_block(v) for k, v in d["d2"].items()}
        assert sorted(s2["logical"]) == list(range(total))
        assert [s2["staged"][j][1] for j in sorted(s2["staged"])] == staged
        assert [s2["device"][j][1] for j in sorted(s2["device"])] == staged
        hidden = [staged[lb] for lb in range(total) if lb not in kept]
        kernel = [s2["kernel"][j] for j in sorted(s2["kernel"])]
        assert [p for _, p in kernel] == h.read_row.tolist() + hidden
        assert [f == MASKED for f, _ in kernel] == [False] * len(h.read_row) + [True] * len(hidden)
        # A hybrid model's other groups: one row each, its ids as vLLM built them, the blocks
        # its kernel reads (a sliding window's last ones) in colour, the rest greyed.
        groups = [k for k in s2 if k.startswith("group")]
        assert len(groups) == len(h.groups or ())
        for k, g in enumerate(h.groups or ()):
            row = s2[f"group{k}"]
            read = set(g.read_blocks(h.seq_len).tolist())
            assert [row[j][1] for j in sorted(row)] == g.row[:len(row)].tolist()
            assert {j for j in row if row[j][0] != MASKED} == read, f"step {rec.step} group {k}"
        fill = h.seq_len - (total - 1) * bs
        assert d["fill"] == f"{fill}/{bs}"
        held = per_block(d["d4"]["held"])
        assert [held[j][0] == MASKED for j in range(total)] == [j not in kept for j in range(total)]
        reads = per_block(d["d4"]["reads"])
        assert [reads[j][1] for j in sorted(reads)] == h.kernel_row.tolist()
        assert d["blocks_read"] == f"blocks read: {h.blocks_read} of {total}"
        assert d["lamps"] == [h.mode]
        kernel_seq = h.built_seq_len if h.built_seq_len is not None else h.attn_seq_len
        assert f"seq_len {h.seq_len} → {kernel_seq}" in d["card"]      # the packet's card
        trapped = [e["text"] for e in h.events if e["kind"] == "tag_trapped"]
        buf = d["buffer"]
        assert (trapped[-1] in buf) if trapped else (buf == (h.tag_buffer or "(empty)"))
    assert page.errors == [] and page.offline_requests == []
    page.close()


def _state(page) -> dict:
    return page.evaluate("""(sel) => { const e = document.querySelector(sel);
        return {step: +e.dataset.daStep, steps: +e.dataset.daSteps, drawn: +(e.dataset.daDrawn
                || 0), playing: e.classList.contains('da-playing')}; }""", PLAYER)


@pytest.mark.parametrize("name", ["seed_cpu", "h200_8b_64k"])
def test_the_player_plays_every_step_scrubs_steps_by_key_and_pulses(name, browser, tmp_path):
    tr = load(TRACES / f"{name}.jsonl.gz")
    html = write_page(TRACES / f"{name}.jsonl.gz", tmp_path / "run.html")
    assert html.stat().st_size <= 10 * 2**20
    page = open_page(browser, html)
    n = len(tr.records)
    assert _state(page) == {"step": 0, "steps": n, "drawn": 1, "playing": False}
    page.fill("[data-da-action=speed]", "20")
    page.dispatch_event("[data-da-action=speed]", "change")
    page.click("[data-da-action=play]")
    page.wait_for_function(f"(sel) => document.querySelector(sel).dataset.daStep == {n - 1}"
                           " && !document.querySelector(sel).classList.contains('da-playing')",
                           arg=PLAYER, timeout=120_000)
    page.wait_for_timeout(100)
    # every step from 1 to the last was painted: the player never skips one
    assert _state(page) == {"step": n - 1, "steps": n, "drawn": n - 1, "playing": False}
    assert "end of the recording" in page.inner_text(".da-player-note")
    # scrub back, then the keyboard
    page.evaluate("() => { const s = document.querySelector('[data-da-action=scrub]');"
                  " s.value = 0; s.dispatchEvent(new Event('input')); }")
    assert _state(page)["step"] == 0
    page.focus(PLAYER)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert _state(page)["step"] == 2
    page.keyboard.press("ArrowLeft")
    assert _state(page)["step"] == 1
    page.keyboard.press(" ")
    assert _state(page)["playing"]
    page.keyboard.press(" ")
    assert not _state(page)["playing"]
    # hover a block of diagram 2's staged row: it pulses there, in diagram 4, and diagram 3
    # names it
    page.set_viewport_size({"width": 1366, "height": 5000})     # all four in view
    page.evaluate("(i) => daLab.goto(i)", n // 2)
    rect = page.locator('[data-da-diagram="2"] [data-strip=staged] rect[data-run]').first
    box = rect.bounding_box()
    page.mouse.move(box["x"] + 1, box["y"] + box["height"] / 2)
    # the block under the mouse (a 2,042-block row has a third of a pixel per block)
    p = page.evaluate("[...document.__daLabPage.hubs.values()].find((h) => h.block !== null).block")
    assert p in tr.records[n // 2].requests[0].staged_row.tolist()
    assert f"block {p}:" in page.inner_text('[data-da-diagram="2"] .da-highlight')
    assert page.locator('[data-da-diagram="2"] .da-pulse').count() >= 3   # b, b', grid...
    assert page.locator('[data-da-diagram="4"] .da-pulse').count() >= 1
    assert f"physical block {p}:" in page.inner_text('[data-da-diagram="3"]')
    assert page.errors == [] and page.offline_requests == []
    page.close()


# Panel (e) of diagram 2 (BlocksDiagram(batch=True)): per request of the step, its staged row,
# and a bar under each run of slots whose physical block is in n > 1 rows ("j,k,n").
BATCH_JS = """(i) => {
  const out = {};
  for (const g of document.querySelectorAll('[data-batch] [data-req]')) {
    const ids = [];
    for (const r of g.querySelectorAll('rect[data-run]')) {
      const [a, b] = r.dataset.run.split(',').map(Number);
      for (let j = a; j < b; j++) ids[j] = Number(r.dataset.id) + (j - a);
    }
    out[g.dataset.req] = { ids, shared: [] };
  }
  for (const r of document.querySelectorAll('[data-batch] rect[data-shared]')) {
    out[r.dataset.of].shared.push(r.dataset.shared.split(',').map(Number));
  }
  return out;
}"""


def test_the_batch_panel_marks_blocks_in_several_rows(browser, tmp_path):
    from da_lab_widgets import BlocksDiagram, Highlight, Player, TraceSource
    from da_lab_widgets.page import page_html

    src = TraceSource(TRACES / "readers_cpu.jsonl.gz")
    player = Player(src, [BlocksDiagram(src.header, Highlight(), req="reader-1", batch=True)])
    html = tmp_path / "batch.html"
    html.write_text(page_html(player.config(kernel=False), player.encoder.packet(), title="b"))
    page = open_page(browser, html)
    page.locator('[data-da-diagram="2"]').scroll_into_view_if_needed()
    for i, rec in enumerate(src.records):
        # a diagram draws once it is on screen (IntersectionObserver, asynchronous): wait for
        # it to show step i before reading it (a busy machine reported the first step late)
        page.evaluate("(i) => daLab.goto(i)", i)
        page.wait_for_function("(i) => document.querySelector('[data-da-diagram=\"2\"]')"
                               ".dataset.daShows === String(i)", arg=i, timeout=30_000)
        d = page.evaluate(BATCH_JS, i)
        rows = {q.req: [int(p) for p in q.staged_row] for q in rec.requests if q.hooked}
        assert {r: v["ids"] for r, v in d.items()} == rows, f"step {rec.step}"
        count = {}
        for row in rows.values():
            for p in set(row):
                count[p] = count.get(p, 0) + 1
        for req, row in rows.items():
            want = [(j, count[p]) for j, p in enumerate(row) if count[p] > 1]
            got = [(j, n) for a, b, n in d[req]["shared"] for j in range(a, b)]
            assert got == want, f"step {rec.step}, {req}"
        assert any(n == 3 for v in d.values() for _a, _b, n in v["shared"])
    assert not page.errors


def test_a_still_image_says_nothing_about_hovering(browser, tmp_path):
    """The page image export draws (`da-lab export --out`: a PNG can't be hovered) has no
    "hover a block" hint and no "hovered" key in diagram 2; the interactive page keeps both
    (issue 56)."""
    from da_lab_widgets.export import run_page

    texts = {}
    for still in (False, True):
        html = tmp_path / f"still-{still}.html"
        html.write_text(run_page(TRACES / "seed_cpu.jsonl.gz", eager=True, still=still))
        page = open_page(browser, html)
        texts[still] = page.inner_text('[data-da-diagram="2"]') + " ".join(page.evaluate(
            "() => [...document.querySelectorAll('[data-da-diagram=\"2\"] svg text')]"
            ".map(t => t.textContent)"))
        assert not page.errors
        page.close()
    assert "hover a block" in texts[False] and "hovered" in texts[False]
    assert "hover" not in texts[True], texts[True]
