"""The two rule sets of da_lab.core.tags (docs/protocol.md, "Two rule sets"): the reference
implementation's stack of scopes ("reference", the default) and the paper's own (§2.3 of Ho et
al. 2026: the mode reverts to GLOBAL at the matching closing tag; <global> is prompting
structure and makes no transition). Every difference between them is pinned here, beside what
`declarative-attention` 0.0.8 (the reference) does with the same text; a property test holds
the paper's machine to a ten-line oracle over any stream."""

from __future__ import annotations

import pytest
from declarative_attention import DeclarativeAttention
from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.layout import Layout
from da_lab.core.tags import Closing, Directive, EventKind, Mode, TagStream, parse_tag

K = EventKind
SPANS = {1: (4, 10), 2: (10, 20), 3: (24, 30), 7: (30, 40)}
G, L = Directive(), Directive(Mode.LOCAL)


def F(*c):
    return Directive(Mode.FOCUS, chunks=c)


def run(text: str, rules: str) -> tuple[Directive, list]:
    s = TagStream(n_chunks=8, rules=rules)
    return s, s.feed(text)


def ref_directive(text: str) -> Directive:
    """What declarative-attention's state machine is in after `text`, as a Directive."""
    m = DeclarativeAttention(SPANS)
    m.step(text)
    return G if m.is_global else L if m.is_local else F(*sorted(m.active_chunks))


def modes(events) -> list[str]:
    return [str(e.directive) for e in events if e.kind is K.TAG_TRAPPED]


# The paper's own example (§2): both rule sets, and the reference, read it the same way.
ACME = ('<global> I need the founding year and the IPO year. </global> <focus magic_chunks="2"> '
        '"Acme Corp was founded in 2003 in San Jose." </focus> <global> The IPO year is still '
        'missing. </global> <focus magic_chunks="7"> "Acme Corp went public in 2011." </focus> '
        "<local> 2011 - 2003 = 8 years. </local> <answer> 8 years </answer>")


@pytest.mark.parametrize("rules", ["reference", "paper"])
def test_the_papers_example_reads_the_same_under_both(rules):
    s, events = run(ACME, rules)
    changes = [str(e.directive) for e in events if e.kind is K.MODE_CHANGED]
    assert changes == ["focus C2", "global", "focus C7", "global", "local", "global"]
    assert s.directive == G == ref_directive(ACME)
    assert not [e for e in events if e.kind is K.MALFORMED_TAG]


# Each difference: the text, the directive after it under the reference's rules (which the
# reference implementation agrees with) and under the paper's, and the paper's events' kinds.
DIFFERENCES = [
    # <global> inside a focus: a mode to the stack, prompting structure to the paper.
    ("<focus 2> <global> x", G, F(2)),
    # A nested scope: the stack restores the focus; the paper reverts to GLOBAL.
    ("<focus 2> <local> x </local>", F(2), G),
    ("<focus 2> <focus 3> x </focus>", F(2), G),
    # The closing tag of a mode that is not in force: the stack unwinds past it; the paper
    # ignores it (and says so).
    ("<local> <focus 2> x </local>", G, F(2)),
    ("<focus 2> <local> x </focus>", G, L),
    # The card's dialect never closes its tags: <global> is its only way back.
    ("<focus C3> x <local> y <global>", G, L),
]


@pytest.mark.parametrize("text, reference, paper", DIFFERENCES)
def test_each_difference_between_the_rule_sets(text, reference, paper):
    assert run(text, "reference")[0].directive == reference == ref_directive(text)
    assert run(text, "paper")[0].directive == paper


def test_a_refused_tag_opens_no_scope_under_the_papers_rules():
    text = '<focus 2> <focus magic_chunks="9"> x </focus>'
    s, events = run(text, "reference")
    assert s.directive == F(2) == ref_directive(text)      # the refused tag's scope restored
    p, events = run(text, "paper")
    assert p.directive == G                                 # </focus> matches the focus in force
    assert [e.kind for e in events] == [K.TAG_TRAPPED, K.MODE_CHANGED, K.UNKNOWN_CHUNK,
                                        K.TAG_TRAPPED, K.MODE_CHANGED]


def test_global_tags_are_trapped_and_change_nothing_under_the_papers_rules():
    s, events = run("<local> <global> </global> <GLOBAL/>", "paper")
    assert s.directive == L
    assert [e.kind for e in events] == [K.TAG_TRAPPED, K.MODE_CHANGED] + [K.TAG_TRAPPED] * 3
    assert all(e.directive == L and "no transition" in e.detail for e in events[2:])
    # A lone </global> closes nothing under the stack, and is structure under the paper's rules.
    assert [e.kind for e in run("</global>", "reference")[1]] == [K.MALFORMED_TAG]
    assert [e.kind for e in run("</global>", "paper")[1]] == [K.TAG_TRAPPED]


