"""The grouped read's plan (da_lab/core/grouping.py): the union of a row's groups and its own
part is exactly its kernel row, in order, no block twice, whatever the step; the cost rule's
decision on hand cases, one of them the H200 bench's 64 readers over a 64k corpus."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from da_lab.core.grouping import Cost, Row, extend, parts, plan, read_counts

BS = 16
SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def steps(draw):
    """One step: a corpus of physical blocks held once; each row keeps a subset of it (logical
    order) and has own blocks after it (question, reply), or ends inside the corpus (a prefill
    row reading up to its end); some rows prefill, some are not eligible."""
    corpus = draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=24, unique=True))
    n_rows = draw(st.integers(1, 8))
    rows, next_own = [], 20_000
    for i in range(n_rows):
        kept = [b for b in corpus if draw(st.booleans())]
        n_own = draw(st.integers(0 if kept else 1, 4))
        own = list(range(next_own, next_own + n_own))
        next_own += n_own
        blocks = kept + own
        last = draw(st.integers(1, BS))
        rows.append(Row(row=i * 3 + 1, blocks=tuple(blocks),
                        seq_len=(len(blocks) - 1) * BS + last,
                        query_len=draw(st.sampled_from((1, 1, 1, 5))),
                        eligible=draw(st.sampled_from((True, True, False)))))
    return rows


@SETTINGS
@given(steps(), st.sampled_from([Cost(), Cost(partial_bytes=0.6), Cost(margin=0.0)]))
def test_a_rows_groups_and_own_part_are_exactly_its_kernel_row(rows, cost):
    p = plan(rows, BS, cost)
    last = {r.blocks[-1] for r in rows}
    for r in rows:
        got = parts(p, r)
        assert [b for b, _ in got] == list(r.blocks)          # in order, each block once
        part = p.part(r.row)
        assert len(part.own) and part.own[-1] == r.blocks[-1]  # the query's block stays its own
        grouped = len(r.blocks) - len(part.own)
        assert part.own_tokens + grouped * BS == r.seq_len and part.own_tokens > 0
        if not r.eligible or r.query_len != 1:
            assert part.groups == () and part.own.tolist() == list(r.blocks)
    seen = set()
    for gi, g in enumerate(p.groups):
        gb = set(g.blocks.tolist())
        assert len(g.rows) >= 2 and not (gb & seen) and not (gb & last)
        seen |= gb
        for row in g.rows:
            r = next(x for x in rows if x.row == row)
            assert r.eligible and r.query_len == 1 and gb <= set(r.blocks)
            assert gi in p.part(row).groups
    assert p.union_blocks <= p.grouped_blocks <= p.plain_blocks
    plain, grouped = read_counts(p, rows)
    assert sum(plain.values()) == p.plain_blocks and sum(grouped.values()) == p.grouped_blocks
    assert set(plain) == set(grouped) and all(grouped[b] <= plain[b] for b in plain)


@SETTINGS
@given(steps())
def test_every_block_two_eligible_decode_rows_read_is_read_once(rows):
    """With free partials every shared block is grouped: read once, not once per row."""
    p = plan(rows, BS, Cost())
    _, grouped = read_counts(p, rows)
    decode = [r for r in rows if r.eligible and r.query_len == 1]
    last = {r.blocks[-1] for r in rows}
    for b in {b for r in decode for b in r.blocks}:
        readers = [r for r in decode if b in r.blocks]
        others = [r for r in rows if b in r.blocks and r not in decode]
        if len(readers) >= 2 and b not in last:
            assert grouped[b] == 1 + len(others), b


def heads(n_rows: int, shared: int, own: int, last: int = 5) -> list[Row]:
    """n rows over one `shared`-block prefix, each with `own` blocks of its own."""
    return [Row(i, tuple(range(shared)) + tuple(range(1000 + 10 * i, 1000 + 10 * i + own)),
                (shared + own - 1) * BS + last) for i in range(n_rows)]


def test_rule_groups_a_long_shared_prefix():
    p = plan(heads(4, 10, 2), BS)
    assert (p.plain_blocks, p.grouped_blocks, p.union_blocks) == (48, 18, 18)
    assert p.grouped and len(p.groups) == 1 and p.groups[0].rows == (0, 1, 2, 3)
    assert p.partials == 4


def test_rule_refuses_a_small_win_inside_the_margin():
    p = plan(heads(2, 1, 5), BS)            # 12 blocks plain, 11 grouped: 0.917 > 0.90
    assert (p.plain_blocks, p.grouped_blocks) == (12, 11) and not p.grouped
    assert "0.917" in p.reason
    assert plan(heads(2, 1, 5), BS, Cost(margin=0.0)).grouped


def test_a_group_whose_partials_cost_more_than_it_saves_is_dropped():
    # Two rows sharing one block save one block read and pay two partials.
    p = plan(heads(2, 1, 2), BS, Cost(block_bytes=1.0, partial_bytes=1.0, margin=0.0))
    assert p.groups == () and not p.grouped and "no block" in p.reason
    assert all(part.own.tolist() == list(r.blocks)
               for part, r in zip(p.rows, heads(2, 1, 2), strict=True))
    # Eight rows over the same block save seven reads for eight partials' cost of 0.5 each.
    assert plan(heads(8, 1, 2), BS, Cost(partial_bytes=0.5, margin=0.0)).groups


def test_the_fixed_cost_can_outweigh_the_saving():
    assert plan(heads(4, 10, 2), BS, Cost(fixed_bytes=10.0)).grouped          # 28 <= 43.2
    assert not plan(heads(4, 10, 2), BS, Cost(fixed_bytes=30.0)).grouped      # 48 > 43.2


def test_prefill_rows_and_rows_outside_the_flag_are_not_grouped():
    rows = heads(3, 6, 1)
    rows[1] = Row(1, rows[1].blocks, rows[1].seq_len, query_len=40)
    rows[2] = Row(2, rows[2].blocks, rows[2].seq_len, eligible=False)
    p = plan(rows, BS)
    assert p.groups == () and not p.grouped
    rows.append(Row(7, tuple(range(6)) + (4000,), 6 * BS + 1))
    p = plan(rows, BS)
    assert [g.rows for g in p.groups] == [(0, 7)] and p.grouped


def test_the_grouping_follows_the_reader_sets():
    """Head read by all, each chunk by the rows that keep it: one group per reader set."""
    a, b, c = tuple(range(1, 5)), tuple(range(5, 9)), tuple(range(9, 13))
    rows = [Row(0, (0,) + a + b + (100,), 9 * BS + 1), Row(1, (0,) + a + c + (101,), 9 * BS + 1),
            Row(2, (0,) + b + c + (102,), 9 * BS + 1), Row(3, (0,) + a + b + (103,), 9 * BS + 1)]
    p = plan(rows, BS)
    assert {g.rows: tuple(g.blocks.tolist()) for g in p.groups} == {
        (0, 1, 2, 3): (0,), (0, 1, 3): a, (0, 2, 3): b, (1, 2): c}
    assert p.part(0).groups == (0, 1, 2) and p.part(0).own.tolist() == [100]
    assert p.grouped_blocks == p.union_blocks == 17 and p.plain_blocks == 40


def test_bad_rows_are_refused_with_a_reason():
    import pytest

    for rows, what in [([Row(0, (1, 1), 20)], "once"), ([Row(0, (1, 2), 40)], "don't fill"),
                       ([Row(0, (1,), 5), Row(0, (2,), 5)], "twice"),
                       ([Row(0, (), 0)], "empty")]:
        with pytest.raises(ValueError, match=what):
            plan(rows, BS)


def test_the_h200_bench_shape_reads_near_the_union_of_kept_blocks():
    """`da-lab bench --shared 64` at 64 x 64k (block 16, 8B shapes): FOCUS rows keep the head
    and their own pair of 16 chunks. The plan reads within 1.2x the union of kept blocks (the
    issue's goal) and the rule groups it; plain reads ~7x more."""
    from da_lab.bench.shared import focus_pairs, shared_layout

    lay = shared_layout(65536, BS, 64)
    starts = [1 + sum(lay.chunk_blocks[:i]) for i in range(lay.n_chunks)]
    rows, own0 = [], 10 ** 6
    for i, (ca, cb) in enumerate(focus_pairs()[:64]):
        kept = [0] + [s for c in (ca, cb)
                      for s in range(starts[c - 1], starts[c - 1] + lay.chunk_blocks[c - 1])]
        own = list(range(own0 + 8 * i, own0 + 8 * i + 7))     # 64-token question + ~40 tokens
        rows.append(Row(i, tuple(kept + own), (len(kept) + 6) * BS + 8))
    cost = Cost.for_model(block_size=BS, kv_heads=8, q_heads=32, head_dim=128, kv_elt=2,
                          out_elt=2, launches=16, launch_us=3.0, bytes_per_us=4.8e6)
    assert cost.block_bytes == 65536
    p = plan(rows, BS, cost)
    assert p.grouped, p.reason
    assert p.grouped_blocks <= 1.2 * p.union_blocks
    assert p.plain_blocks >= 6 * p.grouped_blocks
    # the head block in one group of all 64; every chunk in one group of its readers
    assert any(g.blocks.tolist() == [0] and len(g.rows) == 64 for g in p.groups)


@SETTINGS
@given(steps(), st.lists(st.integers(0, 2), min_size=8, max_size=8), st.integers(1, BS))
def test_extend_equals_a_fresh_plan_when_only_tails_grew(rows, grow, last):
    """A decode step later each row may have fresh blocks at its end: extend() of the old plan
    reads exactly what plan() of the new rows reads."""
    p = plan(rows, BS)
    fresh = iter(range(50_000, 60_000))
    new = []
    for r, k in zip(rows, grow, strict=False):
        tail = tuple(next(fresh) for _ in range(k))
        seq = r.seq_len if not k else (len(r.blocks) + k - 1) * BS + last
        new.append(Row(r.row, tuple(r.blocks) + tail, seq, r.query_len, r.eligible))
    e, f = extend(p, new), plan(new, BS)
    if p.last_shared:             # a last block read by two rows (never in vLLM): re-planned
        assert e is None
        return
    assert e is not None
    assert [g.rows for g in e.groups] == [g.rows for g in f.groups]
    for a, b in zip(e.rows, f.rows, strict=True):
        assert a.own.tolist() == b.own.tolist() and a.groups == b.groups
        assert (a.own_tokens, a.seq_len) == (b.own_tokens, b.seq_len)
    assert (e.plain_blocks, e.grouped_blocks, e.partials, e.grouped) == \
        (f.plain_blocks, f.grouped_blocks, f.partials, f.grouped)


def test_extend_refuses_a_changed_step():
    rows = heads(3, 4, 1)
    p = plan(rows, BS)
    assert extend(p, rows[:2]) is None                                   # a row left
    assert extend(p, [Row(0, (0, 1, 2, 9, 1000), 4 * BS + 5), *rows[1:]]) is None   # kept changed
    assert extend(p, [Row(0, rows[0].blocks, rows[0].seq_len, query_len=3), *rows[1:]]) is None
    assert extend(p, [Row(0, rows[0].blocks, rows[0].seq_len, eligible=False), *rows[1:]]) is None
    assert extend(p, [Row(0, tuple(rows[0].blocks) + (2,), 5 * BS + 1), *rows[1:]]) is None
    assert np.array_equal(extend(p, rows).part(0).own, p.part(0).own)
