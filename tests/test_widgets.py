"""The diagrams draw the run's real numbers: every check compares a figure with the record (or
the KV map replayed from the records) it was drawn from. Replay tests use the shipped seed trace
and no engine; one test drives the session's live Lab through LiveSource and steers it."""

from pathlib import Path
from statistics import median

import pytest
from da_lab_widgets import (
    BlocksDiagram,
    DAHookDiagram,
    Highlight,
    LiveSource,
    Player,
    TraceSource,
    kv_state,
)
from da_lab_widgets.rows import CACHED, FLASH, FREE, HL, MASKED
from drawn import (
    chart_shown,
    grid_colors,
    grid_hover,
    hover,
    last_block,
    marked,
    per_block,
    trace,
)

from da_lab.core.record import StepRecord
from da_lab.trace import load

TRACES = Path(__file__).resolve().parents[1] / "traces"
SEED = TRACES / "seed_cpu.jsonl.gz"
H200 = TRACES / "h200_tiny_seed.jsonl.gz"     # the same scenario on an H200 (V2 runner, graphs)
H200_8B = TRACES / "h200_8b_64k.jsonl.gz"     # an 8B-shaped model at 64k tokens (2,043 blocks)


@pytest.fixture(scope="module", params=[SEED, H200, H200_8B],
                ids=["cpu_trace", "h200_trace", "h200_8b_64k_trace"])
def source(request):
    src = TraceSource(request.param)
    src.path = request.param
    return src


def _req(rec, rid):
    return next(h for h in rec.requests if h.req == rid)


def _hover(fig, name: str, x: int, y=0) -> None:
    """What the browser sends when the mouse rests on cell (x, y) of a FigureWidget heatmap
    (a hover layer or the grid): plotly.js gives a heatmap point as [row, column]."""
    k = next(n for n, t in enumerate(fig.data) if t.name == name)
    row = 0 if name != "grid" else y
    fig._js2py_pointsCallback = {
        "event_type": "plotly_hover", "device_state": None, "selector": None,
        "points": {"xs": [x], "ys": [y], "point_indexes": [[row, x]], "trace_indexes": [k]}}


def test_kv_state_equals_a_full_replay_forward_and_backward(source):
    tr = load(source.path)
    order = list(range(len(tr.records))) + [30, 5, 39, 0, 12]   # forward, then scrubbing
    for i in order:
        assert kv_state(source.header, source.records, i) == tr.kv_map(tr.records[i].step)
    assert kv_state(source.header, source.records, -1) == {}    # the map when recording began
    assert source.ensure(len(source.records) - 1) and not source.ensure(len(source.records))


def test_diagrams_draw_each_records_values(source):
    recs = source.records
    hl = Highlight()
    hook = DAHookDiagram(source.header, hl)
    blocks = BlocksDiagram(source.header, hl)
    rid = recs[0].added[0]["req"]
    ms = []
    import time

    for i, rec in enumerate(recs):
        t0 = time.perf_counter()
        hook.show(recs, i)
        blocks.show(recs, i)
        ms.append((time.perf_counter() - t0) * 1e3)
        h = _req(rec, rid)
        assert hook.req == blocks.req == rid

        # diagram 4: blocks-read chart, label, lamp, tag buffer, masked blocks
        # (with async scheduling the last engine step only delivers the final token: the
        # request is not scheduled there, so the hook has nothing to show for it)
        mine = [(r.step, _req(r, rid)) for r in recs[: i + 1] if _req(r, rid).hooked]
        xs, read = chart_shown(hook.chart, "blocks read")
        assert read == [m.blocks_read for _, m in mine] and xs == [s for s, _ in mine]
        assert chart_shown(hook.chart, "blocks total")[1] == [m.blocks_total for _, m in mine]
        if not h.hooked:
            assert hook.blocks_read.value == "blocks read: –"
            continue
        assert hook.blocks_read.value == f"blocks read: {h.blocks_read}"
        assert hook.lit == h.mode
        for mode, lamp in hook.lamps.items():
            assert ("da-lamp-on" in lamp._dom_classes) == (mode == h.mode)
        trapped = any(e["kind"] == "tag_trapped" for e in h.events)
        assert ("da-flash" in hook.tag_buffer._dom_classes) == trapped
        row = per_block(hook.figure, "row")            # the runs drawn, block by block
        kept = set(h.kept.tolist())
        assert sorted(row) == list(range(h.blocks_total))
        for lb in range(h.blocks_total):
            assert (row[lb] == MASKED) == (lb not in kept)
        assert str(rec.metadata.backend) in hook.bands["kernel"].value

        # diagram 2: staged row, the builder's row, logical fill, the physical grid
        staged, built = h.staged_row.tolist(), h.read_row.tolist()
        n_built = len(built)
        fig = blocks.figure
        # every slot's physical id, as its hover names it
        assert [hover(fig, "staged", j).split(" = physical ")[1].split(" ")[0]
                for j in range(len(staged))] == [str(p) for p in staged]
        hidden = [staged[lb] for lb in range(h.blocks_total) if lb not in kept]
        assert [hover(fig, "kernel", j).split("physical ")[1].split(" ")[0]
                for j in range(n_built + len(hidden))] == [str(p) for p in built + hidden]
        kc = per_block(fig, "kernel")
        assert all(kc[j] == MASKED for j in range(n_built, n_built + len(hidden)))
        assert all(kc[j] != MASKED for j in range(n_built))
        # the last logical block is filled to seq_len
        bs = source.header["provenance"]["block_size"]
        last = h.seq_len - (h.blocks_total - 1) * bs
        assert last_block(fig)[:2] + last_block(fig)[3:] == (h.blocks_total - 1, last, bs)
        n_blocks = source.header["provenance"]["num_blocks"]
        state = kv_state(source.header, recs, i)
        expect = [blocks.owner_color(state[p]["owners"][0]) if p in state and state[p]["owners"]
                  else CACHED if p in state and state[p]["cached"] else FREE
                  for p in range(n_blocks)]
        assert grid_colors(fig, n_blocks, blocks.cols) == expect
        # append_row: a block new in this step's row flashes in the grid
        before = _req(recs[i - 1], rid).staged_row if i else None
        prev = set(before.tolist()) if before is not None else set()
        assert set(staged) - prev <= marked(fig, "grid mark", FLASH, blocks.cols)

    print(f"\nper-step update, both diagrams: median {median(ms):.1f} ms, max {max(ms):.1f} ms "
          f"(first {ms[0]:.1f} ms) over {len(ms)} steps")
    print("ms per step:", " ".join(f"{x:.1f}" for x in ms))


