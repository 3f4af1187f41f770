"""da_lab against the paper's reference implementation (`declarative-attention` 0.0.8, Ho et al.
2026, arXiv 2609.02737): the same streams, split into tokens at random, through both.

Where the two protocols overlap, every step must agree: the kept blocks and the attention
seq_len equal `DeclarativeVLLMHook`'s, and the full-sequence token mask equals
`derive_declarative_mask`'s (shifted by the one token the reference's two functions disagree
on: see test_derive_mask_applies_a_tag_one_token_later). Where they differ by design, a test
below pins each difference; docs/protocol.md says why.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from declarative_attention import DeclarativeAttention, DeclarativeVLLMHook, derive_declarative_mask

from da_lab.core.layout import Layout
from da_lab.core.mask import kept_blocks, visible_tokens
from da_lab.core.tags import Directive, Mode, TagStream

N_CASES = 1000          # cases of BATCH streams each: 10,000 streams
BATCH = 10
N_DERIVED = 2000        # of which the first this many are also replayed as one training mask


def _spans(rng, bs: int) -> tuple[list[tuple[int, int]], int]:
    """Random unpadded chunk spans (adjacent ones included) and a prompt length."""
    pos = int(rng.integers(0, 3 * bs + 2))           # the system prompt (may be empty)
    spans = []
    for _ in range(int(rng.integers(1, 9))):
        pos += int(rng.integers(0, bs + 1)) if spans else 0   # a gap, often none
        n = int(rng.integers(1, 3 * bs + 2))
        spans.append((pos, pos + n))
        pos += n
    return spans, pos + int(rng.integers(1, 2 * bs + 2))     # + question and instructions


def _ids(rng, n: int) -> list[int]:
    return sorted({int(c) for c in rng.integers(1, n + 1, size=int(rng.integers(1, 4)))})


def _tag(rng, n: int) -> str:
    """One tag both protocols read alike: the paper's forms and the card's bare C-ids."""
    ids = _ids(rng, n)
    forms = [
        "<global>", "<local>", "</focus>", "</local>", "</global>", "<answer>", "</answer>",
        f'<focus magic_chunks="{",".join(map(str, ids))}">',
        f"<focus {', '.join(map(str, ids))}>",
        f"<focus {','.join(f'C{c}' for c in ids)}>",
        f"<focus chunk='{ids[0]}'>", f"<FOCUS ids={ids[0]}>", "<Local/>",
        f'<focus magic_chunks="{ids[0]}" why="a fact">',
    ]
    return forms[int(rng.integers(len(forms)))]


TEXT = ["The", " answer", " is", " 42", ".", " a < b", " 3<4", "\n", " x > y", " plan:",
        " Paris", ",", " so"]


def _stream(rng, n: int) -> list[str]:
    """A response in both dialects, cut into tokens at random (tags split across tokens)."""
    parts = []
    for _ in range(int(rng.integers(1, 16))):
        parts.append(_tag(rng, n) if rng.random() < 0.45 else TEXT[int(rng.integers(len(TEXT)))])
    text = "".join(parts)
    cuts = sorted({int(c) for c in rng.integers(1, len(text), size=len(text) // 3 + 1)}
                  if len(text) > 1 else set())
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


def _case(seed: int):
    rng = np.random.default_rng(seed)
    bs = int(rng.integers(1, 33))
    reqs = []
    for _ in range(BATCH):
        spans, prompt_len = _spans(rng, bs)
        reqs.append((spans, prompt_len, _stream(rng, len(spans))))
    return bs, reqs


def _hook_rows(hook, bs, reqs, step, n_max):
    """One decode step through DeclarativeVLLMHook for the batch's live requests:
    {request: (kept logical blocks, attention seq_len)}."""
    live = [r for r, (_, plen, toks) in enumerate(reqs) if step < len(toks)]
    seq = [reqs[r][1] + step + 1 for r in live]
    # Physical ids 1.. so that the hook's zero padding is told apart from block 0.
    tables = torch.zeros((len(live), n_max), dtype=torch.long)
    for row, s in enumerate(seq):
        nb = -(-s // bs)
        tables[row, :nb] = torch.arange(1, nb + 1)
    new_tables, new_seq = hook(tables, torch.tensor(seq), [str(r) for r in live])
    out = {}
    for row, r in enumerate(live):
        ids = new_tables[row]
        out[r] = ((ids[ids > 0] - 1).tolist(), int(new_seq[row]))
    return out


@pytest.mark.parametrize("chunk", range(10))
def test_kept_blocks_and_seq_len_equal_the_reference_hook(chunk):
    """10,000 streams (10 slices of 1,000), block sizes 1-32, both dialects where they meet."""
    disagreements = []
    for seed in range(chunk * N_CASES // 10, (chunk + 1) * N_CASES // 10):
        bs, reqs = _case(seed)
        hook = DeclarativeVLLMHook(block_size=bs)
        ours = []
        for r, (spans, plen, _) in enumerate(reqs):
            hook.register(str(r), {i + 1: s for i, s in enumerate(spans)})
            ours.append((Layout.from_spans(bs, spans, plen), TagStream(n_chunks=len(spans))))
        n_max = max(-(-(plen + len(toks)) // bs) for _, plen, toks in reqs)
        for step in range(max(len(t) for *_, t in reqs)):
            for r, (_, _, toks) in enumerate(reqs):
                if step < len(toks):
                    hook.step(str(r), toks[step])
                    ours[r][1].feed(toks[step])
            for r, (kept_ref, seq_ref) in _hook_rows(hook, bs, reqs, step, n_max).items():
                layout, stream = ours[r]
                seq_len = layout.prompt_len + step + 1
                kept = kept_blocks(stream.directive, layout, seq_len, 1)
                attn = seq_len - (-(-seq_len // bs) - len(kept)) * bs
                if kept.tolist() != kept_ref or attn != seq_ref:
                    disagreements.append((seed, r, step, kept.tolist(), kept_ref, attn, seq_ref))
    assert not disagreements, disagreements[:3]


def test_derive_mask_equals_ours_shifted_by_one_token():
    """2,000 streams replayed whole: our per-position token mask (before rounding) equals the
    reference's training mask one row later, and rows up to the first response token are
    causal and full in both."""
    vocab: dict[str, int] = {"": 0}
    bad = []
    for seed in range(N_DERIVED // BATCH):
        bs, reqs = _case(10**6 + seed)
        for spans, plen, toks in reqs:
            ids = [0] * plen + [vocab.setdefault(t, len(vocab)) for t in toks]
            decode = {v: k for k, v in vocab.items()}.__getitem__
            ref = derive_declarative_mask(torch.tensor(ids), {i + 1: s for i, s in
                                                             enumerate(spans)},
                                          prompt_len=plen, tokenizer_decode=decode).numpy()
            layout, stream, n = Layout.from_spans(bs, spans, plen), TagStream(len(spans)), len(ids)
            causal = np.tril(np.ones((n, n), dtype=bool))
            assert (ref[: plen + 1] == causal[: plen + 1]).all()
            for i, tok in enumerate(toks):
                stream.feed(tok)
                pos = plen + i          # the query whose step fed `tok`
                if pos + 1 < n:
                    row = visible_tokens(stream.directive, layout, pos + 1)
                    if not (ref[pos + 1, : pos + 1] == row).all():
                        bad.append((seed, pos))
                # Rounding outward: a block is kept iff any of its tokens is visible.
                vis = visible_tokens(stream.directive, layout, pos + 1)
                padded = np.zeros(-(-(pos + 1) // bs) * bs, dtype=bool)
                padded[: pos + 1] = vis
                expect = np.flatnonzero(padded.reshape(-1, bs).any(axis=1))
                assert kept_blocks(stream.directive, layout, pos + 1, 1).tolist() == \
                    expect.tolist()
    assert not bad, bad[:3]


# --- differences by design, pinned ------------------------------------------------------------

SPANS = {1: (4, 10), 2: (10, 20), 3: (24, 30)}


def _both(text: str):
    ref = DeclarativeAttention(SPANS)
    ref.step(text)
    ours = TagStream(n_chunks=3)
    events = ours.feed(text)
    return ref, ours, [e.kind.value for e in events]


def test_derive_mask_applies_a_tag_one_token_later():
    """derive_declarative_mask (training) masks from the token after '>'; the reference's own
    DeclarativeVLLMHook, like da_lab, from the step that feeds '>' (that token's query)."""
    toks = ["<local", ">", "x", "y"]
    vocab = {t: i + 1 for i, t in enumerate(toks)}
    ids = [0] * 32 + [vocab[t] for t in toks]
    decode = {0: "", **{v: k for k, v in vocab.items()}}.__getitem__
    ref = derive_declarative_mask(torch.tensor(ids), SPANS, prompt_len=32,
                                  tokenizer_decode=decode).numpy()
    # The '>' is position 33: its row still sees C1, the next row does not.
    assert ref[33, 5] and not ref[34, 5]
    hook = DeclarativeVLLMHook(block_size=1)
    hook.register("r", SPANS)
    for t in toks[:2]:
        hook.step("r", t)
    table, seq = hook(torch.arange(1, 35), 34, "r")     # the step whose query is the '>'
    assert 5 + 1 not in table.tolist() and seq == 34 - 22      # C1..C3: 22 tokens hidden


def test_local_n_is_the_cards_alone():
    ref, ours, _ = _both("<local 2>")
    assert ref.mode == "local" and ours.directive == Directive(Mode.LOCAL, recent=2)


def test_ranges_are_the_cards_alone():
    ref, ours, _ = _both("<focus C1-C3>")
    assert ref.active_chunks == {1, 3}
    assert ours.directive == Directive(Mode.FOCUS, chunks=(1, 2, 3))


@pytest.mark.parametrize("text, ref_chunks, kind", [
    ("<focus>", set(), "malformed_tag"),                           # reference: local
    ('<focus magic_chunks="9">', set(), "unknown_chunk"),         # reference: local
    ("<focus 2, 9>", {2}, "unknown_chunk"),                        # reference drops 9
    ("<focus\n2>", {2}, "malformed_tag"),                          # HTML allows the newline
    ('<focus reason="x">', set(), "malformed_tag"),
    ("<focus C0>", set(), "malformed_tag"),
])
def test_refused_tags_change_nothing_here(text, ref_chunks, kind):
    """A tag da_lab refuses leaves the directive as it was and says why; the reference reads
    what it can (an empty focus is local to it)."""
    ref, ours, kinds = _both(text)
    assert ref.active_chunks == ref_chunks
    assert ours.directive == Directive()
    assert kinds == [kind]


# F10 (issue 57): blanks and whitespace in and around a tag's keyword. HTML's blanks are space,
# tab, CR, FF and the newline; the reference (Python's html.parser) also reads any Unicode
# whitespace in a closing tag. The lab follows it for CR and FF (and a blank after '</'), and
# reports the rest as a malformed tag: text here, never silently.
F2 = Directive(Mode.FOCUS, chunks=(2,))
FOLLOWED = [
    ("<focus\r2>", F2),
    ("<focus\f2>", F2),
    ("<local\r>", Directive(Mode.LOCAL)),
    ("<focus 2></focus\r>", Directive()),
    ("<focus 2></ focus>", Directive()),
    ("<focus 2></\tfocus\f>", Directive()),
    ('<focus\fmagic_chunks\r=\r"2"\r/>', F2),
]


@pytest.mark.parametrize("text, directive", FOLLOWED)
def test_cr_ff_and_a_blank_after_the_slash_are_blanks_as_in_the_reference(text, directive):
    ref, ours, kinds = _both(text)
    assert ours.directive == directive
    assert ref.active_chunks == ({1, 2, 3} if directive.mode is Mode.GLOBAL else
                                 set(directive.chunks))
    assert "malformed_tag" not in kinds and kinds[-1] in ("tag_trapped", "mode_changed")


REPORTED = [
    # (text, the reference's chunks, the lab's event detail): the lab keeps the mode.
    ("<focus\n2>", {2}, "newline inside tag"),
    ("<local\n>", set(), "newline inside tag"),
    ("<focus 2></\nfocus>", {1, 2, 3}, "newline inside tag"),
    ("<focus 2></focus\n>", {1, 2, 3}, "newline inside tag"),
    ("<focus 2></focus\v>", {1, 2, 3}, "'\\x0b' inside tag"),
    ("<focus 2></focus\xa0>", {1, 2, 3}, "'\\xa0' inside tag"),
    ("<focus 2></focus\x00>", {1, 2, 3}, "'\\x00' inside tag"),
    ("<focus 2></\u2028focus>", {1, 2, 3}, "'\\u2028' inside tag"),
    ("<focus\v2>", {1, 2, 3}, "'\\x0b' inside tag"),      # text to the reference too
    ("<local\u3000>", {1, 2, 3}, "'\\u3000' inside tag"),  # text to the reference too
]


@pytest.mark.parametrize("text, ref_chunks, detail", REPORTED)
def test_other_whitespace_in_a_tag_is_reported_and_read_as_text(text, ref_chunks, detail):
    ref, ours, kinds = _both(text)
    assert ref.active_chunks == ref_chunks
    start = F2 if text.startswith("<focus 2>") else Directive()
    assert ours.directive == start
    ev = TagStream(n_chunks=3).feed(text)[-1]
    assert ev.kind.value == "malformed_tag" and ev.detail.startswith(detail)


def test_html_only_readings():
    """The reference reads HTML: a comment hides a tag, and 'a<b' opens a tag that swallows
    the next one. da_lab reads DA tags only."""
    ref, ours, _ = _both("<!-- <local> -->")
    assert ref.mode == "global" and ours.mode is Mode.LOCAL
    ref, ours, _ = _both("if a<b then <local> now")
    assert ref.mode == "global" and ours.mode is Mode.LOCAL


def test_scope_depth():
    from da_lab.core.tags import MAX_DEPTH

    text = "<focus 1>" + "<local>" * MAX_DEPTH + "</focus>"
    ref, ours, _ = _both(text)
    assert ref.mode == "global"                   # unbounded: back to before <focus 1>
    assert ours.mode is Mode.LOCAL                # the <focus 1> scope was the oldest, dropped


def test_overlapping_spans_are_refused():
    with pytest.raises(ValueError, match="overlaps"):
        Layout.from_spans(4, [(0, 10), (8, 12)], 20)


# --- the paper's prompt ------------------------------------------------------------------------

WORDS = ["Acme", "Corp", "was", "founded", "in", "2003", "Seattle.", "The", "meeting", "held",
         "Chicago;", "then,", "it", "moved!", "Why?", "\n", "\n\n", "\n\n\n", "  ", "x" * 40]


def _text(rng, n_words: int) -> str:
    return " ".join(WORDS[int(i)] for i in rng.integers(len(WORDS), size=n_words))


@pytest.fixture(scope="module")
def encode():
    from pathlib import Path

    from tokenizers import Tokenizer

    import da_lab

    tok = Tokenizer.from_file(str(Path(da_lab.__file__).parent / "assets" / "tokenizer.json"))
    return lambda s: tok.encode(s, add_special_tokens=False).ids


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_segments_and_prompt_equal_the_reference(encode, with_tokenizer):
    from declarative_attention import format_declarative_prompt, segment_context

    from da_lab.core import paper

    enc = encode if with_tokenizer else None
    rng = np.random.default_rng(7)
    for _ in range(150):
        text = _text(rng, int(rng.integers(0, 400)))
        target, most = int(rng.integers(4, 80)), 0
        most = target + int(rng.integers(0, 40))
        assert paper.segment_context(text, enc, target, most) == \
            segment_context(text, enc, target, most)
        question = _text(rng, 6) + "?"
        docs = text if rng.random() < 0.5 else [_text(rng, 20) for _ in range(3)]
        ours = paper.format_prompt(question, docs, enc)
        ref_prompt, ref_spans = format_declarative_prompt(question, docs, tokenizer_encode=enc)
        assert ours == (ref_prompt, list(ref_spans.values()))


def test_paper_prompt_is_a_span_layout(encode):
    from da_lab.core import paper

    p = paper.paper_prompt(encode, "Where was the meeting?",
                           ["Acme Corp was founded in 2003.", "The meeting was in Chicago."],
                           block_size=16, bos_id=1)
    lay = p.layout
    assert p.token_ids[0] == 1 and lay.unaligned and lay.n_chunks == 2
    a, b = lay.chunk_spans[1]
    assert encode("The meeting was in Chicago.") == p.token_ids[a:b]
    assert Layout.from_dict(lay.to_dict()) == lay
