"""The DA hook on vLLM's v1 model runner (`v1/worker/gpu_model_runner.py`; the CPU runner
subclasses it; on GPU 0.26 it runs with VLLM_USE_V2_MODEL_RUNNER=0).

Where it acts, and why there (docs/vllm-internals.md §3):
  _update_states -> BlockTable.append_row (staged rows) -> _prepare_inputs -> commit_block_table
  -> compute_slot_mapping (KV *writes*: must see the committed row, so we leave it alone)
  -> _build_attention_metadata -> builder.build(common_prefix_len, CommonAttentionMetadata)
                                   ^ the DA edit (metadata.py): kernel rows, attention seq_lens
  -> forward -> sample_tokens -> _sample (the director overrides scripted rows' samples)
The wrapper around `_build_attention_metadata` decides once per step; the builder wrapper
applies the decision; the `_sample` wrapper forces director tokens and copies the DA rows'
sampled tokens for the tag machine (under async scheduling they land one step later).
Dummy runs (memory profiling, warm-up, CUDA-graph capture) are recognised by the `_dummy_run`
wrapper; any other call whose signature is not the one checked raises, so a changed vLLM can't
switch DA off silently.
"""

from __future__ import annotations

import functools

import numpy as np

from da_lab.core.wire import EXTRA_ID, EXTRA_LAYOUT
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.plan import Batch
from da_lab.hook.runners import live
from da_lab.hook.runners.common import (
    RunnerView,
    patch_methods,
    wrap_execute_model,
    wrap_get_kv_cache_spec,
    wrap_initialize_kv_cache,
)
from da_lab.hook.session import SESSION
from da_lab.versions.needs import V1, need, needs_for
from da_lab.versions.releases import supported_range

# The keywords the real step passes to _build_attention_metadata (needs.py checks every call).
_STEP_KEYWORDS = need(V1 + "._build_attention_metadata").accepts


def _unknown_call(what: str) -> DAUnsupported:
    return DAUnsupported(
        f"the DA hook does not know this vLLM's model runner ({what}); it was checked against "
        f"vLLM {supported_range()}, and would otherwise leave DA off silently")


def _batch(runner, num_reqs: int, num_scheduled_tokens: dict[str, int]) -> Batch | None:
    """This step's batch read off the v1 runner: ids, lengths, staged rows, and the extra_args
    and prompt length of requests seen for the first time (None when no request can be a DA
    request: the book holds none and no new one carries a layout)."""
    ib = runner.input_batch
    req_ids = tuple(ib.req_ids[:num_reqs])
    held = runner.requests
    book_has = SESSION.has_requests()
    extra, prompt_lens = [], []
    for req_id in req_ids:
        rs = held[req_id]
        ex = None if SESSION.tracks(req_id) else _extra(rs)
        extra.append(ex)
        prompt_lens.append(len(rs.prompt_token_ids) if ex is not None
                           and rs.prompt_token_ids is not None else None)
    if not book_has and not any(e is not None for e in extra):
        return None
    seq = runner.optimistic_seq_lens_cpu[:num_reqs].numpy()
    q = np.fromiter((num_scheduled_tokens[r] for r in req_ids), dtype=np.int64, count=num_reqs)
    facts = SESSION.facts
    others = [g.index for g in facts.groups if not g.masked]

    def other_groups(i: int) -> list:
        return [(g, _staged(ib, g)(i)) for g in others]

    return Batch(req_ids, seq, q, _staged(ib, facts.da_group), tuple(extra), tuple(prompt_lens),
                 other_groups if others else None)


def _staged(ib, group: int):
    """Batch row -> its staged row in KV-cache group `group`'s table, in KV-manager blocks
    (0.26-0.31 keep kernel blocks in it where those are smaller: block b is kernel blocks
    b*k .. b*k+k-1)."""
    bt = ib.block_table[group]
    rows = bt.get_numpy_array()
    k = getattr(bt, "blocks_per_kv_block", 1)
    if k == 1:
        return rows.__getitem__
    return lambda i: rows[i, ::k] // k