def test_highlight_outlines_one_physical_block_everywhere(source):
    recs = source.records
    hl = Highlight()
    hook = DAHookDiagram(source.header, hl)
    blocks = BlocksDiagram(source.header, hl)
    i = next(k for k, r in enumerate(recs) if r.requests[0].mode == "focus")
    hook.show(recs, i)
    blocks.show(recs, i)
    h = recs[i].requests[0]
    lb = int(h.kept_logical[1])         # a focused chunk's block
    p = int(h.staged_row[lb])

    hl.set(p)
    assert blocks.label.value == f"block {p}: logical {lb} of {h.req}, physical slot {p}"
    fig, cols = blocks.figure, blocks.cols
    assert marked(fig, "staged mark", HL) == {lb}
    assert marked(fig, "grid mark", HL, cols) == {p}
    assert marked(fig, "kernel mark", HL) == {h.read_row.tolist().index(p)}
    assert marked(hook.figure, "row mark", HL) == {lb}

    # hovering the grid cell of another block moves the highlight in both diagrams
    q = int(h.staged_row[0])
    assert grid_hover(fig, q, cols).startswith(f"physical {q}: ")
    _hover(fig, "grid", q % cols, q // cols)
    assert hl.block == q and hl.source == "blocks"
    assert marked(hook.figure, "row mark", HL) == {0}
    assert blocks.label.value.startswith(f"block {q}: logical 0 of {h.req}")
    # ... and hovering the DA row's block lb sets its physical id
    assert hover(hook.figure, "row", lb).startswith(f"logical {lb} (")
    _hover(hook.figure, "row", lb)
    assert hl.block == p and hl.source == "dahook"
    # ... and so does hovering slot lb of the staged row
    hl.set(None)
    _hover(fig, "staged", lb, 2)
    assert hl.block == p and hl.source == "blocks"
    assert trace(fig, "staged").hovertemplate.startswith("staged[%{x}]")


def test_player_follows_its_slider_play_and_step(source):
    hook = DAHookDiagram(source.header, Highlight())
    player = Player(source, [hook])
    assert player.counter.value == f"step {source.records[0].step}"
    assert "da-step-counter" in player.counter._dom_classes
    assert "da-play" in player.play._dom_classes and "da-step" in player.step_button._dom_classes
    assert player.slider.max == len(source.records) - 1

    player.slider.value = 13
    rec = source.records[13]
    assert player.i == 13 and player.play.value == 13
    assert player.counter.value == f"step {rec.step}"
    assert hook.blocks_read.value == f"blocks read: {rec.requests[0].blocks_read}"
    player.play.value = 20                 # a Play tick
    assert player.slider.value == 20 and hook.lit == source.records[20].requests[0].mode
    player.step_button.click()
    assert player.i == 21 and player.slider.value == 21
    player.slider.value = player.slider.max
    assert not player.step()               # a replay has nothing past its last record
    assert player.i == len(source.records) - 1 and not player.play.playing
    assert all(b.disabled for b in hook.steer_buttons.values())   # replay can't steer
    assert len(player.update_ms) == 5          # steps 0, 13, 20, 21 and the last
    # A busy page sends Play's latest value only: a tick from two records before the end
    # straight past it still shows the last record, then says "end".
    n = len(source.records)
    player.slider.value = n - 3
    player.play.playing = True
    player.play.value = n
    assert player.i == n - 1 and player.counter.value == f"step {source.records[-1].step}"
    assert not player.play.playing and player.play.value == n - 1
    assert "end of the recording" in player.note.value


def test_live_source_runs_one_engine_step_per_record_and_steers(lab):
    src = LiveSource(lab)
    assert src.live and src.header["provenance"]["num_blocks"] == lab.num_blocks
    rid = lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=12,
                          request_id="widgets-live")
    hl = Highlight()
    hook = DAHookDiagram(src.header, hl, lab=lab)
    blocks = BlocksDiagram(src.header, hl)
    player = Player(src, [hook, blocks])          # draws step 0: one engine step
    assert len(src.records) == 1 and hook.req == blocks.req == rid
    assert hook.chunk_picker.options == ("C1", "C2", "C3", "C4")

    hook.chunk_picker.value = ("C2",)
    hook.steer_buttons["focus"].click()
    assert "<focus C2>" in hook.steer_status.value
    while player.step():
        assert player.i == len(src.records) - 1   # never ahead of the screen
    assert all(isinstance(r, StepRecord) for r in src.records)
    steps = [r.step for r in src.records]
    assert steps == list(range(steps[0], steps[0] + len(steps)))
    assert not lab.has_unfinished() and not src.ensure(len(src.records))

    hs = [_req(r, rid) for r in src.records if _req(r, rid).hooked]
    trapped = [e for h in hs for e in h.events if e["kind"] == "tag_trapped"]
    assert [e["text"] for e in trapped] == ["<focus C2>"]
    focused = [h for h in hs if h.mode == "focus"]
    assert focused and all(h.blocks_read < h.blocks_total for h in focused)
    assert list(hook.chart.data[0].y) == [h.blocks_read for h in hs]
    assert hook.blocks_read.value == f"blocks read: {hs[-1].blocks_read}"
    print(f"\nlive: {len(player.step_ms)} engine steps, median "
          f"{median(player.step_ms):.1f} ms; redraw median {median(player.update_ms):.1f} ms")


