"""One engine step as a value: what the engine returned and what the hook did in it.

The step driver (hook/driver.py) makes one `EngineStep` per engine step it runs, a server's
worker (hook/service.py) one per model step; `record()` builds the step's `StepRecord` once.
numpy only, like the rest of core: the hook's steps are carried as they are (each has
`.requests`, `.hook_us`, `.metadata`), vLLM's outputs as `EngineOutput`s.
"""

from __future__ import annotations

from dataclasses import dataclass

from da_lab.core.record import RequestStep, StepRecord


@dataclass(frozen=True)
class EngineOutput:
    """What one request produced in one engine step (vLLM's RequestOutput, read once here)."""
    req: str                                  # the request id the engine was given
    token_ids: tuple[int, ...]
    text: str
    finished: bool
    logprobs: tuple | None = None             # per new token {token id: Logprob}, when asked
    num_cached_tokens: int | None = None      # prompt tokens the prefix cache served


@dataclass(frozen=True, eq=False)
class EngineStep:
    """One engine step: what the engine returned and what the hook did in it."""
    index: int                                # the driver's engine step index
    wall_s: float                             # seconds engine.step() took
    outputs: tuple[EngineOutput, ...] = ()
    steps: tuple = ()                         # the hook's settled steps (hook/step.Step)
    warnings: tuple[dict, ...] = ()           # hook warnings raised since the last step

    @property
    def requests(self) -> list[RequestStep]:
        """The hook's RequestSteps of the step (no outputs on them: see `record`)."""
        return [r for s in self.steps for r in s.requests]

    @property
    def finished(self) -> list[str]:
        return [o.req for o in self.outputs if o.finished]

    @property
    def hook_us(self) -> float:
        return sum(s.hook_us for s in self.steps)

    def record(self, added=(), kv: dict | None = None) -> StepRecord:
        """The step's StepRecord (core/record.py), built once: the hook's RequestSteps with the
        engine's outputs, the requests `added` before it, the KV map's changes `kv`."""
        return StepRecord.build(self.index, self.wall_s, self.steps,
                                [(o.req, o.token_ids, o.text, o.finished) for o in self.outputs],
                                added, self.warnings, kv=kv)
