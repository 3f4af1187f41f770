"""Where an in-process engine keeps its parts (LLM -> engine core -> executor -> worker ->
model runner). Version differences in these paths belong here."""


def engine_core(llm):
    """The EngineCore (scheduler + executor) of an in-process LLM."""
    client = llm.llm_engine.engine_core
    core = getattr(client, "engine_core", None)
    if core is None:
        raise RuntimeError("the engine runs in another process; the lab needs "
                           "VLLM_ENABLE_V1_MULTIPROCESSING=0 to read it step by step")
    return core


def model_runner(llm):
    wrapper = engine_core(llm).model_executor.driver_worker
    worker = getattr(wrapper, "worker", wrapper)     # WorkerWrapperBase -> Worker
    return worker.model_runner


def vllm_config(llm):
    """The engine's VllmConfig (model, cache, compilation, scheduler settings)."""
    return llm.llm_engine.vllm_config


def num_kv_blocks(llm) -> int:
    """Usable KV-cache blocks of an in-process engine (block 0 is vLLM's null block)."""
    return engine_core(llm).scheduler.kv_cache_manager.block_pool.num_gpu_blocks - 1


def kv_bytes_per_token(llm) -> int:
    """K and V bytes one token occupies across all layers."""
    import torch

    vc = vllm_config(llm)
    mc, cc = vc.model_config, vc.cache_config
    dtype = mc.dtype if cc.cache_dtype == "auto" else getattr(torch, cc.cache_dtype, mc.dtype)
    return (2 * mc.get_num_layers(vc.parallel_config) * mc.get_num_kv_heads(vc.parallel_config)
            * mc.get_head_size() * torch.empty((), dtype=dtype).element_size())


def attention_backends(runner) -> list[str] | None:
    try:
        return sorted({g.backend.get_name() for gs in runner.attn_groups for g in gs})
    except Exception:   # noqa: BLE001 - informational; a runner without attn_groups
        return None


def da_hook_wrapped() -> bool:
    """Whether the DA hook has wrapped a model runner's step in this process: the v1 runner's
    metadata build (to 0.33) or the V2 runner's prepare_attn. Read off the loaded modules only:
    one not imported was not wrapped, and 0.34 has no v1 runner to import."""
    import sys

    v1 = getattr(sys.modules.get("vllm.v1.worker.gpu_model_runner"), "GPUModelRunner", None)
    v2 = getattr(sys.modules.get("vllm.v1.worker.gpu.model_runner"), "GPUModelRunner", None)
    return bool(getattr(getattr(v1, "_build_attention_metadata", None), "_da_wrapped", False)
                or getattr(getattr(v2, "prepare_attn", None), "_da_wrapped", False))


def shutdown(llm) -> None:
    """Stop an LLM's engine core now (best effort: the process may be exiting anyway)."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:   # noqa: BLE001 - best effort
        pass


def tp_rank_info() -> tuple[int, str]:
    """(this worker's rank in its tensor-parallel group, its communicator's name); (-1, '')
    when no group is initialised. Runs inside a worker process."""
    try:
        from vllm.distributed.parallel_state import get_tp_group

        tp = get_tp_group()
        dc = tp.device_communicator
        comm = type(dc).__name__
        dm = getattr(dc, "dist_module", None)     # CPU: the SHM all-reduce or torch.distributed
        if dm is not None:
            comm += f" via {getattr(dm, '__name__', None) or type(dm).__name__}"
        return tp.rank_in_group, comm
    except Exception:   # noqa: BLE001 - not initialised
        return -1, ""


def output_kind(name: str):
    """vLLM's RequestOutputKind by name ("DELTA", "FINAL_ONLY", "CUMULATIVE"): what a request's
    outputs carry at each step (not exported at vLLM's top level)."""
    from vllm.sampling_params import RequestOutputKind

    return RequestOutputKind[name]


def kv_cache_groups(llm) -> dict:
    """How the engine grouped its KV cache (vLLM's KVCacheConfig, read from the scheduler's
    KV-cache manager), as plain data: blocks, and per group its spec class, block size, sliding
    window (None: full attention) and layers. A hybrid model (Gemma 3) has one group per
    attention kind; its groups share one block pool."""
    core = engine_core(llm)
    cfg = core.scheduler.kv_cache_config
    groups = []
    for g in cfg.kv_cache_groups:
        spec = g.kv_cache_spec
        groups.append({"spec": type(spec).__name__, "block_size": int(spec.block_size),
                       "sliding_window": getattr(spec, "sliding_window", None),
                       "page_size_bytes": int(spec.page_size_bytes),
                       "n_layers": len(g.layer_names), "layers": list(g.layer_names)})
    return {"num_blocks": int(cfg.num_blocks), "groups": groups}
