"""Tests for da_lab.core.tags: the DA tag grammar and the split-invariant stream trap."""

from __future__ import annotations

import json

import pytest

from da_lab.core.tags import (
    Directive,
    Event,
    EventKind,
    Mode,
    TagStream,
    parse_tag,
    tag_text,
)

K = EventKind


def kinds(events):
    return [e.kind for e in events]


def feed_all(stream: TagStream, pieces) -> list[Event]:
    events: list[Event] = []
    for p in pieces:
        events.extend(stream.feed(p))
    return events


# --- parse_tag -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag, expected",
    [
        ("<global>", Directive()),
        ("<local>", Directive(Mode.LOCAL)),
        ("<local 4>", Directive(Mode.LOCAL, recent=4)),
        ("<local  4 >", Directive(Mode.LOCAL, recent=4)),
        ("<local 1000000>", Directive(Mode.LOCAL, recent=10**6)),
        ("<focus C3,C7>", Directive(Mode.FOCUS, chunks=(3, 7))),
        ("<focus C7,C3,C3>", Directive(Mode.FOCUS, chunks=(3, 7))),
        ("<focus C2-C5>", Directive(Mode.FOCUS, chunks=(2, 3, 4, 5))),
        ("<focus c1, C4-C6>", Directive(Mode.FOCUS, chunks=(1, 4, 5, 6))),
        ("<focus C1,C4 - c6>", Directive(Mode.FOCUS, chunks=(1, 4, 5, 6))),
        ("<focus C2-C2>", Directive(Mode.FOCUS, chunks=(2,))),
        ("<focus C1-C3,C2-C4>", Directive(Mode.FOCUS, chunks=(1, 2, 3, 4))),
        # The paper's dialect (Ho et al. 2026): bare ids, attributes, any case, self-closing.
        ("<focus 3>", Directive(Mode.FOCUS, chunks=(3,))),
        ("<focus 2, 5>", Directive(Mode.FOCUS, chunks=(2, 5))),
        ("<focus 2 5>", Directive(Mode.FOCUS, chunks=(2, 5))),
        ('<focus magic_chunks="2,5">', Directive(Mode.FOCUS, chunks=(2, 5))),
        ("<focus magic_chunks='2, 5'>", Directive(Mode.FOCUS, chunks=(2, 5))),
        ("<focus magic_chunks=4>", Directive(Mode.FOCUS, chunks=(4,))),
        ('<focus  Magic_Chunks = "1" >', Directive(Mode.FOCUS, chunks=(1,))),
        ('<focus chunk="2" why="dates">', Directive(Mode.FOCUS, chunks=(2,))),
        ('<focus id="9" magic_chunks="3">', Directive(Mode.FOCUS, chunks=(3,))),
        ('<focus magic_chunks="2"/>', Directive(Mode.FOCUS, chunks=(2,))),
        ("<focus\t1>", Directive(Mode.FOCUS, chunks=(1,))),
        ("<GLOBAL>", Directive()),
        ("<Local/>", Directive(Mode.LOCAL)),
    ],
)
def test_parse_valid(tag, expected):
    assert parse_tag(tag) == expected


@pytest.mark.parametrize(
    "tag",
    [
        "<global 3>",
        "<focus>",
        "<focus >",
        "<local 0>",
        "<local -1>",
        "<local 1000001>",
        "<local 99999999999999999999999999>",
        "<local 3 4>",
        "<local C3>",
        "<focus C3-C1>",
        "<focus C0>",
        "<focus C1000001>",
        "<focus C3,>",
        "<focus C3,,C4>",
        "<focus C 3>",
        "<focus C3-C>",
        "<focus C١>",  # Arabic-Indic digit: only ASCII digits count
        "<div>",
        "<global",
        "global>",
        "",
        "<globalx>",
        "<focus/ 3>",
        '<focus magic_chunks="2"x="3">',
        '<focus reason="none">',
        "<focus magic_chunks=>",
        '<local magic_chunks="2">',
        "</focus x>",
        "</answer>",
        "<answer>",
    ],
)
def test_parse_malformed(tag):
    ev = parse_tag(tag)
    assert isinstance(ev, Event)
    assert ev.kind is K.MALFORMED_TAG
    assert ev.offset == len(tag)
    assert ev.text == tag
    assert ev.directive is None and ev.detail


def test_parse_unknown_chunk():
    ev = parse_tag("<focus C3,C13>", n_chunks=12)
    assert ev == Event(
        K.UNKNOWN_CHUNK, 14, "<focus C3,C13>", None, "unknown chunk C13 (prompt has C1..C12)"
    )
    # Ranges are checked on their ends, not expanded (C1-C1000000 must stay cheap).
    ev = parse_tag("<focus C10-C1000000>", n_chunks=12)
    assert ev.kind is K.UNKNOWN_CHUNK
    assert ev.detail == "unknown chunks C13-C1000000 (prompt has C1..C12)"
    assert parse_tag("<focus C12>", n_chunks=12) == Directive(Mode.FOCUS, chunks=(12,))
    assert parse_tag("<focus C1>", n_chunks=0).detail == "unknown chunk C1 (prompt has no chunks)"
    # Malformed wins over unknown: the tag never parsed.
    assert parse_tag("<focus C13,x>", n_chunks=12).kind is K.MALFORMED_TAG


