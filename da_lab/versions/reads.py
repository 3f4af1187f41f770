"""Where the package holds vLLM's objects, and what they hold. checks/vllm_reads.py reads every
module with `ast` and holds each import, attribute read and keyword on these against the needs
declared in needs.py and needs_engine.py, which every release's manifest is checked against
(tests/test_vllm_reads.py, tests/test_vllm_manifests.py; docs/compatibility.md).

READS, per module: a key is a local name (`runner`), an expression (`self.llm`, `lab.engine`),
a call's result (`get_tp_group()`) or an item (`outs[]`); `fn:key` holds inside function `fn`
only (where one name means two things in one module); `**name` lists the keywords a splat
carries where the scan can't read them. A value is a class symbol ("module:Class"), a tuple of
them (a read must hold on each; an optional one, a getattr with a default or a hasattr, on
one), or PLAIN: not a vLLM object (a tensor, a dict, a string, a transformers config).
HOLDS, for every module: what an attribute of a vLLM class holds ("Class.attr"; "Class.attr()"
a method's result, "Class.attr[]" / "Class[]" an item, "Class.*" every other attribute), so a
chain such as `llm.llm_engine.vllm_config.model_config.dtype` is read link by link.
"""

from __future__ import annotations

from da_lab.versions.needs_engine import (
    ATTENTION,
    ATTENTION_BACKEND,
    ATTENTION_SPEC,
    ATTN_GROUP,
    ATTN_IMPL,
    BLOCK,
    BLOCK_TABLE,
    BLOCK_TABLES_V2,
    CACHE_CONFIG,
    CACHED_STATE,
    COMM_CPU,
    COMMON_META,
    COMPILATION,
    COMPLETION,
    COORDINATOR,
    CORE,
    CORE_CLIENT,
    CUDAGRAPH_MODE,
    CUSTOM_OP,
    ENGINE,
    ENGINE_ARGS,
    ENGINE_CLIENT,
    EXECUTOR,
    GROUP_COORD,
    INPROC_CLIENT,
    INPUT_BATCH,
    INPUT_BATCH_V2,
    KV_CACHE_SPEC,
    KV_CONFIG,
    KV_GROUP_SPEC,
    KV_MANAGER,
    LINEAR,
    LLM,
    LOGPROB,
    META_BUILDER,
    MODEL_CONFIG,
    MULTI_BLOCK_TABLE,
    NEW_REQUEST,
    OUTPUT,
    OUTPUT_KIND,
    PARALLEL_CONFIG,
    POOL,
    REQUEST,
    REQUEST_STATE_V2,
    RUNNERS,
    SAMPLER_OUTPUT,
    SAMPLING,
    SCHED,
    SCHED_CONFIG,
    SCHED_OUTPUT,
    SERVE_REQUESTS,
    SINGLE_TYPE,
    SLIDING_SPEC,
    UNIFORM_SPECS,
    VLLM_CONFIG,
    VOCAB_EMBEDDING,
    WORKER,
    WORKER_BASE,
    WORKER_WRAPPER,
)

PLAIN = None
V1, V2 = RUNNERS

# Names this package gives vLLM's objects: where one appears (a variable, a parameter, an
# attribute of the package's own objects such as `lab.llm`), its module declares it.
HANDLES = frozenset({
    "llm", "llm_engine", "engine", "engine_core", "engine_client", "model_runner", "runner",
    "model_executor", "driver_worker", "vllm_config", "scheduler_output", "kv_cache_config",
    "common_attn_metadata", "attn_groups", "input_batch", "cm", "builder",
})

# The package's accessors (engine/access.py) and what each returns.
RETURNS: dict[str, object] = {
    "da_lab.engine.access:engine_core": CORE,
    "da_lab.engine.access:model_runner": RUNNERS,
    "da_lab.engine.access:vllm_config": VLLM_CONFIG,
    "da_lab.engine.access:output_kind": OUTPUT_KIND,
}

# Callables whose keywords (beyond their own parameters) go on to vLLM as a class's fields.
KEYWORDS_TO = {LLM: ENGINE_ARGS, "da_lab.engine.lab:Lab": LLM}

# Functions returning engine keywords (their keys are checked like literal keywords).
KEYWORD_SOURCES = {"da_lab.versions.releases:engine_kwargs": ("disable_cascade_attn",)}

