"""Frames that keep up: long rows are drawn as runs of alike blocks, and a tick sends only what
changed. These tests hold the drawing to the records (every block of every run, the hover of a
block inside a run) and check what goes to the front end; speed itself is measured by
bench/widgets_cpu.py and bench/widgets_browser.py, not asserted here."""

import copy
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from da_lab_widgets import (
    BlocksDiagram,
    DAHookDiagram,
    Highlight,
    MetadataPathDiagram,
    SkeletonDiagram,
    TraceSource,
)
from da_lab_widgets.rows import MASKED, Pusher, RequestView
from drawn import hover, last_block, per_block, runs, trace

TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture(scope="module", params=["seed_cpu", "h200_tiny_seed", "h200_8b_64k"])
def source(request):
    return TraceSource(TRACES / f"{request.param}.jsonl.gz")


def _expected_rows(h, view):
    """Per slot, from the record: (a) the region colour of each logical block, (b) the staged
    row's (colour, physical id), (c) the kernel's row: read blocks first, then the hidden."""
    staged, kept = h.staged_row.tolist(), h.kept.tolist()
    hidden = [lb for lb in range(h.blocks_total) if lb not in set(kept)]
    logical = {j: view.colors[j] for j in range(h.blocks_total)}
    stag = {j: (view.colors[j], p) for j, p in enumerate(staged)}
    kernel = {j: (view.colors[lb], p) for j, (p, lb) in enumerate(zip(h.read_row.tolist(), kept,
                                                                         strict=True))}
    kernel.update({len(kept) + k: (MASKED, staged[lb]) for k, lb in enumerate(hidden)})
    return logical, stag, kernel


def test_runs_rebuild_every_block_of_every_step(source):
    recs, hdr = source.records, source.header
    hl = Highlight()
    blocks, hook = BlocksDiagram(hdr, hl), DAHookDiagram(hdr, hl)
    prov = hdr["provenance"]
    rid = recs[0].added[0]["req"]
    shown = 0
    for i, rec in enumerate(recs):
        blocks.show(recs, i)
        hook.show(recs, i)
        h = rec.request(rid)
        if h is None or not h.hooked:
            continue
        shown += 1
        view = RequestView.of(recs, rid, prov["block_size"], prov["num_blocks"])
        logical, stag, kernel = _expected_rows(h, view)
        fig = blocks.figure
        # the last logical block is shapes of its own, filled to seq_len (test_widgets.py)
        j, filled, color, _ = last_block(fig)
        assert j == h.blocks_total - 1
        assert per_block(fig, "logical") == {j: c for j, c in logical.items()
                                             if j < h.blocks_total - 1}
        assert filled > 0 and color == logical[h.blocks_total - 1]
        lab = trace(fig, "last label")          # its id, where a label fits, stays with it
        assert list(lab.x) == [h.blocks_total - 1] and lab.text[0] in ("", str(j))
        assert per_block(fig, "staged") == {j: c for j, (c, _) in stag.items()}
        assert per_block(fig, "kernel") == {j: c for j, (c, _) in kernel.items()}
        kept = set(h.kept.tolist())
        assert per_block(hook.figure, "row") == {
            j: (view.colors[j] if j in kept else MASKED) for j in range(h.blocks_total)}
        # a run's label is its physical ids, first to last: they count up inside a run
        text = trace(fig, "labels")
        at = {(x, y): t for x, y, t in zip(text.x, text.y, text.text, strict=True)}
        for name, y, row in (("staged", 2, stag), ("kernel", 1, kernel)):
            for j0, stop, _ in runs(fig, name):
                j1 = stop - 1
                ids = [row[j][1] for j in range(j0, j1 + 1)]
                assert ids == list(range(ids[0], ids[0] + len(ids)))
                label = at.get(((j0 + j1) / 2, y))
                assert label in (None, str(ids[0]) if j0 == j1 else f"{ids[0]}–{ids[-1]}")
        if prov["num_blocks"] > 1000:
            # a 2,000-block row is a handful of bars, not one marker per block
            assert all(len(runs(fig, k)) < 40 for k in ("logical", "staged", "kernel"))
            assert len(runs(hook.figure, "row")) < 40
    assert shown > 0.9 * len(recs)