def test_parse_never_raises_on_non_str():
    assert parse_tag(None).kind is K.MALFORMED_TAG  # type: ignore[arg-type]


# --- Directive / tag_text ----------------------------------------------------------------------


def test_directive_str_and_tag_text():
    assert str(Directive()) == "global"
    assert str(Directive(Mode.LOCAL)) == "local"
    assert str(Directive(Mode.LOCAL, recent=4)) == "local 4"
    assert str(Directive(Mode.FOCUS, chunks=(7, 3))) == "focus C3,C7"
    assert tag_text(Directive(Mode.FOCUS, chunks=(3, 7))) == "<focus C3,C7>"
    assert tag_text(Directive(Mode.FOCUS, chunks=(1, 2, 4, 5, 6))) == "<focus C1,C2,C4-C6>"
    assert tag_text(Directive()) == "<global>"
    assert tag_text(Directive(Mode.LOCAL)) == "<local>"
    assert tag_text(Directive(Mode.LOCAL, recent=4)) == "<local 4>"


def test_directive_dict_round_trip():
    for d in [
        Directive(),
        Directive(Mode.LOCAL),
        Directive(Mode.LOCAL, recent=2),
        Directive(Mode.FOCUS, chunks=(1, 9)),
    ]:
        assert Directive.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    assert Directive.from_dict({}) == Directive()
    assert Directive("focus", [5, 2, 5]).chunks == (2, 5)  # normalised
    assert Directive("focus", [5, 2, 5]).mode is Mode.FOCUS


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(mode=Mode.FOCUS),
        dict(mode=Mode.GLOBAL, chunks=(1,)),
        dict(mode=Mode.FOCUS, chunks=(0,)),
        dict(mode=Mode.LOCAL, recent=0),
        dict(mode=Mode.GLOBAL, recent=3),
        dict(mode="bogus"),
    ],
)
def test_directive_rejects_inconsistent(kwargs):
    with pytest.raises(ValueError):
        Directive(**kwargs)


def test_event_to_dict_is_json():
    ev = TagStream().feed("<local 2>")[0]
    d = json.loads(json.dumps(ev.to_dict()))
    assert d == {
        "kind": "tag_trapped",
        "offset": 9,
        "text": "<local 2>",
        "directive": {"mode": "local", "chunks": [], "recent": 2},
        "detail": "local 2",
    }


# --- TagStream: exact events -------------------------------------------------------------------


def test_trap_focus_with_mode_change():
    s = TagStream(n_chunks=12)
    events = s.feed("ab<focus C3,C7>cd")
    d = Directive(Mode.FOCUS, chunks=(3, 7))
    assert events == [
        Event(K.TAG_TRAPPED, 15, "<focus C3,C7>", d, "focus C3,C7"),
        Event(K.MODE_CHANGED, 15, "<focus C3,C7>", d, "global -> focus C3,C7"),
    ]
    assert s.directive == d and s.mode is Mode.FOCUS
    assert s.offset == 17 and s.buffer == ""


def test_same_directive_traps_without_mode_change():
    s = TagStream()
    assert s.feed("<global>") == [
        Event(K.TAG_TRAPPED, 8, "<global>", Directive(), "global")
    ]
    s = TagStream(directive=Directive(Mode.LOCAL))
    assert kinds(s.feed("x<local>")) == [K.TAG_TRAPPED]
    assert kinds(s.feed("<local 3>")) == [K.TAG_TRAPPED, K.MODE_CHANGED]
    assert s.directive == Directive(Mode.LOCAL, recent=3)


@pytest.mark.parametrize(
    "tag, directive",
    [
        ("<focus C2-C5>", Directive(Mode.FOCUS, chunks=(2, 3, 4, 5))),
        ("<focus c1, C4-C6>", Directive(Mode.FOCUS, chunks=(1, 4, 5, 6))),
        ("<local>", Directive(Mode.LOCAL)),
        ("<local 4>", Directive(Mode.LOCAL, recent=4)),
    ],
)
def test_stream_tag_forms(tag, directive):
    s = TagStream()
    events = s.feed("x" + tag)
    assert kinds(events) == [K.TAG_TRAPPED, K.MODE_CHANGED]
    assert all(e.offset == len(tag) + 1 and e.text == tag for e in events)
    assert s.directive == directive


def test_unknown_chunk_in_stream():
    s = TagStream(n_chunks=12, directive=Directive(Mode.LOCAL))
    events = s.feed("see <focus C13> now")
    assert events == [
        Event(K.UNKNOWN_CHUNK, 15, "<focus C13>", None, "unknown chunk C13 (prompt has C1..C12)")
    ]
    assert s.directive == Directive(Mode.LOCAL)
    # Without n_chunks any id is accepted.
    assert TagStream().feed("<focus C13>")[0].kind is K.TAG_TRAPPED