# Attributes a vLLM class has from Python's own base classes (Enum, argparse), which no
# manifest lists: the class itself is a declared need.
INHERITED = {CUDAGRAPH_MODE: ("name",), OUTPUT_KIND: ("name",),
             "vllm.utils.argparse_utils:FlexibleArgumentParser": ("parse_args",)}

# Held as a Python object only (its type, its name): nothing of vLLM's is read off it.
ANY = "builtins:object"

HOLDS: dict[str, object] = {
    # the path to an in-process engine's parts (engine/access.py)
    f"{LLM}.llm_engine": ENGINE,
    f"{LLM}.get_tokenizer()": PLAIN,
    f"{ENGINE}.engine_core": CORE_CLIENT,
    f"{ENGINE}.vllm_config": VLLM_CONFIG,
    f"{CORE}.model_executor": EXECUTOR,
    f"{CORE}.scheduler": SCHED,
    f"{EXECUTOR}.driver_worker": WORKER_WRAPPER,
    f"{SCHED}.kv_cache_manager": KV_MANAGER,
    f"{SCHED}.kv_cache_config": KV_CONFIG,
    f"{KV_MANAGER}.block_pool": POOL,
    # configs: scalars, torch dtypes and transformers' config, but for these
    f"{VLLM_CONFIG}.model_config": MODEL_CONFIG,
    f"{VLLM_CONFIG}.cache_config": CACHE_CONFIG,
    f"{VLLM_CONFIG}.parallel_config": PARALLEL_CONFIG,
    f"{VLLM_CONFIG}.scheduler_config": SCHED_CONFIG,
    f"{VLLM_CONFIG}.compilation_config": COMPILATION,
    f"{COMPILATION}.cudagraph_mode": CUDAGRAPH_MODE,
    **{f"{c}.*": PLAIN for c in (MODEL_CONFIG, CACHE_CONFIG, COMPILATION)},
    f"{ENGINE_CLIENT}.vllm_config": VLLM_CONFIG,
    # the model runners and what they keep
    **{f"{r}.{a}": v for r in RUNNERS for a, v in (
        ("vllm_config", VLLM_CONFIG), ("model_config", MODEL_CONFIG),
        ("kv_cache_config", KV_CONFIG), ("get_model()", PLAIN), ("device", PLAIN),
        ("model", PLAIN), ("get_kv_cache_spec()", PLAIN))},
    f"{V1}.input_batch": INPUT_BATCH,
    f"{V1}.optimistic_seq_lens_cpu": PLAIN,
    f"{V2}.req_states": REQUEST_STATE_V2,
    f"{INPUT_BATCH}.block_table": MULTI_BLOCK_TABLE,
    f"{MULTI_BLOCK_TABLE}[]": BLOCK_TABLE,
    f"{BLOCK_TABLE}.get_numpy_array()": PLAIN,
    f"{CACHED_STATE}.sampling_params": SAMPLING,
    f"{CACHED_STATE}.block_ids": PLAIN,
    f"{SAMPLING}.extra_args": PLAIN,
    f"{REQUEST}.sampling_params": SAMPLING,
    **{f"{INPUT_BATCH_V2}.{a}": PLAIN for a in ("num_reqs", "seq_lens_cpu_upper_bound",
                                                 "idx_mapping_np")},
    f"{NEW_REQUEST}.sampling_params": SAMPLING,
    f"{SAMPLER_OUTPUT}.sampled_token_ids": PLAIN,
    f"{ATTN_GROUP}.backend": ATTENTION_BACKEND,
    f"{ATTN_GROUP}.kv_cache_spec": ATTENTION_SPEC,
    f"{META_BUILDER}.kv_cache_spec": ATTENTION_SPEC,
    f"{KV_GROUP_SPEC}.kv_cache_spec": (KV_CACHE_SPEC, SLIDING_SPEC),
    f"{ATTN_GROUP}.get_metadata_builder()": META_BUILDER,
    f"{ATTENTION_BACKEND}.get_impl_cls()": ATTN_IMPL,
    f"{COMMON_META}.*": PLAIN,
    # the loaded model (engine/introspect.py)
    f"{ATTENTION}.attn_backend": ATTENTION_BACKEND,
    f"{ATTENTION}.impl": PLAIN,
    # what a step returns
    f"{OUTPUT}.outputs[]": COMPLETION,
    f"{GROUP_COORD}.device_communicator": COMM_CPU,
}

_GEN = {"SamplingParams": SAMPLING, "LLM": LLM}       # `from vllm import ...`

