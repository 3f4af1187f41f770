"""One Lab per kernel: what a notebook asks for on every Run All, the second time too.

vLLM keeps one in-process engine per process, so a second `Lab()` in the same kernel is refused.
`one_lab(...)` takes the same arguments as `Lab(...)`: when the running Lab was started with
them, it is handed back idle (its unfinished requests aborted, its request history forgotten,
so the lesson's requests get the same ids and questions as the first time); otherwise the
running one is shut down and the one asked for started. Either way one line says which.
"""

from __future__ import annotations

import inspect

from da_lab.engine.lab import Lab
from da_lab.engine.lab_start import running_lab, start_key
from da_lab.models.tiny import build_tiny_model


def _key(model, kwargs: dict) -> str:
    """The start key Lab(model, **kwargs) would get (its defaults filled in)."""
    bound = inspect.signature(Lab.__init__).bind(None, model, **kwargs)
    bound.apply_defaults()
    args = dict(bound.arguments)
    args.pop("self")
    args.pop("progress")
    extra = args.pop("engine_kwargs")
    return start_key(str(args.pop("model") or build_tiny_model()), **args, **extra)


def idle(lab: Lab) -> Lab:
    """`lab` idle, as if just started (Lab.forget_requests)."""
    lab.forget_requests()
    return lab


def one_lab(model=None, **kwargs) -> Lab:
    """The Lab this kernel runs, reused when it was started with these arguments, else a new
    one (the old one shut down first)."""
    old = running_lab()
    if old is not None:
        if old.start_key == _key(model, kwargs):
            print(f"vLLM ready ({old.model.rsplit('/', 1)[-1]}): reusing the engine this "
                  f"kernel started (step {old.step_index}); requests it ran are aborted")
            return idle(old)
        print("shutting down this kernel's Lab (started with other arguments)")
        old.shutdown()
    return Lab(model, **kwargs)


def shut_down_running() -> None:
    """Free this process's engine for one that something else starts (an eval sizes its own)."""
    old = running_lab()
    if old is not None:
        print("shutting down this kernel's Lab: the next cell starts its own engine")
        old.shutdown()
