"""The engine side's needs (part of needs.NEEDS): what da_lab/engine/ reads of vLLM outside the
hook, i.e. the path to an in-process engine's parts (access.py), the physical KV map
(kvmap.py), diagram 1's introspection of the loaded model (introspect.py, variants.py), the
Lab's engine calls (lab.py, teacher.py) and `vllm bench serve` (bench_serve.py).

Plain field dicts, made into `Need`s by needs.py (so this module imports nothing of it). An
optional read (`getattr(x, "name", default)`) is declared too when the code relies on it; its
`why` says what the fallback gives. Not checkable here, so not declared: attributes of the HF
config (`hf_text_config.hidden_size`, ...) and the tokenizer (`encode`, `bos_token_id`), which
are transformers', torch's (`named_modules`), and vLLM's lazy `from vllm import X` map only as
far as `MODULE_ATTRS` names a class (checks/manifest.py follows it).
"""

from __future__ import annotations

# The scheduler side, read by engine/kvmap.py (diagram 2's physical KV map) and access.py.
CORE = "vllm.v1.engine.core:EngineCore"
SCHED = "vllm.v1.core.sched.scheduler:Scheduler"
KV_MANAGER = "vllm.v1.core.kv_cache_manager:KVCacheManager"
COORDINATOR = "vllm.v1.core.kv_cache_coordinator:KVCacheCoordinator"
SINGLE_TYPE = "vllm.v1.core.single_type_kv_cache_manager:SingleTypeKVCacheManager"
POOL = "vllm.v1.core.block_pool:BlockPool"
BLOCK = "vllm.v1.core.kv_cache_utils:KVCacheBlock"
REQUEST = "vllm.v1.request:Request"
SAMPLING = "vllm.sampling_params:SamplingParams"
# The engine side proper.
LLM = "vllm.entrypoints.llm:LLM"
ENGINE = "vllm.v1.engine.llm_engine:LLMEngine"
ENGINE_ARGS = "vllm.engine.arg_utils:EngineArgs"
RUNNERS = ("vllm.v1.worker.gpu_model_runner:GPUModelRunner",     # needs.V1 (CPU: a subclass)
           "vllm.v1.worker.gpu.model_runner:GPUModelRunner")     # needs.V2