def test_hover_on_a_block_inside_a_run_names_it_and_its_slot(source):
    recs, hdr = source.records, source.header
    i = next(k for k, r in enumerate(recs) if r.requests[0].mode == "focus")
    hl = Highlight()
    blocks, hook = BlocksDiagram(hdr, hl), DAHookDiagram(hdr, hl)
    blocks.show(recs, i)
    hook.show(recs, i)
    h = recs[i].requests[0]
    prov = hdr["provenance"]
    view = RequestView.of(recs, h.req, prov["block_size"], prov["num_blocks"])
    logical, stag, kernel = _expected_rows(h, view)
    staged = h.staged_row.tolist()
    # the middle block of the widest run of each row
    a, b, _ = max(runs(blocks.figure, "staged"), key=lambda r: r[1] - r[0])
    j = (a + b) // 2
    assert hover(blocks.figure, "staged", j) == (
        f"staged[{j}] = physical {staged[j]} (logical {j}, {view.regions[j]})")
    assert hover(blocks.figure, "logical", j) == (
        f"logical {j} ({view.regions[j]}) → physical {staged[j]}")
    read = "read" if j in set(h.kept.tolist()) else "masked, not read"
    assert hover(hook.figure, "row", j) == (
        f"logical {j} ({view.regions[j]}) → physical {staged[j]}: {read}")
    a, b, _ = max(runs(blocks.figure, "kernel"), key=lambda r: r[1] - r[0])
    k = (a + b) // 2
    p = kernel[k][1]
    lb = staged.index(p)
    state = "read" if k < len(h.kept) else "hidden, not read"
    assert hover(blocks.figure, "kernel", k) == (
        f"kernel row {k}: physical {p} (logical {lb}, {view.regions[lb]}): {state}")
    assert hover(blocks.figure, "staged", len(staged)) is None     # past the row: no block
    # hovering that block of the staged row highlights its physical slot everywhere
    blocks._hovered("staged", _points(j))
    assert hl.block == staged[j]
    assert blocks.label.value == (f"block {staged[j]}: logical {j} of {h.req}, "
                                  f"physical slot {staged[j]}")


def _points(x: int):
    from plotly.callbacks import Points

    return Points(point_inds=[[0, x]], xs=[x], ys=[0], trace_name="", trace_index=0)


@pytest.fixture
def sent(monkeypatch):
    """Every comm message widgets publish, as (comm id, data)."""
    import comm

    out = []
    monkeypatch.setattr(comm.DummyComm, "publish_msg",
                        lambda self, msg_type, data=None, metadata=None, buffers=None, **k:
                        out.append((self.comm_id, data)))
    return out


def _updates(msgs, fig) -> list[dict]:
    """The plotly updates a figure sent: {'style_traces', 'style_data', 'layout_data'}."""
    out = []
    for cid, data in msgs:
        state = (data or {}).get("state") or {}
        if cid == fig.comm.comm_id and state.get("_py2js_update"):
            out.append(state["_py2js_update"])
    return out


def test_an_unchanged_tick_sends_nothing_and_a_decode_step_only_what_moved(sent):
    src = TraceSource(TRACES / "h200_8b_64k.jsonl.gz")
    recs = src.records
    hl = Highlight()
    blocks, hook = BlocksDiagram(src.header, hl), DAHookDiagram(src.header, hl)
    # two decode steps in a row under GLOBAL: same blocks, one more token
    i = next(k for k in range(1, len(recs)) if recs[k].requests[0].mode == "global"
             and recs[k - 1].requests[0].mode == "global"
             and recs[k].requests[0].blocks_total == recs[k - 1].requests[0].blocks_total)
    for d in (blocks, hook):
        d.show(recs, i - 1)
    sent.clear()
    for d in (blocks, hook):
        d.show(recs, i - 1)                        # the same step again: nothing to say
    assert sent == []
    for d in (blocks, hook):
        d.show(recs, i)
    # the blocks figure: no trace data at all (runs, hover layers, grid unchanged); only
    # shapes that stay where they are: the title's text, the last block's next token slice
    # filled, last step's outlines hidden. Colours and labels only: plotly.js redraws those
    # shapes alone ("arraydraw"); a moved, added or removed shape redraws the whole figure.
    ups = _updates(sent, blocks.figure)
    assert len(ups) == 1 and ups[0]["style_traces"] == [] and not ups[0]["style_data"]
    edits = ups[0]["layout_data"]
    keys = [re.fullmatch(r"shapes\[(\d+)\]\.(fillcolor|line\.color|label\.text"
                         r"|label\.font\.color)", k)
            for k in edits]
    assert all(keys), sorted(edits)
    on_page = len(blocks.figure.layout.shapes)
    assert all(int(m[1]) < on_page for m in keys)
    title = blocks.figure.layout.shapes[0]
    assert title.name == "title" and edits["shapes[0].label.text"] == title.label.text
    assert f"step {recs[i].step} " in title.label.text
    tok = recs[i].requests[0].seq_len - (recs[i].requests[0].blocks_total - 1) * blocks.block_size
    assert [k for k, m in zip(edits, keys, strict=True) if m[2] == "fillcolor"
            and blocks.figure.layout.shapes[int(m[1])].name == "logical fill"] == [
        f"shapes[{2 + tok}].fillcolor"]         # title, key, frame, then the token slices
    # the hook's row: the same blocks, the same reads: nothing at all (its title has no step)
    assert _updates(sent, hook.figure) == []
    # the hook's chart holds the whole recording: its x axis moves on to the step, no data
    ups = _updates(sent, hook.chart)
    assert len(ups) == 1 and ups[0]["style_traces"] == [] and not ups[0]["style_data"]
    assert ups[0]["layout_data"] == {"xaxis.range": [recs[0].step - 0.5, recs[i].step + 0.5]}


