"""Property tests for da_lab.core.tags: the stream trap is split-invariant, never raises, and
stays bounded, whatever text arrives in whatever pieces."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.tags import (
    Closing,
    Directive,
    Event,
    EventKind,
    Mode,
    TagStream,
    parse_tag,
    tag_text,
)

K = EventKind

SETTINGS = settings(max_examples=200, deadline=None)


def feed_all(stream: TagStream, pieces) -> list[Event]:
    events: list[Event] = []
    for p in pieces:
        events.extend(stream.feed(p))
    return events


# --- property tests ----------------------------------------------------------------------------

directives = st.one_of(
    st.just(Directive()),
    st.just(Directive(Mode.LOCAL)),
    st.integers(1, 10**6).map(lambda n: Directive(Mode.LOCAL, recent=n)),
    st.lists(st.integers(1, 10**6), min_size=1, max_size=8).map(
        lambda c: Directive(Mode.FOCUS, chunks=tuple(c))
    ),
    st.lists(st.integers(1, 30), min_size=1, max_size=30).map(
        lambda c: Directive(Mode.FOCUS, chunks=tuple(c))
    ),
)

paper_directives = st.one_of(
    st.just(Directive()),
    st.just(Directive(Mode.LOCAL)),
    st.lists(st.integers(1, 30), min_size=1, max_size=6).map(
        lambda c: Directive(Mode.FOCUS, chunks=tuple(c))
    ),
)
# Both dialects: the card's tags and the paper's, closing tags included.
valid_tags = st.one_of(
    directives.map(tag_text),
    paper_directives.map(lambda d: tag_text(d, "paper")),
    st.sampled_from(["<focus c1, C4-C6>", "<focus C2 - C5>", "<local  3 >", "<focus C13>",
                     "</focus>", "</local>", "</global>", "<focus 2, 5>", "<FOCUS chunk='3'>",
                     "<answer>", "</answer>", "<focus magic_chunks=\"1\"/>", "</ focus>",
                     "<focus\r2>", "<local\f>", "</focus\r>"]),
)
malformed_tags = st.sampled_from(
    [
        "<global 3>", "<focus>", "<local 0>", "<focus C3-C1>", "<local 1000001>",
        "<focus C1\nC2>", "<focus C1<", "<focus " + "C1," * 30 + ">", "<local x", "<focus ,>",
        "<focus magic_chunks=\"\">", "<focus reason=\"x\">", "</focus x>", "<global a=\"1\">",
        "<focus magic_chunks=\"2,,3\">", "<local/ >", "<focus\n2>", "</\nfocus>",
        "</focus\v>", "<local\xa0>", "</focus\x00>",
    ]
)
noise = st.text(alphabet="<>abglocfusx CcC1234,-\n/é\x00 =\"'m_\r\f\v\xa0", max_size=12)
streams = st.lists(st.one_of(valid_tags, malformed_tags, noise), max_size=12).map("".join)


@st.composite
def stream_and_splits(draw):
    text = draw(streams)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces, prev = [], 0
    for c in cuts + [len(text)]:
        pieces.append(text[prev:c])
        prev = c
    return text, pieces


RULES = st.sampled_from(["reference", "paper"])


@SETTINGS
@given(stream_and_splits(), st.sampled_from([None, 0, 12]), st.sampled_from([16, 64]), RULES)
def test_split_invariance(data, n_chunks, max_tag_len, rules):
    text, pieces = data
    kw = {"n_chunks": n_chunks, "max_tag_len": max_tag_len, "rules": rules}
    whole = TagStream(**kw)
    expected = whole.feed(text)
    split = TagStream(**kw)
    assert feed_all(split, pieces) == expected
    assert split.directive == whole.directive and split.stack == whole.stack
    assert split.buffer == whole.buffer and split.offset == whole.offset == len(text)
    # One char at a time is the most extreme split (and never takes the fast path mid-tag).
    chars = TagStream(**kw)
    assert feed_all(chars, text) == expected


@SETTINGS
@given(st.lists(st.text(), max_size=8), st.integers(8, 80), RULES)
def test_fuzz_never_raises_and_buffer_bounded(pieces, max_tag_len, rules):
    s = TagStream(n_chunks=5, max_tag_len=max_tag_len, rules=rules)
    for p in pieces:
        s.feed(p)
        assert len(s.buffer) <= max_tag_len
    assert s.offset == sum(map(len, pieces))


@SETTINGS
@given(st.text(), st.one_of(st.none(), st.integers(0, 50)))
def test_parse_tag_never_raises(text, n_chunks):
    for tag in (text, "<focus " + text + ">", "<focus magic_chunks=" + text + ">",
                "</" + text + ">"):
        assert isinstance(parse_tag(tag, n_chunks), (Directive, Closing, Event))


@SETTINGS
@given(directives)
def test_tag_text_round_trip(d):
    assert parse_tag(tag_text(d)) == d
    if d.recent is None:        # the paper has no <local N>
        assert parse_tag(tag_text(d, "paper")) == d
    assert Directive.from_dict(json.loads(json.dumps(d.to_dict()))) == d


@SETTINGS
@given(streams, st.sampled_from([None, 12]))
def test_offsets_monotone_and_tags_located(text, n_chunks):
    events = TagStream(n_chunks=n_chunks).feed(text)
    offsets = [e.offset for e in events]
    assert offsets == sorted(offsets)
    assert all(0 < o <= len(text) for o in offsets)
    for e in events:
        if e.kind in (K.TAG_TRAPPED, K.MODE_CHANGED, K.UNKNOWN_CHUNK):
            # A trapped tag ends exactly at its offset in the stream.
            assert text[e.offset - len(e.text) : e.offset] == e.text
        if e.kind is K.MODE_CHANGED:
            assert e.directive is not None
