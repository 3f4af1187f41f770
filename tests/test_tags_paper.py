"""Tests for the paper's side of da_lab.core.tags (Ho et al. 2026): closing tags restore the
directive in force when their tag opened, a stack of scopes, and the paper's tag text."""

from __future__ import annotations

import pytest

from da_lab.core.tags import Closing, Directive, EventKind, Mode, TagStream, tag_text

K = EventKind


def kinds(events):
    return [e.kind for e in events]


# --- the paper's closing tags: a stack of the directives in force when each tag opened --------


def modes_after(text: str, n_chunks: int | None = 8) -> list[str]:
    s = TagStream(n_chunks=n_chunks)
    return [str(e.directive) for e in s.feed(text) if e.kind is K.TAG_TRAPPED]


def test_closing_restores_the_directive_its_tag_found():
    text = ('<global> plan <focus magic_chunks="2"> fact </focus> back <local> think '
            "<answer>42</answer></local>")
    assert modes_after(text) == ["global", "focus C2", "global", "local", "global"]
    # Nested: </local> restores the focus it interrupted; </focus> the global before it.
    assert modes_after('<focus 2, 5> a <local> b </local> c </focus>') == [
        "focus C2,C5", "local", "focus C2,C5", "global"]
    # The card's tags open scopes too: a paper closing tag pairs with them.
    assert modes_after("<focus C3> x <local 2> y </local>") == ["focus C3", "local 2", "focus C3"]


def test_closing_unwinds_to_the_last_scope_of_its_keyword():
    # </focus> closes the outer focus and every scope opened inside it.
    s = TagStream(n_chunks=8)
    s.feed("<focus 1> <local> <focus 3> </focus>")
    assert s.directive == Directive(Mode.LOCAL) and s.stack == ("focus", "local")
    s.feed("</focus>")
    assert s.directive == Directive() and s.stack == ()


def test_unmatched_closing_tag_is_reported_and_ignored():
    s = TagStream(n_chunks=4)
    events = s.feed("<local></focus>")
    assert kinds(events) == [K.TAG_TRAPPED, K.MODE_CHANGED, K.MALFORMED_TAG]
    assert events[-1].detail == "</focus> closes no open <focus>: ignored"
    assert s.directive == Directive(Mode.LOCAL)


def test_a_refused_tag_opens_a_scope_that_changes_nothing_when_closed():
    s = TagStream(n_chunks=4)
    events = s.feed('<focus 2><focus magic_chunks="9">')
    assert kinds(events) == [K.TAG_TRAPPED, K.MODE_CHANGED, K.UNKNOWN_CHUNK]
    assert kinds(s.feed("</focus>")) == [K.TAG_TRAPPED]          # back to focus C2: no change
    assert s.directive == Directive(Mode.FOCUS, chunks=(2,))
    assert kinds(s.feed("</focus>")) == [K.TAG_TRAPPED, K.MODE_CHANGED]
    assert s.directive == Directive()


def test_scope_depth_is_bounded():
    from da_lab.core.tags import MAX_DEPTH

    s = TagStream(n_chunks=4)
    s.feed("<local>" * (MAX_DEPTH + 10))
    assert len(s.stack) == MAX_DEPTH


def test_answer_and_other_tags_are_text():
    s = TagStream(n_chunks=4)
    assert s.feed("<answer>Paris</answer> <b>x</b> </div>") == []


def test_paper_tag_text():
    assert tag_text(Directive(Mode.FOCUS, chunks=(5, 2)), "paper") == '<focus magic_chunks="2,5">'
    assert tag_text(Directive(Mode.LOCAL), "paper") == "<local>"
    assert tag_text(Closing(Mode.FOCUS)) == "</focus>"
    with pytest.raises(ValueError, match="no <local N>"):
        tag_text(Directive(Mode.LOCAL, recent=2), "paper")
    with pytest.raises(ValueError, match="dialect"):
        tag_text(Directive(), "xml")
