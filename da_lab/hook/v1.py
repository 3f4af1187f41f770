"""The DA hook on vLLM's v1 model runner (`v1/worker/gpu_model_runner.py`, which the CPU runner
subclasses). Everything here is a thin adapter: read the runner's state, ask the tracker, hand the
attention metadata builder a rewritten CommonAttentionMetadata.

Where it acts, and why there (see DESIGN.md §3):
  _update_states -> BlockTable.append_row (staged rows) -> _prepare_inputs -> commit_block_table
  -> compute_slot_mapping (KV *writes*: must see the full row, so we leave it alone)
  -> _build_attention_metadata -> builder.build(common_prefix_len, CommonAttentionMetadata)
                                   ^ the DA edit: compacted rows + shortened seq_lens (the *reads*)
The wrapper around `_build_attention_metadata` decides once per step; the wrapper around the
backend builder's `build` applies the decision to whatever metadata that build receives.
"""

from __future__ import annotations

import copy
import functools
import threading
import time

import numpy as np
import torch

from .state import EXTRA_LAYOUT, TRACKER

_LOCAL = threading.local()   # the decision of the step being built, per thread


class DAUnsupported(RuntimeError):
    """Raised at engine start for a model or configuration the DA hook cannot serve correctly."""


def check_specs(runner, specs: dict) -> None:
    """Refuse, before any memory is planned, what one compacted row per request can't express."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    name = runner.model_config.model
    if runner.speculative_config is not None:
        raise DAUnsupported(f"{name}: speculative decoding is not supported by the DA hook "
                            "(draft tokens would be verified against a different mask)")
    for layer, spec in specs.items():
        if type(spec) is not FullAttentionSpec:
            kind = type(spec).__name__
            reason = ("MLA" if "MLA" in kind else "sliding window" if "Sliding" in kind
                      else "not plain full attention")
            raise DAUnsupported(f"{name}: layer {layer} has a KV cache of kind {kind} "
                                f"({reason}); the DA hook serves plain full attention only")


def check_groups(runner, kv_cache_config) -> None:
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise DAUnsupported(f"{runner.model_config.model}: {len(groups)} KV-cache groups; the "
                            "DA hook needs exactly one full-attention group")


def _wrap_get_kv_cache_spec(orig):
    @functools.wraps(orig)
    def get_kv_cache_spec(self, *args, **kwargs):
        specs = orig(self, *args, **kwargs)
        check_specs(self, specs)
        return specs
    return get_kv_cache_spec


def _wrap_initialize_kv_cache(orig):
    @functools.wraps(orig)
    def initialize_kv_cache(self, kv_cache_config, *args, **kwargs):
        check_groups(self, kv_cache_config)
        out = orig(self, kv_cache_config, *args, **kwargs)
        TRACKER.runner_class = f"{type(self).__module__}.{type(self).__qualname__}"
        TRACKER.tokenizer_path = self.model_config.tokenizer
        TRACKER.device = self.device.type
        for groups in self.attn_groups:
            for g in groups:
                builder = g.get_metadata_builder()
                TRACKER.backend = g.backend.get_name()
                _patch_builder_class(type(builder))
        return out
    return initialize_kv_cache


def _decide(runner, num_reqs: int, num_scheduled_tokens: dict[str, int]):
    ib = runner.input_batch
    req_ids = ib.req_ids[:num_reqs]
    TRACKER.drop_missing(runner.requests)
    if not TRACKER.requests and not any(
            _extra(runner.requests[r]) for r in req_ids):
        TRACKER.step_index += 1
        return None
    outputs, extra = [], []
    for rid in req_ids:
        rs = runner.requests[rid]
        known = rid in TRACKER.requests
        ex = None if known else _extra(rs)
        extra.append(ex)
        outputs.append(rs.output_token_ids if (known or ex) else None)
    seq = runner.optimistic_seq_lens_cpu[:num_reqs].numpy()
    q = np.fromiter((num_scheduled_tokens[r] for r in req_ids), dtype=np.int64, count=num_reqs)
    staged = ib.block_table[0].get_numpy_array()
    return TRACKER.rewrite(req_ids, outputs, extra, staged, seq, q)


def _extra(req_state):
    sp = req_state.sampling_params
    ex = sp.extra_args if sp is not None else None
    return ex if ex and EXTRA_LAYOUT in ex else None


def _wrap_build_attention_metadata(orig):
    @functools.wraps(orig)
    def _build_attention_metadata(self, *args, **kwargs):
        nst = kwargs.get("num_scheduled_tokens")
        if nst is None:          # dummy/profile/graph-capture runs: nothing to steer
            return orig(self, *args, **kwargs)
        _LOCAL.decision = _decide(self, kwargs["num_reqs"], nst)
        try:
            return orig(self, *args, **kwargs)
        finally:
            _LOCAL.decision = None
    return _build_attention_metadata


def _apply(cm, decision):
    """A copy of `cm` whose read path sees only the kept blocks (copy-on-write: on CPU the
    'device' block table is the staging array itself, so editing in place would corrupt it)."""
    rows, kepts, new_seq = decision
    src = cm.block_table_tensor
    n = len(new_seq)
    if src.device.type == "cpu":
        # numpy copies + from_numpy: a few microseconds instead of a chain of torch ops.
        src_np = src.numpy()
        dst_np = src_np.copy()
        for i, k in zip(rows, kepts):
            dst_np[i, : len(k)] = src_np[i, k]
        bt = torch.from_numpy(dst_np)
        seq_np = cm.seq_lens.numpy().copy()
        seq_np[:n] = new_seq
        seq = torch.from_numpy(seq_np)
    else:
        bt = src.clone()
        seq = cm.seq_lens.clone()
        for i, k in zip(rows, kepts):
            bt[i, : len(k)] = src[i, torch.from_numpy(k).to(src.device, torch.long)]
        seq[:n] = torch.from_numpy(new_seq).to(seq.device, seq.dtype)
    out = copy.copy(cm)      # shallow, as vLLM itself copies it per KV-cache group
    out.block_table_tensor, out.seq_lens, out.max_seq_len = bt, seq, int(new_seq.max())
    if cm.seq_lens_cpu_upper_bound is not None:
        ub = cm.seq_lens_cpu_upper_bound.numpy().copy()
        ub[:n] = new_seq
        out.seq_lens_cpu_upper_bound = torch.from_numpy(ub)
    return out


def _note_built(cm) -> None:
    """Record what the builder actually received: the rows and seq_lens the kernel reads."""
    if not TRACKER.steps or TRACKER.steps[-1]["step"] != TRACKER.step_index - 1:
        return
    step = TRACKER.steps[-1]
    seq = cm.seq_lens.cpu().numpy()
    bt = cm.block_table_tensor
    for rec in step["requests"]:
        i = rec["row"]
        nb = -(-int(seq[i]) // rec["block_size"])
        rec["built_seq_len"] = int(seq[i])
        rec["blocks_read"] = nb
        if TRACKER.record_rows:
            rec["built_row"] = bt[i, :nb].cpu().tolist()
    if TRACKER.record_rows:
        qsl = cm.query_start_loc_cpu
        step["metadata"] = {
            "query_start_loc": qsl.tolist(), "seq_lens": seq[: cm.num_reqs].tolist(),
            "slot_mapping": cm.slot_mapping[: cm.num_actual_tokens].cpu().tolist(),
            "block_table_shape": list(bt.shape), "max_seq_len": int(cm.max_seq_len),
            "backend": TRACKER.backend, "runner": TRACKER.runner_class}


def _patch_builder_class(cls) -> None:
    if getattr(cls.build, "_da_wrapped", False):
        return
    orig = cls.build

    @functools.wraps(orig)
    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        decision = getattr(_LOCAL, "decision", None)
        t0 = time.perf_counter()
        if decision is not None:
            if common_prefix_len:
                raise DAUnsupported("cascade attention (a shared prefix across the batch) "
                                    "cannot be combined with DA masks; start the engine with "
                                    "disable_cascade_attn=True")
            common_attn_metadata = _apply(common_attn_metadata, decision)
        if TRACKER.requests:
            _note_built(common_attn_metadata)
            TRACKER.timing["apply_s"] += time.perf_counter() - t0
        return orig(self, common_prefix_len, common_attn_metadata, *args, **kwargs)

    build._da_wrapped = True
    cls.build = build


def install() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner._build_attention_metadata, "_da_wrapped", False):
        return
    for name, wrap in (("_build_attention_metadata", _wrap_build_attention_metadata),
                       ("get_kv_cache_spec", _wrap_get_kv_cache_spec),
                       ("initialize_kv_cache", _wrap_initialize_kv_cache)):
        fn = wrap(getattr(GPUModelRunner, name))
        fn._da_wrapped = True
        setattr(GPUModelRunner, name, fn)