@pytest.mark.parametrize(
    "text",
    ["<div>", "a<b", "a < 3 and b > 2", "<->", "<globalx>", "<glob>", "<<>>",
     "<global<", "<", "<g", "x<foc", "<answer>42</answer>", "< focus>", "</ x>",
     "<focused>", "</globals>", "<local-", "<focus,2>", "</\nfoo>", "</ " + "\t" * 300],
)
def test_plain_text_no_events(text):
    s = TagStream()
    assert s.feed(text) == []
    assert s.directive == Directive()
    assert s.offset == len(text)


def test_prefix_is_held_then_released():
    s = TagStream()
    assert s.feed("a<glo") == [] and s.buffer == "<glo"
    assert s.feed("w") == [] and s.buffer == ""  # "<glow" is not a DA keyword
    assert s.feed("<focus C1") == [] and s.buffer == "<focus C1"
    assert kinds(s.feed(">")) == [K.TAG_TRAPPED, K.MODE_CHANGED]
    assert s.buffer == ""


@pytest.mark.parametrize(
    "tag, detail_part",
    [
        ("<global 3>", "no arguments"),
        ("<focus>", "at least one chunk"),
        ("<local 0>", ">= 1"),
        ("<local 1000001>", "larger than"),
        ("<focus C3-C1>", "descending"),
        ("<focus C1,x>", "bad chunk id"),
    ],
)
def test_malformed_in_stream(tag, detail_part):
    s = TagStream(n_chunks=12, directive=Directive(Mode.LOCAL))
    events = s.feed("ab" + tag + "cd")
    assert len(events) == 1
    ev = events[0]
    assert (ev.kind, ev.offset, ev.text, ev.directive) == (K.MALFORMED_TAG, 2 + len(tag), tag, None)
    assert detail_part in ev.detail
    assert s.directive == Directive(Mode.LOCAL)


def test_overflow():
    s = TagStream(max_tag_len=16)
    events = s.feed("<focus C1," + "C2," * 10 + ">")
    # The 17th char of the candidate overflows; the rest, '>' included, is plain text.
    assert events == [
        Event(K.MALFORMED_TAG, 17, "<focus C1,C2,C2,", None, "tag longer than 16 characters")
    ]
    assert s.buffer == "" and s.directive == Directive()


def test_overflow_boundary():
    # A tag of exactly max_tag_len chars (with its '>') is fine; one more char is not.
    tag = "<focus C1,C2,C3>"  # 16 chars
    assert kinds(TagStream(max_tag_len=16).feed(tag)) == [K.TAG_TRAPPED, K.MODE_CHANGED]
    ev = TagStream(max_tag_len=15).feed(tag)
    assert ev == [Event(K.MALFORMED_TAG, 16, tag[:-1], None, "tag longer than 15 characters")]


def test_overflow_huge_feed_stays_bounded():
    s = TagStream()
    big = "<focus " + "C1," * 3_000_000 + ">"  # ~9 MB
    events = s.feed(big)
    assert kinds(events) == [K.MALFORMED_TAG]
    assert events[0].offset == 257 and len(events[0].text) == 256
    assert s.buffer == "" and s.offset == len(big)
    s = TagStream()
    s.feed("<focus " + "C" * 10_000_000)
    assert len(s.buffer) <= 64


def test_newline_inside():
    s = TagStream()
    events = s.feed("<focus C1,\nC2>")
    assert events == [Event(K.MALFORMED_TAG, 11, "<focus C1,", None, "newline inside tag")]
    assert s.buffer == "" and s.directive == Directive()


def test_lt_inside():
    s = TagStream()
    events = s.feed("<focus C1<local>")
    assert events[0] == Event(K.MALFORMED_TAG, 10, "<focus C1", None, "'<' inside tag")
    assert kinds(events[1:]) == [K.TAG_TRAPPED, K.MODE_CHANGED]
    assert events[1].offset == 16 and events[1].text == "<local>"
    # A bare keyword prefix is released silently and the new '<' still counts.
    s = TagStream()
    events = s.feed("<foc<global><loc<<local 2>")
    assert [(e.kind, e.offset, e.text) for e in events] == [
        (K.TAG_TRAPPED, 12, "<global>"),
        (K.TAG_TRAPPED, 26, "<local 2>"),
        (K.MODE_CHANGED, 26, "<local 2>"),
    ]


def test_feed_edge_inputs():
    s = TagStream()
    assert s.feed("") == []
    assert s.feed("\x00<\x00>é🙂<focus C1>") != []
    assert s.offset == len("\x00<\x00>é🙂<focus C1>")
    with pytest.raises(TypeError):
        s.feed(None)  # type: ignore[arg-type]


def test_max_tag_len_too_small():
    with pytest.raises(ValueError):
        TagStream(max_tag_len=7)

