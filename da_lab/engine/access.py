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
    worker = engine_core(llm).model_executor.driver_worker
    worker = getattr(worker, "worker", worker)     # WorkerWrapperBase -> Worker
    return worker.model_runner
