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