# The releases that have the v1 model runner (v1/worker/gpu_model_runner.py, its input batch,
# block table and CPU subclass): 0.34 removed it and runs the V2 runner alone ("the v1 model
# runner" in needs.DIFFERENCES; releases.model_runners).
V1_RANGE = "..0.33.0"
VLLM_CONFIG = "vllm.config.vllm:VllmConfig"
MODEL_CONFIG = "vllm.config.model:ModelConfig"
COMPILATION = "vllm.config.compilation:CompilationConfig"
ATTENTION = "vllm.model_executor.layers.attention:Attention"
CUSTOM_OP = "vllm.model_executor.custom_op:CustomOp"
OUTPUT = "vllm.outputs:RequestOutput"
COMPLETION = "vllm.outputs:CompletionOutput"
OUTPUT_KIND = "vllm.sampling_params:RequestOutputKind"
# What the package's other rooms hold of vLLM (versions/reads.py says where).
ENGINE_CLIENT = "vllm.v1.engine.async_llm:AsyncLLM"          # `vllm serve`'s engine client
CORE_CLIENT = "vllm.v1.engine.core_client:EngineCoreClient"
INPROC_CLIENT = "vllm.v1.engine.core_client:InprocClient"
EXECUTOR = "vllm.v1.executor.uniproc_executor:UniProcExecutor"
WORKER_WRAPPER = "vllm.v1.worker.worker_base:WorkerWrapperBase"
WORKER = "vllm.v1.worker.gpu_worker:Worker"
GROUP_COORD = "vllm.distributed.parallel_state:GroupCoordinator"
COMM_CPU = "vllm.distributed.device_communicators.cpu_communicator:CpuCommunicator"
CACHE_CONFIG = "vllm.config.cache:CacheConfig"
PARALLEL_CONFIG = "vllm.config.parallel:ParallelConfig"
SCHED_CONFIG = "vllm.config.scheduler:SchedulerConfig"
CUDAGRAPH_MODE = "vllm.config.compilation:CUDAGraphMode"
ATTN_GROUP = "vllm.v1.worker.utils:AttentionGroup"                  # needs.GROUP
ATTENTION_BACKEND = "vllm.v1.attention.backend:AttentionBackend"
ATTN_IMPL = "vllm.v1.attention.backend:AttentionImpl"        # a backend's impl class
META_BUILDER = "vllm.v1.attention.backend:AttentionMetadataBuilder"  # needs.BUILDER
COMMON_META = "vllm.v1.attention.backend:CommonAttentionMetadata"    # needs.CM
LINEAR = "vllm.model_executor.layers.linear:LinearBase"
VOCAB_EMBEDDING = "vllm.model_executor.layers.vocab_parallel_embedding:VocabParallelEmbedding"
INPUT_BATCH = "vllm.v1.worker.gpu_input_batch:InputBatch"
CACHED_STATE = "vllm.v1.worker.gpu_input_batch:CachedRequestState"
MULTI_BLOCK_TABLE = "vllm.v1.worker.block_table:MultiGroupBlockTable"
BLOCK_TABLE = "vllm.v1.worker.block_table:BlockTable"
INPUT_BATCH_V2 = "vllm.v1.worker.gpu.input_batch:InputBatch"
REQUEST_STATE_V2 = "vllm.v1.worker.gpu.states:RequestState"
BLOCK_TABLES_V2 = "vllm.v1.worker.gpu.block_table:BlockTables"
NEW_REQUEST = "vllm.v1.core.sched.output:NewRequestData"
SCHED_OUTPUT = "vllm.v1.core.sched.output:SchedulerOutput"
SAMPLER_OUTPUT = "vllm.v1.outputs:SamplerOutput"
KV_CONFIG = "vllm.v1.kv_cache_interface:KVCacheConfig"
KV_GROUP_SPEC = "vllm.v1.kv_cache_interface:KVCacheGroupSpec"
KV_CACHE_SPEC = "vllm.v1.kv_cache_interface:KVCacheSpec"
ATTENTION_SPEC = "vllm.v1.kv_cache_interface:AttentionSpec"
SLIDING_SPEC = "vllm.v1.kv_cache_interface:SlidingWindowSpec"
UNIFORM_SPECS = "vllm.v1.kv_cache_interface:UniformTypeKVCacheSpecs"
WORKER_BASE = "vllm.v1.worker.worker_base:WorkerBase"
LOGPROB = "vllm.logprobs:Logprob"
# The serving handlers every generation route calls with the parsed request (serve/gate.py).
SERVE_HANDLERS = (
    ("vllm.entrypoints.openai.completion.serving:OpenAIServingCompletion",
     "create_completion"),
    ("vllm.entrypoints.openai.chat_completion.serving:OpenAIServingChat",
     "create_chat_completion"),
    ("vllm.entrypoints.openai.chat_completion.batch_serving:OpenAIServingChatBatch",
     "create_batch_chat_completion"),
    ("vllm.entrypoints.openai.responses.serving:OpenAIServingResponses", "create_responses"))
# The parsed requests `vllm serve`'s routes hand the serving handlers (serve/gate.py).
SERVE_REQUESTS = ("vllm.entrypoints.openai.completion.protocol:CompletionRequest",
                  "vllm.entrypoints.openai.chat_completion.protocol:ChatCompletionRequest",
                  "vllm.entrypoints.openai.chat_completion.protocol:BatchChatCompletionRequest",
                  "vllm.entrypoints.openai.responses.protocol:ResponsesRequest")


def _n(who, symbol, kind="function", **kw) -> dict:
    return {"symbol": symbol, "kind": kind, "who": who, **kw}