# A layout edit plotly.js draws alone: one shape's colours or its label (plotly.py spells an
# item of a layout array shapes.3.x in batch_update; LiveFigure's front end passes it on as
# shapes[3].x, the spelling plotly.js needs for that).
_ALONE = re.compile(r"shapes(?:\[(\d+)\]|\.(\d+))\.(fillcolor|line\.color|label\.text"
                    r"|label\.font\.color)")


def test_diagrams_1_and_3_step_by_label_edits_only(sent):
    """A step of the skeleton and of the metadata path changes texts only: shape labels, and
    the packet's hover as one string. No annotation's text (plotly.js redraws the whole figure
    for that), no array-valued trace attribute (a whole redraw too)."""
    src = TraceSource(TRACES / "seed_cpu.jsonl.gz")
    recs, hl = src.records, Highlight()
    skel, path = SkeletonDiagram(src.header, hl), MetadataPathDiagram(src.header, hl)
    i = next(k for k in range(1, len(recs)) if recs[k].metadata is not None
             and recs[k - 1].metadata is not None)
    for d in (skel, path):
        d.show(recs, i - 1)
    sent.clear()
    for d in (skel, path):
        d.show(recs, i)
    for d in (skel, path):
        (up,) = _updates(sent, d.figure)
        assert up["layout_data"] and all(_ALONE.fullmatch(k) for k in up["layout_data"]), up
        notes = [d.figure.layout.shapes[int(m[1] or m[2])].label.text
                 for m in map(_ALONE.fullmatch, up["layout_data"])]
        assert any(f"step {recs[i].step}" in (t or "") for t in notes)
    assert _updates(sent, skel.figure)[0]["style_data"] == {}
    (up,) = _updates(sent, path.figure)
    hover = up["style_data"].pop("hovertext")
    assert up["style_data"] == {} and len(hover) == 1 and isinstance(hover[0], str)
    assert f"step {recs[i].step}" in hover[0]


def test_pusher_sends_only_changed_traces_and_keys(sent):
    fig = go.FigureWidget()
    fig.add_scatter(x=[0], y=[0], mode="text", text=["a"])
    fig.add_heatmap(z=[[1, 2]], customdata=[["a", "b"]])
    fig.add_heatmap(z=[[3, 4]], customdata=[["c", "d"]])
    push = Pusher(fig)
    push({0: {"text": ["a"]}, 1: {"z": [[1, 2]], "customdata": [["a", "b"]]},
          2: {"z": [[3, 4]], "customdata": [["c", "d"]]}})
    sent.clear()
    push({0: {"text": ["a"]}, 1: {"z": [[1, 2]], "customdata": [["a", "b"]]},
          2: {"z": [[3, 5]], "customdata": [["c", "d"]]}}, {"title.text": "t"})
    (up,) = _updates(sent, fig)
    # only heatmap 2, only its z; the unchanged scatter and heatmap stay out
    assert up["style_traces"] == [2] and up["style_data"] == {"z": [[[3, 5]]]}
    assert up["layout_data"] == {"title.text": "t"}
    sent.clear()
    # a text change and a customdata change: two kinds of trace, still one message (one
    # redraw in the browser); each trace gets its own key and plotly's Undefined ("leave it
    # alone") for the other's; heatmap 2's unchanged z is not resent
    push({0: {"text": ["b"]}, 2: {"z": [[3, 5]], "customdata": [["c", "e"]]}})
    (up,) = _updates(sent, fig)
    assert up["style_traces"] == [0, 2]
    assert up["style_data"] == {"text": [["b"], "_undefined_"],
                                "customdata": ["_undefined_", [["c", "e"]]]}
    assert list(fig.data[2].customdata[0]) == ["c", "e"] and fig.data[0].text == ("b",)
    sent.clear()
    push({0: {"text": ["b"]}}, {"title.text": "t"})
    assert sent == []


def _no_uids(fig: dict) -> dict:
    return {**fig, "data": [{k: v for k, v in t.items() if k != "uid"} for t in fig["data"]]}