def test_steering_buttons_are_off_with_a_reason_and_new_request_keeps_playing(lab):
    """Issue 15: a finished request left the buttons on (a press then failed), LOCAL while LOCAL
    wrote a second <local>, and ▶ at the end silently started over at step 0."""
    def add(lab):
        return lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=12)

    src = LiveSource(lab, new_request=add)
    rid = add(lab)
    hook = DAHookDiagram(src.header, Highlight(), lab=lab)
    player = Player(src, [hook])
    off = hook.steering.off
    assert hook.req == rid and hook.steer_buttons["global"].disabled     # GLOBAL already
    assert "already in GLOBAL mode" in off.value
    assert not hook.steer_buttons["local"].disabled
    assert not hook.steer_buttons["focus"].disabled and hook.chunk_picker.value == ("C1",)

    hook.steer_buttons["local"].click()
    assert "the director writes <local>" in hook.steer_status.value
    assert hook.steer_buttons["local"].disabled and "LOCAL is off" in off.value
    player.step()
    player.slider.value = 0                       # an earlier step on screen: steering off
    assert all(b.disabled for b in hook.steer_buttons.values())
    assert "you are looking at step" in off.value
    while player.step():
        pass
    assert lab.requests[rid]["text"].count("<local>") == 1
    assert all(b.disabled for b in hook.steer_buttons.values())
    assert f"{rid} has finished" in off.value and "new request" in off.value
    assert "finished" in player.note.value and not player.play.playing
    # ▶ at the end: Play's max is one past the last record, so a press ticks into "finished"
    # instead of wrapping to step 0 (the player's Play, as ipywidgets', restarts only at max).
    last = player.i
    assert player.play.max == len(src.records) == last + 1
    player.play.value = last + 1                  # the tick a press at the end produces
    assert player.i == last and player.play.value == last and "finished" in player.note.value

    new = player.new_request()
    assert new != rid and hook.req == new and player.play.playing
    assert "finished" not in player.note.value
    assert src.records[-1].request(new) is not None          # one engine step ran it
    assert not hook.steer_buttons["local"].disabled
    while player.step():
        pass
    assert lab.requests[new]["finished"] and len(lab.requests[new]["token_ids"]) == 12
