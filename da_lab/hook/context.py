"""The hook's per-step context: what one engine step's hook calls share, typed.

The runner wrappers (runners/v1.py, v2.py) open a step (`begin`), the builder wrapper
(metadata.py) reads the step's decision and fills in what the builder received on the step's
`RequestStep`s, the sampler wrapper reads the forced tokens, and `execute_model`'s wrapper
ends the step (`end`). One context per thread: vLLM runs a worker's steps on one thread, and a
second engine thread must not see another's decision.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from da_lab.core.record import Metadata, RequestStep


@dataclass
class HookStep:
    """What the hook logged for one metadata build with DA requests (the Lab's record of the
    engine step is assembled from these)."""
    index: int                               # the hook's step index (Tracker.step_index)
    hook_us: float                           # microseconds the decision took
    requests: list[RequestStep] = field(default_factory=list)
    metadata: Metadata | None = None         # set by the builder wrapper (rows recorded)
    built: bool = False                      # the builder wrapper saw this step

    def to_json(self) -> dict:
        return {"step": self.index, "hook_us": self.hook_us,
                "requests": [r.to_json() for r in self.requests]}


@dataclass
class StepContext:
    """The step being run on this thread."""
    decision: object = None          # state.Decision for the builder, or None: nothing to edit
    force: object = None             # the same decision for the sampler (director tokens)
    log: HookStep | None = None      # the step's log entry, None when the step had no DA request
    applied: tuple | None = None     # CUDA: (step, block-table address) already edited in place
    restore: tuple | None = None     # CUDA: (seq_lens, rows, saved values) to put back
    dummy: int = 0                   # inside a runner's dummy run (profile, warm-up, capture)

    def begin(self, decision, log: HookStep | None) -> None:
        self.decision = self.force = decision
        self.log = log

    def end_build(self) -> None:
        """The metadata is built: the builder must not see this decision again."""
        self.decision = None


_local = threading.local()


def current() -> StepContext:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = StepContext()
    return ctx