def test_live_figure_fast_update_leaves_the_figure_plotly_update_would(sent):
    """rows.Pusher on a LiveFigure sets the data and layout itself (no plotly.py validation or
    element-by-element comparison): the figure as plotly.py reads it afterwards, and the
    message the page gets, are those of plotly's own update, step after step."""
    from da_lab_widgets import LiveFigure
    from da_lab_widgets.shapes import text_shape

    def build(cls):
        fig = cls(layout={"shapes": [], "yaxis": {"range": [0, 1]}})
        fig.add_bar(x=[0], y=[1], marker={"color": ["red"], "line": {"color": ["#111"]}})
        fig.add_heatmap(z=[[1, None]], text=[["a", ""]])
        return fig

    fast, ref = build(LiveFigure), build(go.FigureWidget)
    push_fast, push_ref = Pusher(fast), Pusher(ref)
    note = text_shape("note", 0, 1, 1, 2, "step 1")
    box = {"name": "b", "type": "rect", "x0": 0, "x1": 1, "y0": 0, "y1": 1, "fillcolor": "red",
           "line": {"color": "#111", "width": 1}}
    steps = [
        ({0: {"x": [0, 1], "y": [1, 2], "marker.color": ["red", "blue"],
              "marker.line.color": ["#111", "#222"]}, 1: {"z": [[1, 1]], "text": [["a", "b"]]}},
         {"shapes": [note, box], "yaxis.range": [0, 3], "yaxis.ticktext": ["a", "b"]}),
        ({1: {"text": [["a", "c"]]}},                       # one trace, one key
         {"shapes": [{**note, "label": {**note["label"], "text": "step 2"}},
                     {**box, "fillcolor": "blue"},          # leaf edits: shapes[k].x, and
                     {**box, "fillcolor": "green"}]}),      # into the hidden room after them
        ({}, {"shapes": [note]}),                           # one fewer: hidden, leaf edits
        ({0: {"marker.color": ["green", "green"]}},
         {"shapes": [note, {**box, "x0": 2, "x1": 3}]}),    # a move: the whole list again
        ({}, {"shapes": [note, {**box, "x0": 2, "x1": 3},   # into the hidden room after it
                         {**box, "x0": 2, "x1": 3, "fillcolor": "green"}]}),
        ({}, {"shapes": [note]}),
    ]
    for traces, layout in steps:
        sent.clear()
        push_fast(*copy.deepcopy((traces, layout)))   # each its own copy: neither may alias
        got = _updates(sent, fast)
        assert len(got) == 1
        push_ref(*copy.deepcopy((traces, layout)))
        assert _no_uids(fast.to_dict()) == _no_uids(ref.to_dict())
        # the figure holds the shapes asked for, then hidden ones (the room to grow)
        now, given = fast.to_dict()["layout"]["shapes"], layout["shapes"]
        assert now == push_fast.shapes and now[:len(given)] == given
        assert {s["fillcolor"] for s in now[len(given):]} == {"rgba(0,0,0,0)"}
        (up,) = got
        assert up["style_traces"] == sorted(traces)
        assert set(up["layout_data"]) >= {k for k in layout if k != "shapes"}
    assert fast.data[0].marker.color == ("green", "green")


def test_shape_edits_send_colours_and_labels_leaf_by_leaf_and_moves_as_a_list():
    from da_lab_widgets.shapes import HEADROOM, shape_edits, text_shape

    box = {"name": "b", "x0": 0, "x1": 1, "y0": 0, "y1": 1, "fillcolor": "red",
           "line": {"color": "#111", "width": 1}}
    note = text_shape("note", 0, 1, 1, 2, "step 1")
    edits, page = shape_edits(None, [note, box])          # first: the list, and room to grow
    assert edits == {"shapes": page} and len(page) == 2 + HEADROOM
    # a colour and a label: one leaf each (plotly.js redraws those two shapes alone)
    edits, page = shape_edits(page, [{**note, "label": {**note["label"], "text": "step 2"}},
                                     {**box, "fillcolor": "blue"}])
    assert edits == {"shapes[0].label.text": "step 2", "shapes[1].fillcolor": "blue"}
    # one shape fewer: it stays on the page, hidden; the list keeps its length
    edits, page = shape_edits(page, [page[0]])
    assert edits == {"shapes[1].fillcolor": "rgba(0,0,0,0)",
                     "shapes[1].line.color": "rgba(0,0,0,0)"} and len(page) == 2 + HEADROOM
    # a shape that moves: the whole list (the page redraws everything for that anyway)
    moved = {**box, "x0": 2, "x1": 3}
    edits, page = shape_edits(page, [page[0], moved])
    assert list(edits) == ["shapes"] and edits["shapes"][1] == moved
    assert len(edits["shapes"]) == 2 + HEADROOM
