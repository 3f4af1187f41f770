"""Layout geometry and the pure DA decision, without vLLM."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.layout import Layout, build_prompt, seed_texts
from da_lab.core.mask import kept_blocks
from da_lab.core.tags import Directive, Mode

SEED = Layout(block_size=32, head_blocks=1, chunk_blocks=(2,) * 12, prompt_len=813)


def test_seed_layout_geometry():
    assert SEED.n_chunks == 12
    assert SEED.tail_start == 25
    assert SEED.response_start == 25          # the tail's last block is shared with the response
    assert list(SEED.chunk_range(1)) == [1, 2]
    assert list(SEED.chunk_range(3)) == [5, 6]
    assert list(SEED.chunk_range(12)) == [23, 24]
    names = [r.name for r in SEED.regions()]
    assert names == ["scaffold"] + [f"C{i}" for i in range(1, 13)] + ["tail", "response"]
    assert SEED.region_of(0) == "scaffold" and SEED.region_of(6) == "C3"
    assert SEED.region_of(25) == "tail" and SEED.region_of(26) == "response"
    with pytest.raises(KeyError, match="unknown chunk C13"):
        SEED.chunk_range(13)
    assert Layout.from_dict(SEED.to_dict()) == SEED


def test_layout_rejects_bad_geometry():
    with pytest.raises(ValueError):
        Layout(32, 1, (2, 0), 200)
    with pytest.raises(ValueError, match="tail"):
        Layout(32, 1, (2,), 96)               # no tail after the chunks
    with pytest.raises(ValueError, match="not a DA layout"):
        Layout.from_dict({"block_size": 32})


def test_build_prompt_pads_sections_to_whole_blocks():
    encode = lambda s: [ord(c) % 200 + 10 for c in s]   # noqa: E731 - a 1 char = 1 token codec
    head, chunks, tail = "h" * 40, ["a" * 10, "b" * 64, "c" * 33], "question?"
    p = build_prompt(encode, head, chunks, tail, filler_id=1, bos_id=2, block_size=32)
    assert p.layout.head_blocks == 2 and p.layout.chunk_blocks == (1, 2, 2)
    assert p.token_ids[0] == 2 and len(p.token_ids) == p.layout.prompt_len == 7 * 32 + 9
    assert p.token_ids[32 * 3: 32 * 3 + 64] == encode("b" * 64)
    with pytest.raises(ValueError, match="chunk C2 is 64 tokens"):
        build_prompt(encode, head, chunks, tail, filler_id=1, chunk_blocks=1)
    with pytest.raises(ValueError, match="tail"):
        build_prompt(encode, head, chunks, "", filler_id=1)


def test_seed_texts_shape():
    head, chunks, tail = seed_texts()
    assert len(chunks) == 12 and "key 31" in tail and "key 31" in chunks[2]


def test_decision_per_mode_on_seed_layout():
    seq = 813 + 40                             # 27 blocks: response spills into block 26
    g = kept_blocks(Directive(), SEED, seq, 1)
    assert g.tolist() == list(range(27))
    f = kept_blocks(Directive(Mode.FOCUS, (3, 7)), SEED, seq, 1)
    assert f.tolist() == [0, 5, 6, 13, 14, 25, 26]
    loc = kept_blocks(Directive(Mode.LOCAL), SEED, seq, 1)
    assert loc.tolist() == [0, 25, 26]
    l1 = kept_blocks(Directive(Mode.LOCAL, recent=1), SEED, 813 + 150, 1)   # 31 blocks
    assert l1.tolist() == [0, 25, 30]
    assert f.dtype == np.int32


def test_query_blocks_always_kept():
    # A 100-token query chunk reaching back into C12's blocks keeps them even under LOCAL.
    k = kept_blocks(Directive(Mode.LOCAL), SEED, 813, 100)
    assert {22, 23, 24, 25} <= set(k.tolist())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([Mode.GLOBAL, Mode.FOCUS, Mode.LOCAL]),
       st.sets(st.integers(1, 12), min_size=1, max_size=12),
       st.one_of(st.none(), st.integers(1, 40)), st.integers(813, 2016), st.integers(1, 813))
def test_decision_invariants(mode, chunks, recent, seq_len, query_len):
    d = Directive(mode, tuple(sorted(chunks)) if mode is Mode.FOCUS else (),
                  recent if mode is Mode.LOCAL else None)
    k = kept_blocks(d, SEED, seq_len, query_len)
    n_blocks = -(-seq_len // 32)
    ks = set(k.tolist())
    assert list(k) == sorted(ks) and ks <= set(range(n_blocks))
    assert 0 in ks and 25 in ks                               # the scaffold head and the tail
    assert set(range((seq_len - query_len) // 32, n_blocks)) <= ks    # the queries' blocks
    if mode is Mode.GLOBAL:
        assert len(ks) == n_blocks
    if mode is Mode.FOCUS:
        for c in chunks:
            assert set(SEED.chunk_range(c)) <= ks
        assert set(range(25, n_blocks)) <= ks                # the whole response
    if mode is Mode.LOCAL and recent is not None:
        resp_kept = ks & set(range(26, n_blocks - 1))
        q_first = (seq_len - query_len) // 32
        assert all(b >= n_blocks - recent or b >= q_first for b in resp_kept)
    hidden = set(range(n_blocks)) - ks
    assert n_blocks - 1 not in hidden                          # hidden blocks are always full


def _tokens(blocks, bs: int, seq_len: int) -> set[int]:
    return {t for b in blocks.tolist() for t in range(b * bs, min((b + 1) * bs, seq_len))}


PAPER = Layout.from_spans(32, [(40, 175), (190, 321), (333, 470), (489, 600)], 652)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([Mode.GLOBAL, Mode.FOCUS, Mode.LOCAL]),
       st.sets(st.integers(1, 4), min_size=1, max_size=4), st.integers(652, 900),
       st.sampled_from([16, 8, 1]))
def test_a_smaller_block_reads_a_subset_of_the_same_tokens(mode, chunks, seq_len, bs):
    d = Directive(mode, tuple(sorted(chunks)) if mode is Mode.FOCUS else ())
    # The card's whole-block chunks: the very same tokens at any size that divides 32.
    card = SEED.at_block_size(bs)
    assert card.chunk_spans == SEED.chunk_spans and card.prompt_len == SEED.prompt_len
    seq = seq_len + 200
    assert (_tokens(kept_blocks(d, card, seq, 1), bs, seq)
            == _tokens(kept_blocks(d, SEED, seq, 1), 32, seq))
    # The paper's unpadded spans: rounded out less, never a token more; the named chunks, the
    # text between chunks and the response are read at every size.
    small = PAPER.at_block_size(bs)
    assert small.spans == PAPER.spans and small.block_size == bs
    t_small = _tokens(kept_blocks(d, small, seq_len, 1), bs, seq_len)
    assert t_small <= _tokens(kept_blocks(d, PAPER, seq_len, 1), 32, seq_len)
    outside = set(range(seq_len)) - {t for a, b in PAPER.spans for t in range(a, b)}
    assert outside <= t_small
    if mode is Mode.FOCUS:
        assert {t for c in chunks for t in range(*PAPER.spans[c - 1])} <= t_small
    if bs == 1 and mode is not Mode.GLOBAL:          # one token a block: exactly what is named
        named = set(chunks) if mode is Mode.FOCUS else set()
        assert t_small == outside | {t for c in named for t in range(*PAPER.spans[c - 1])}


def test_a_card_layout_refuses_a_block_size_that_splits_its_padding():
    assert SEED.at_block_size(32) is SEED
    with pytest.raises(ValueError, match="does not divide"):
        SEED.at_block_size(24)
    with pytest.raises(ValueError, match="at least 1"):
        PAPER.at_block_size(0)