def test_an_unmatched_closing_tag_is_reported_under_both():
    for rules in ("reference", "paper"):
        s, events = run("<local> </focus>", rules)
        assert s.directive == L and events[-1].kind is K.MALFORMED_TAG
        assert events[-1].detail.startswith("</focus> closes no open <focus>")
    assert run("<local> </focus>", "paper")[1][-1].detail.endswith("(the mode is local): ignored")


def test_stack_says_what_a_closing_tag_can_close():
    s = TagStream(n_chunks=8, rules="paper")
    s.feed("<focus 1> <local>")
    assert s.stack == ("local",)            # one mode, no scopes
    s.feed("</local>")
    assert s.stack == ()
    r = TagStream(n_chunks=8)
    r.feed("<focus 1> <local>")
    assert r.stack == ("focus", "local")


def test_the_paper_has_no_scope_depth():
    from da_lab.core.tags import MAX_DEPTH

    text = "<focus 1>" + "<local>" * (MAX_DEPTH + 5) + "</local>"
    assert run(text, "paper")[0].directive == G
    assert run(text, "reference")[0].directive == L


def test_fork_is_independent():
    s = TagStream(n_chunks=8, rules="paper")
    s.feed("<focus 2> <loc")
    twin = s.fork()
    assert twin.feed("al>")[-1].directive == L and twin.stack == ("local",)
    assert s.directive == F(2) and s.buffer == "<loc"
    r = TagStream(n_chunks=8)
    r.feed("<focus 2>")
    r.fork().feed("</focus>")
    assert r.stack == ("focus",)


def test_unknown_rules_are_refused():
    with pytest.raises(ValueError, match="rules must be one of reference, paper"):
        TagStream(rules="html")
    with pytest.raises(ValueError, match="rules must be one of"):
        Layout.from_spans(16, [(4, 10)], 20, rules="stack")


def test_rules_travel_with_the_layout():
    from da_lab.core.wire import layout_to_wire, parse_layout

    lay = Layout.from_spans(16, [(4, 10), (12, 30)], 40, rules="paper")
    assert lay.to_dict()["rules"] == "paper"
    assert parse_layout(layout_to_wire(lay)) == lay == Layout.from_dict(lay.to_dict())
    assert lay.at_block_size(8).rules == "paper"
    plain = Layout.from_spans(16, [(4, 10)], 20)
    assert "rules" not in plain.to_dict() and plain.rules == "reference"   # old wire unchanged
    card = Layout(16, 1, (1, 1), 60, rules="paper")
    assert parse_layout(layout_to_wire(card)).rules == "paper"
    for bad in ('"html"', "1", "null", '["paper"]'):
        with pytest.raises(ValueError, match="da_layout.rules must be one of"):
            parse_layout('{"block_size":16,"chunk_spans":[[4,10]],"prompt_len":20,"rules":'
                         + bad + "}")


# --- the paper's machine against an oracle, over any stream ----------------------------------

def oracle(tags: list[str], n_chunks: int) -> list[Directive]:
    """The paper's §2.3 in ten lines: the directive after each complete tag."""
    d, out = G, []
    for t in tags:
        p = parse_tag(t, n_chunks)
        if isinstance(p, Closing) and p.mode is not Mode.GLOBAL and p.mode is d.mode:
            d = G
        elif isinstance(p, Directive) and p.mode is not Mode.GLOBAL:
            d = p
        out.append(d)
    return out


TAGS = st.sampled_from([
    "<global>", "</global>", "<local>", "</local>", "<local 2>", "<focus 1>", "<focus 2, 3>",
    '<focus magic_chunks="9">', "</focus>", "<focus>", "</ focus>", "<focus\r3>", "</local\f>",
    "<answer>", "</answer>", "<focus\n2>", "</focus x>", "<Local/>", "<GLOBAL>"])
TEXT = st.sampled_from(["x", " ", "\n", "a < b", "<", ">", "plan: "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TAGS, TEXT), max_size=20), st.lists(st.integers(0, 400), max_size=8))
def test_the_papers_rules_equal_the_oracle_at_every_tag(parts, cuts):
    text = "".join(parts)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    paper, ref = TagStream(n_chunks=5, rules="paper"), TagStream(n_chunks=5)
    pe = [e for a, b in zip(bounds, bounds[1:], strict=False) for e in paper.feed(text[a:b])]
    re_ = ref.feed(text)
    # Both rule sets find the same complete tags at the same offsets; only what they do differs.
    complete = [(e.offset, e.text) for e in re_ if e.text.endswith(">")
                and e.kind is not K.MODE_CHANGED]
    assert complete == [(e.offset, e.text) for e in pe if e.text.endswith(">")
                        and e.kind is not K.MODE_CHANGED]
    expect = oracle([t for _, t in complete], 5)
    # The directive after each complete tag is the oracle's.
    d, got = G, []
    for e in pe:
        if e.kind is K.MODE_CHANGED:
            d = e.directive
            got[-1] = d
        elif e.text.endswith(">"):
            got.append(d)
    assert got == expect
    assert paper.directive == (expect[-1] if expect else G)