READS: dict[str, dict[str, object]] = {
    # engine/: the Lab and its engine's parts
    "da_lab.engine.access": {
        "llm": LLM, "client": INPROC_CLIENT, "wrapper": WORKER_WRAPPER, "worker": WORKER,
        "runner": RUNNERS, "g": ATTN_GROUP, "get_tp_group()": GROUP_COORD,
        "kv_cache_groups:g": KV_GROUP_SPEC,
    },
    "da_lab.engine.lab": {
        **_GEN, "self.llm": LLM, "self.engine": ENGINE, "self._runner": RUNNERS,
        "self._core": CORE, "__init__:runner": PLAIN, "_start:runner": PLAIN,
    },
    "da_lab.engine.kvmap": {
        "core": CORE, "sched": SCHED, "mgr": KV_MANAGER, "coord": COORDINATOR,
        "stm": SINGLE_TYPE, "pool": POOL, "b": BLOCK, "req": REQUEST, "sp": SAMPLING,
    },
    "da_lab.engine.teacher": {"SamplingParams": SAMPLING, "lab.engine": ENGINE,
                              "top1:kv[]": LOGPROB},
    "da_lab.engine.introspect": {
        "runner": RUNNERS, "_slot:mod": ATTENTION, "_custom_op:mod": CUSTOM_OP,
        "_linear:mod": (LINEAR, VOCAB_EMBEDDING), "mc": MODEL_CONFIG, "cc": COMPILATION,
        "hf": PLAIN, "model": PLAIN, "_cls:obj": ANY,
    },
    "da_lab.engine.variants": {
        **_GEN, "llm": LLM, "runner": RUNNERS, "gen[]": OUTPUT,
        "**attempt": ("num_gpu_blocks_override", "quantization", "dtype"),
    },
    "da_lab.engine.bench_serve": {"Parser": "vllm.utils.argparse_utils:FlexibleArgumentParser"},
    # hook/: the plugin's entry point, the runners' adapters, the edit, the driver
    "da_lab.hook": {"vllm": "vllm"},
    "da_lab.hook.driver": {"engine": ENGINE, "self.engine": ENGINE, "out": OUTPUT,
                           "c": COMPLETION},
    "da_lab.hook.prefix_cache": {"request": REQUEST, "KVCacheCoordinator": COORDINATOR},
    "da_lab.hook.service": {"scheduler_output": SCHED_OUTPUT, "worker": WORKER_BASE,
                            "WorkerBase": WORKER_BASE},
    "da_lab.hook.session": {"builder": META_BUILDER, "cm": COMMON_META,
                            "scheduler_output": SCHED_OUTPUT},
    "da_lab.hook.step": {"cm": COMMON_META},
    "da_lab.hook.metadata": {"cm": COMMON_META, "out": COMMON_META},
    "da_lab.hook.runners.live": {"check_cm_fields:cls": ANY},
    # the grouped read (issue 59): the backends' impl forward wrapped, the step's metadata
    "da_lab.hook.grouped": {"runner": RUNNERS, "attn_groups": PLAIN, "_install:g": ATTN_GROUP,
                            "spec": ATTENTION_SPEC, "vc": VLLM_CONFIG, "cm": COMMON_META},
    # CPU_ATTN's ops as a module (`import vllm._custom_ops as ops`): its functions and their
    # keywords are needs.py's (first/accepts); its impl, layer and metadata are duck-typed
    "da_lab.hook.grouped_exec": {},
    "da_lab.hook.runners.common": {
        "vllm_config": VLLM_CONFIG, "kv_cache_config": KV_CONFIG, "runner": RUNNERS,
        "attn_groups": PLAIN, "group_facts:g": KV_GROUP_SPEC, "note_runner:g": ATTN_GROUP,
        "group": ATTN_GROUP, "builder": META_BUILDER, "cg": CUDAGRAPH_MODE,
        "patch_builder_class:cls": META_BUILDER, "patch_methods:cls": ANY,
        "sched": SCHED_CONFIG, "pc": PARALLEL_CONFIG, "build:self": META_BUILDER,
        "build:common_attn_metadata": COMMON_META, "build:cm": COMMON_META,
        "update_block_table:self": META_BUILDER, "get_kv_cache_spec:self": RUNNERS,
        "initialize_kv_cache:self": RUNNERS,
    },
    "da_lab.hook.runners.v1": {
        "runner": V1, "self": V1, "ib": INPUT_BATCH, "bt": BLOCK_TABLE, "rs": CACHED_STATE,
        "req_state": CACHED_STATE, "sp": SAMPLING, "out": SAMPLER_OUTPUT, "cls": ANY,
    },
    "da_lab.hook.runners.v2": {
        "runner": V2, "self": V2, "ib": INPUT_BATCH_V2, "input_batch": INPUT_BATCH_V2,
        "new": NEW_REQUEST, "add_requests:n": NEW_REQUEST, "sp": SAMPLING,
        "scheduler_output": SCHED_OUTPUT, "out[]": SAMPLER_OUTPUT,
        "_wrap_append_block_ids:self": BLOCK_TABLES_V2,
        "init_device:self": "vllm.v1.worker.cpu_worker:CPUWorker",
        "_refuse_cpu_v2:runner": ANY,
    },
    "da_lab.versions.kv_specs": {"spec": (KV_CACHE_SPEC, UNIFORM_SPECS)},
    # serve/: the API server's side
    "da_lab.serve.endpoint": {"engine_client": ENGINE_CLIENT,
                              "self.engine_client": ENGINE_CLIENT, "cfg": VLLM_CONFIG,
                              "state": PLAIN, "args": PLAIN},
    "da_lab.serve.edge": {"engine_client": ENGINE_CLIENT, "params": SAMPLING,
                          "mine": SAMPLING, "prompt": PLAIN},
    "da_lab.serve.gate": {"request": SERVE_REQUESTS, "state": PLAIN},
    # the bench, the checks, the eval, the timing scripts
    "da_lab.bench.worker": {
        "LLM": LLM, "self.llm": LLM, "self.engine": ENGINE, "self.core": CORE,
        "self.runner": RUNNERS, "vc": VLLM_CONFIG, "mc": MODEL_CONFIG, "cc": CACHE_CONFIG,
        "child.llm": LLM,
        # LLM(**kwargs): the spec's keywords, a hybrid model's (bench/plan.model_fields,
        # models/hybrid_dummy.engine_kwargs) and the release's (releases.engine_kwargs)
        "**kwargs": ("model", "tokenizer", "dtype", "block_size", "seed", "max_model_len",
                     "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching",
                     "enforce_eager", "gpu_memory_utilization", "load_format",
                     "num_gpu_blocks_override", "hf_overrides", "language_model_only",
                     "compilation_config", "disable_cascade_attn"),
    },
    "da_lab.bench.plan": {"engine": PLAIN},
    "da_lab.bench.measure": {"SamplingParams": SAMPLING, "self.engine": ENGINE},
    "da_lab.bench.recorder": {"core": CORE, "runner": RUNNERS},
    "da_lab.bench.profiling": {"class_name:obj": ANY},
    "da_lab.bench.run": {"args.runner": PLAIN},
    "da_lab.bench.reliability.reliability": {"lab.llm": LLM},
    "da_lab.bench.timing.hook_cpu": {"lab.engine": ENGINE},
    "da_lab.bench.timing.hook_cpu.STOCK": {**_GEN, "llm": LLM, "eng": ENGINE},
    "da_lab.bench.timing.lab_cpu": {"lab.engine": ENGINE, "engine": PLAIN},
    "da_lab.bench.timing.serve_gpu": {"vllm": "vllm"},
    "da_lab.bench.timing.first_cell": {"LLM": LLM, "llm": LLM},
    "da_lab.bench.models.gemma3_check": {**_GEN, "llm": LLM, "engine": ENGINE, "o": OUTPUT},
    "da_lab.checks.gpu_tests": {"lab.llm": LLM, "run_case:runner": PLAIN,
                                # Lab(**{...}): the hybrid models' (hybrid_dummy.lab_kwargs)
                                "**sizes": (
                                    "num_blocks", "max_model_len", "block_size",
                                    "hf_overrides", "language_model_only")},
    "da_lab.checks.selfcheck.STOCK": {**_GEN, "llm": LLM, "out[]": OUTPUT},
    "da_lab.checks.tp_check": {**_GEN, "llm": LLM, "run:o": OUTPUT, "args.runner": PLAIN},
    "da_lab.training.eval.eval_engine": {"lab.llm": LLM, "lab.engine": ENGINE,
                                         "SamplingParams": SAMPLING},
    # what only looks like a vLLM object by its name (HANDLES): a string
    "da_lab.core.record": {"self.runner": PLAIN},
    "da_lab_widgets.metadata_path": {"runner": PLAIN},
    "da_lab_widgets.packets": {"md.runner": PLAIN},
}
