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
