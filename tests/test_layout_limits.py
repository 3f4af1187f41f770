"""Issue 57 F1: one request's DA work per engine step is bounded. What a layout may carry is
limited (chunks, `hidden` entries), refused where any layout is made (the constructor: the
server's edge, the hook and the Lab all go through it), and the decision's work is linear in
the chunks, never chunks x hidden or chunks squared. The vectorised decision is checked
against a per-chunk, per-token reference built here."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.layout import MAX_CHUNKS, Layout
from da_lab.core.mask import kept_blocks, partially_kept, visible_tokens
from da_lab.core.tags import Directive, Mode
from da_lab.core.wire import layout_to_wire, parse_layout


@pytest.mark.parametrize("make, says", [
    (lambda: Layout.from_spans(32, [(10, 11), (20, 21)], 100, hidden=[1] * 510_000),
     "hidden names each chunk at most once"),
    (lambda: Layout(32, 1, (1, 1), 100, hidden=(1, 1)), "hidden names each chunk at most once"),
    (lambda: Layout.from_spans(1, [(k, k + 1) for k in range(MAX_CHUNKS + 1)],
                               MAX_CHUNKS + 2), f"at most {MAX_CHUNKS:,} chunks"),
    (lambda: Layout(1, 1, (1,) * (MAX_CHUNKS + 1), MAX_CHUNKS + 3),
     f"at most {MAX_CHUNKS:,} chunks"),
])
def test_a_layout_past_its_limits_is_refused(make, says):
    with pytest.raises(ValueError, match=says):
        make()


def test_the_wire_refuses_a_hidden_list_longer_than_the_chunks():
    """The adversary's 1 MB layout: 880 one-token chunks and 510k hidden entries was accepted
    at the server's edge; it is a 400 now, before any engine step."""
    spans = [[k, k + 1] for k in range(10, 890)]
    wire = json.dumps({"block_size": 32, "chunk_spans": spans, "hidden": [1] * 510_000},
                      separators=(",", ":"))
    assert len(wire) < 1 << 20          # under the wire's size limit: it got through before
    with pytest.raises(ValueError, match="hidden"):
        parse_layout(wire, 1000, block_size=32)
    ok = Layout.from_spans(32, spans, 1000, hidden=range(1, 881))
    assert parse_layout(layout_to_wire(ok), 1000, block_size=32) == ok


def test_a_card_layouts_spans_are_built_once():
    """chunk_range read the spans of every chunk at each call: O(chunks^2) per decision
    (8,000 one-block chunks took 15 s here per recompute). The spans are made once."""
    lay = Layout(16, 1, (1,) * 8000, 16 * 8001 + 10)
    assert lay.chunk_spans is lay.chunk_spans
    assert lay.hidden_set is lay.hidden_set
    assert [lay.chunk_range(k) for k in (1, 4000, 8000)] == [range(1, 2), range(4000, 4001),
                                                             range(8000, 8001)]


def _reference(directive, lay, seq_len, query_len):
    """kept_blocks, partially_kept and visible_tokens, chunk by chunk and token by token."""
    bs = lay.block_size
    n = -(-seq_len // bs)
    shown = set()
    if directive.mode is Mode.GLOBAL:
        shown = set(range(1, lay.n_chunks + 1))
    elif directive.mode is Mode.FOCUS:
        shown = {c for c in directive.chunks if 1 <= c <= lay.n_chunks and c not in lay.hidden}
    # Over the whole prompt: a block's hidden tokens count before they are computed.
    full = np.ones(max(seq_len, lay.prompt_len), dtype=bool)
    for cid, (a, b) in enumerate(lay.chunk_spans, start=1):
        if cid not in shown:
            full[a:b] = False
    vis = full[:seq_len]
    keep = np.zeros(n, dtype=bool)
    for blk in range(n):
        toks = range(blk * bs, min((blk + 1) * bs, seq_len))
        keep[blk] = any(vis[t] for t in toks) or blk * bs >= lay.prompt_len
    if directive.mode is Mode.GLOBAL:
        keep[:] = True
    keep[max(0, seq_len - query_len) // bs:] = True
    kept = np.flatnonzero(keep)
    partial = [b for b in kept if not all(full[b * bs: (b + 1) * bs])]
    return kept, (partial if lay.unaligned and directive.mode is not Mode.GLOBAL else []), vis


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.lists(st.integers(1, 9), min_size=1, max_size=40),
       st.data())
def test_the_vectorised_decision_equals_the_per_chunk_reference(bs, gaps, data):
    spans, at = [], data.draw(st.integers(0, 20))
    for g in gaps:
        length = data.draw(st.integers(1, 9))
        spans.append((at, at + length))
        at += length + g - 1
    prompt_len = at + data.draw(st.integers(1, 10))
    n_chunks = len(spans)
    hidden = data.draw(st.lists(st.integers(1, n_chunks), unique=True, max_size=n_chunks))
    lay = Layout.from_spans(bs, spans, prompt_len, hidden)
    if data.draw(st.booleans()):          # the card's whole-block form of the same chunks
        blocks = [b - a for a, b in zip(*lay.chunk_bounds, strict=True)]
        lay = Layout(bs, max(1, lay.head_blocks), tuple(max(1, b) for b in blocks),
                     (max(1, lay.head_blocks) + sum(max(1, b) for b in blocks)) * bs + 3,
                     tuple(hidden))
    mode = data.draw(st.sampled_from([Mode.GLOBAL, Mode.LOCAL, Mode.FOCUS]))
    chunks = tuple(data.draw(st.lists(st.integers(1, n_chunks + 2), min_size=1, max_size=50)))
    d = Directive(mode, chunks=chunks) if mode is Mode.FOCUS else Directive(mode)
    seq_len = lay.prompt_len + data.draw(st.integers(-lay.prompt_len + 1, 40))
    q = data.draw(st.integers(1, seq_len))
    kept, partial, vis = _reference(d, lay, seq_len, q)
    got = kept_blocks(d, lay, seq_len, q)
    assert got.tolist() == kept.tolist()
    assert partially_kept(d, lay, got).tolist() == [int(b) for b in partial]
    assert visible_tokens(d, lay, seq_len).tolist() == vis.tolist()