def _extra(req_state):
    sp = req_state.sampling_params
    ex = sp.extra_args if sp is not None else None
    return ex if ex and EXTRA_LAYOUT in ex else None


def _wrap_build_attention_metadata(orig):
    @functools.wraps(orig)
    def _build_attention_metadata(self, *args, **kwargs):
        if SESSION.in_dummy_run():   # profile/warm-up/graph-capture rows: nothing to steer
            return orig(self, *args, **kwargs)
        if args or any(kwargs.get(k) is None for k in _STEP_KEYWORDS):
            raise _unknown_call("_build_attention_metadata was called without num_reqs= and "
                                "num_scheduled_tokens= outside a dummy run")
        SESSION.begin_step(_batch, self, kwargs["num_reqs"], kwargs["num_scheduled_tokens"],
                           held=self.requests)
        try:
            return orig(self, *args, **kwargs)
        finally:
            SESSION.end_build()
    return _build_attention_metadata


def _wrap_dummy_run(orig):
    """Dummy runs build metadata for made-up rows: the builder wrapper must leave them alone."""
    @functools.wraps(orig)
    def _dummy_run(self, *args, **kwargs):
        SESSION.dummy_run(+1)
        try:
            return orig(self, *args, **kwargs)
        finally:
            SESSION.dummy_run(-1)
    return _dummy_run


def _wrap_sample(orig):
    @functools.wraps(orig)
    def _sample(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        SESSION.after_sampling(out.sampled_token_ids)
        return out
    return _sample


def request_blocks(runner) -> dict[str, tuple[int, ...]]:
    """{request name: physical block ids} of every request the v1 runner holds (its global
    KV-cache group's: the one DA edits)."""
    out: dict[str, tuple[int, ...]] = {}
    for req_id, rs in runner.requests.items():
        sp = rs.sampling_params
        name = str(((sp.extra_args if sp is not None else None) or {}).get(EXTRA_ID, req_id))
        g = SESSION.facts.da_group
        ids = rs.block_ids[g] if rs.block_ids and len(rs.block_ids) > g else ()
        out[name] = tuple(int(b) for b in ids)
    return out


def view(runner) -> RunnerView:
    """What a server's trace reads off the v1 runner: every request's blocks (also those
    without a layout), max_tokens from the SamplingParams it keeps."""
    def max_tokens(req_id: str):
        rs = runner.requests.get(req_id)
        return rs.sampling_params.max_tokens if rs is not None and rs.sampling_params else None

    return RunnerView(lambda: request_blocks(runner), max_tokens,
                      int(runner.kv_cache_config.num_blocks))


WRAPS = (("_build_attention_metadata", _wrap_build_attention_metadata),
         ("_dummy_run", _wrap_dummy_run),
         ("_sample", _wrap_sample),
         ("execute_model", wrap_execute_model(view)),
         ("get_kv_cache_spec", wrap_get_kv_cache_spec),
         ("initialize_kv_cache", wrap_initialize_kv_cache))


def install(version: str) -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    needs = needs_for(version, ("v1",))
    check_runner(GPUModelRunner, needs)
    live.check([n for n in needs if not n.symbol.startswith(V1)], "v1 model runner")
    patch_methods(GPUModelRunner, WRAPS)


def check_runner(cls, needs) -> None:
    """Refuse a runner class whose methods are not the ones the wrappers were written for."""
    for name, _ in WRAPS:
        if not callable(getattr(cls, name, None)):
            raise _unknown_call(f"{cls.__name__} has no {name}()")
    for n in needs:
        if n.kind == "function" and n.symbol.startswith(V1 + "."):
            name = n.qualname.split(".")[-1]
            fn = getattr(cls, name, None)
            why = "missing" if fn is None else live.signature_problem(fn, n)
            if why:
                raise _unknown_call(f"{name} {why}")