ENGINE_NEEDS: tuple[dict, ...] = (
    # the engine side (da_lab/engine/access.py, introspect.py): where an in-process engine
    # keeps its parts
    _n("engine", LLM + ".llm_engine", "attribute"),
    _n("engine", ENGINE + ".engine_core", "attribute"),
    _n("engine", ENGINE + ".vllm_config", "attribute"),
    _n("engine", "vllm.v1.engine.core_client:InprocClient.engine_core", "attribute",
       why="the in-process client's EngineCore; other clients have none (multiprocessing)"),
    _n("engine", CORE + ".model_executor", "attribute"),
    _n("engine", "vllm.v1.executor.uniproc_executor:UniProcExecutor.driver_worker",
       "attribute"),
    _n("engine", "vllm.v1.worker.worker_base:WorkerWrapperBase.worker", "attribute"),
    _n("engine", "vllm.v1.worker.gpu_worker:Worker.model_runner", "attribute"),
    _n("engine", POOL + ".num_gpu_blocks", "attribute", why="access.num_kv_blocks"),
    _n("engine", ATTENTION, "class"),
    _n("engine", "vllm.model_executor.layers.linear:LinearBase", "class"),
    _n("engine", CUSTOM_OP, "class"),
    _n("engine", BLOCK, "class", why="engine/kvmap.py reads the pool's blocks"),
    _n("engine", "vllm.distributed.parallel_state:get_tp_group"),
    _n("engine", OUTPUT_KIND, "class"),
    # engine/kvmap.py: the physical KV map (diagram 2), read off the scheduler; every
    # attribute it reads on these objects is declared here (tests/test_vllm_manifests.py)
    _n("kvmap", CORE + ".scheduler", "attribute"),
    *(_n("kvmap", f"{SCHED}.{a}", "attribute")
      for a in ("requests", "kv_cache_manager", "finished_req_ids")),
    *(_n("kvmap", f"{KV_MANAGER}.{a}", "attribute") for a in ("block_pool", "coordinator")),
    _n("kvmap", COORDINATOR + ".single_type_managers", "attribute"),
    _n("kvmap", SINGLE_TYPE + ".req_to_blocks", "attribute"),
    *(_n("kvmap", f"{POOL}.{a}", "attribute")
      for a in ("blocks", "cached_block_hash_to_block", "enable_caching")),
    _n("kvmap", POOL + ".reset_prefix_cache",
       why="wrapped on the tracked pool to count resets, the tracker's cue to re-read the pool: "
           "from 0.34 a reset clears the hash map in place (needs.DIFFERENCES)"),
    *(_n("kvmap", f"{BLOCK}.{a}", "attribute") for a in ("block_id", "block_hash", "is_null")),
    # engine/access.py, beyond the path above: the KV bytes per token, shutdown, the TP rank
    *(_n("engine", f"{VLLM_CONFIG}.{a}", "attribute")
      for a in ("model_config", "cache_config", "parallel_config", "compilation_config")),
    _n("engine", "vllm.config.cache:CacheConfig.cache_dtype", "attribute"),
    *(_n("engine", f"{MODEL_CONFIG}.{f}", first=("parallel_config",))
      for f in ("get_num_layers", "get_num_kv_heads")),
    _n("engine", "vllm.v1.engine.core_client:EngineCoreClient.shutdown",
       why="access.shutdown and Lab.shutdown: LLMEngine.engine_core is a client"),
    *(_n("engine", f"vllm.distributed.parallel_state:GroupCoordinator.{a}", "attribute")
      for a in ("device_communicator", "rank_in_group")),
    _n("engine", "vllm.distributed.device_communicators.cpu_communicator:CpuCommunicator"
       ".dist_module", "attribute",
       why="optional (getattr): names the CPU all-reduce; other communicators have none"),
    # access.kv_cache_groups: how the engine grouped its KV cache (a hybrid model: per kind)
    _n("engine", SCHED + ".kv_cache_config", "attribute"),
    *(_n("engine", f"{spec}.page_size_bytes", "attribute") for spec in (KV_CACHE_SPEC,
                                                                        SLIDING_SPEC)),
    _n("engine", SLIDING_SPEC + ".block_size", "attribute"),
    _n("engine", "vllm.v1.attention.backend:AttentionBackend.get_name",
       why="access.attention_backends and introspect: a group's / a layer's backend"),
    *(_n("engine", f"{OUTPUT_KIND}.{m}", "attribute",
         why="access.output_kind(name) (the Lab, teacher.py: DELTA; eval_engine: FINAL_ONLY)")
      for m in ("DELTA", "FINAL_ONLY")),
    # engine/introspect.py (diagram 1): the loaded model's slots and the config behind them
    *(_n("introspect", f"{r}.{a}", versions=V1_RANGE if r == RUNNERS[0] else "", **kw)
      for r in RUNNERS
      for a, kw in (("get_model", {}), ("model_config", {"kind": "attribute"}),
                    ("vllm_config", {"kind": "attribute"}))),
    _n("introspect", CUSTOM_OP + "._forward_method", "attribute",
       why="optional (getattr): the method dispatch chose; None shows as no kernel"),
    _n("introspect", CUSTOM_OP + ".forward_native",
       why="a dispatch to anything else is a platform kernel"),
    _n("introspect", "vllm.model_executor.layers.linear:LinearBase.quant_method", "attribute",
       why="optional (getattr): the LinearMethod; variants.py reads its kernels"),
    _n("introspect", "vllm.model_executor.layers.vocab_parallel_embedding:"
       "VocabParallelEmbedding.quant_method", "attribute",
       why="optional (getattr): the embedding / LM head's method"),
    *(_n("introspect", f"{ATTENTION}.{a}", "attribute")
      for a in ("attn_backend", "impl", "head_size", "num_heads", "num_kv_heads")),
    *(_n("introspect", f"{ATTENTION}.{a}", "attribute", why="optional (getattr): None")
      for a in ("sliding_window", "kv_cache_dtype")),
    *(_n("introspect", f"{MODEL_CONFIG}.{a}", "attribute")
      for a in ("hf_text_config", "dtype", "quantization", "max_model_len", "model")),
    _n("introspect", MODEL_CONFIG + ".get_head_size"),
    *(_n("introspect", f"{COMPILATION}.{a}", "attribute")
      for a in ("pass_config", "mode", "cudagraph_mode", "custom_ops", "enabled_custom_ops",
                "disabled_custom_ops")),
    _n("introspect", "vllm.config.compilation:PassConfig", "class",
       why="its fuse_*/enable_* bool fields are listed as they are (vars), none required"),
    # engine/lab.py, teacher.py, variants.py: the engine calls and what they return
    *(_n("lab", f"vllm:{c}", "class", why="`from vllm import ...` (vLLM's lazy MODULE_ATTRS)")
      for c in ("LLM", "SamplingParams")),
    _n("lab", LLM + ".__init__", first=("model",),
       why="its other keywords go on to EngineArgs (**kwargs): declared as its fields below"),
    *(_n("lab", f"{ENGINE_ARGS}.{a}", "attribute", why="an LLM(...) keyword")
      for a in ("model", "dtype", "block_size", "seed", "enforce_eager",
                "num_gpu_blocks_override", "max_model_len", "enable_prefix_caching",
                "use_tqdm_on_load", "gpu_memory_utilization", "quantization",
                "compilation_config", "hf_overrides", "language_model_only")),
    _n("lab", ENGINE_ARGS + ".disable_cascade_attn", "attribute", versions="0.26.0..0.31.0",
       why="passed only where cascade attention exists (releases.engine_kwargs)"),
    _n("lab", LLM + ".get_tokenizer"),
    _n("lab", LLM + ".generate", first=("prompts", "sampling_params"), accepts=("use_tqdm",),
       why="variants.py's smoke test"),
    _n("lab", ENGINE + ".add_request", first=("request_id", "prompt", "params")),
    _n("lab", ENGINE + ".step"),
    _n("lab", ENGINE + ".abort_request", first=("request_ids",)),
    _n("lab", ENGINE + ".has_unfinished_requests"),
    _n("lab", "vllm.inputs:TokensPrompt.prompt_token_ids", "attribute",
       why='add_request(id, {"prompt_token_ids": ids}, params)'),
    *(_n("lab", f"{SAMPLING}.{a}", "attribute", why="a SamplingParams(...) keyword")
      for a in ("temperature", "max_tokens", "ignore_eos", "output_kind", "logprobs")),
    *(_n("lab", f"{OUTPUT}.{a}", "attribute") for a in ("request_id", "outputs", "finished")),
    *(_n("lab", f"{COMPLETION}.{a}", "attribute") for a in ("token_ids", "text", "logprobs")),
    _n("lab", "vllm.logprobs:Logprob.rank", "attribute", why="teacher.top1"),
    # engine/bench_serve.py: `vllm bench serve` without the console script
    _n("engine", "vllm.utils.argparse_utils:FlexibleArgumentParser", "class"),
    _n("engine", "vllm.benchmarks.serve:add_cli_args", first=("parser",)),
    _n("engine", "vllm.benchmarks.serve:main", first=("args",)),
    # ---- every other read of vLLM in the package (versions/reads.py says where it is held;
    # checks/vllm_reads.py finds each read, tests/test_vllm_reads.py fails on an undeclared one)
    _n("serve", "vllm.entrypoints.openai.api_server", "module",
       why="`da-lab serve` runs it (python -m), the module `vllm serve` runs"),
    _n("driver", OUTPUT + ".num_cached_tokens", "attribute",
       why="optional (getattr): None; the prompt tokens the prefix cache served"),
    # the bench (bench/worker.py, measure.py, reliability/), the checks, the eval
    *(_n("bench", f"{ENGINE_ARGS}.{a}", "attribute", why="an LLM(...) keyword")
      for a in ("tokenizer", "max_num_seqs", "max_num_batched_tokens", "load_format",
                "tensor_parallel_size", "kv_cache_memory_bytes", "async_scheduling")),
    _n("bench", SAMPLING + ".detokenize", "attribute", why="a SamplingParams(...) keyword"),
    _n("bench", CACHE_CONFIG + ".block_size", "attribute"),
    _n("bench", MODEL_CONFIG + ".disable_cascade_attn", "attribute",
       why="optional (getattr): None; the bench document says what the engine ran"),
    *(_n("bench", f"{r}.model", "attribute", versions=V1_RANGE if r == RUNNERS[0] else "",
         why="optional (try): the loaded weights' bytes, a cross-check only") for r in RUNNERS),
    _n("bench", LLM + ".reset_prefix_cache"),
    _n("checks", LLM + ".collective_rpc", first=("method",),
       why="checks/tp_check.py: every rank's hook log"),
    # serve/: the API server's engine client, the parsed requests, the serving handlers
    _n("serve", ENGINE_CLIENT + ".generate", first=("prompt", "sampling_params", "request_id"),
       why="the edge wraps it (serve/edge.py)"),
    _n("serve", ENGINE_CLIENT + ".vllm_config", "attribute"),
    _n("serve", ENGINE_CLIENT + ".get_tokenizer"),
    _n("serve", ENGINE_CLIENT + ".collective_rpc", first=("method",), accepts=("args",)),
    _n("serve", MODEL_CONFIG + ".served_model_name", "attribute",
       why="optional (getattr): the model's path names it"),
    _n("serve", SAMPLING + ".structured_outputs", "attribute",
       why="optional (getattr): a grammar the director's tags would break (serve/edge.py)"),
    _n("serve", SAMPLING + ".n", "attribute", why="optional (getattr): 1"),
    *(_n("serve", f"{SAMPLING}.{a}", "attribute",
         why="optional (getattr): a token constraint the director's tags would override "
             "(serve/edge.py)") for a in ("allowed_token_ids", "bad_words")),
    *(_n("serve", f"{SERVE_REQUESTS[i]}.{a}", "attribute",
         why="optional (getattr): what serve/gate.py checks on a parsed request")
      for i, a in ((0, "vllm_xargs"), (0, "stream"), (0, "use_beam_search"),
                   (1, "vllm_xargs"), (1, "stream"), (1, "use_beam_search"),
                   (2, "use_beam_search"), (3, "vllm_xargs"), (3, "stream"),
                   (0, "truncate_prompt_tokens"), (1, "truncate_prompt_tokens"))),
    *(_n("serve", f"{cls}.{method}", first=("request",),
         why="serve/gate.py wraps it; `da-lab serve` refuses to start without it")
      for cls, method in SERVE_HANDLERS),
)
