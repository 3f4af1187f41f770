"""The one engine-step loop: every caller that steps an engine in this process steps it here.

    driver = StepDriver(engine)                 # vLLM's LLMEngine (LLM.llm_engine)
    step = driver.step()                        # one engine step -> one EngineStep
    rec = step.record(added, kv)                # its StepRecord, when the caller records

`StepDriver.step` runs `engine.step()`, hands the requests that finished to the hook
(`SESSION.after_step`: the sampled tokens into the tag machines, the hook's steps settled, the
ended requests closed, the new warnings) and returns one `EngineStep` (core/engine_step.py), a
frozen value: the engine's outputs (`engine_output`, the only place vLLM's RequestOutputs are
read), the hook's settled steps and warnings. The Lab, the eval, the bench (and its recorder)
and teacher forcing call it; a stock engine (no plugin) is driven the same way with
`session=None`. A server's engine is stepped by vLLM's own loop: its worker's service
(service.py) makes the same `EngineStep` after each model step from the same after-step report,
and its trace (trace.py) writes `EngineStep.record`.
"""

from __future__ import annotations

import time

from da_lab.core.engine_step import EngineOutput, EngineStep
from da_lab.hook.session import SESSION
from da_lab.hook.step import StepReport

__all__ = ["StepDriver", "EngineStep", "EngineOutput", "engine_output"]


def engine_output(out) -> EngineOutput:
    """One of vLLM's RequestOutputs, read once (versions/needs_engine.py declares the reads)."""
    c = out.outputs[0] if out.outputs else None
    return EngineOutput(out.request_id, tuple(c.token_ids) if c is not None else (),
                        c.text if c is not None else "", bool(out.finished),
                        tuple(c.logprobs) if c is not None and c.logprobs else None,
                        getattr(out, "num_cached_tokens", None))




class StepDriver:
    """Steps one engine, one `EngineStep` per step. `session`: the hook's (None for a stock
    engine: no plugin, no hook); `index`: the first step's index."""

    def __init__(self, engine, session=SESSION, index: int = 0) -> None:
        self.engine = engine
        self.session = session
        self.index = index

    def step(self) -> EngineStep:
        t0 = time.perf_counter()
        outs = self.engine.step()
        wall = time.perf_counter() - t0
        outputs = tuple(engine_output(o) for o in outs)
        ended = [o.req for o in outputs if o.finished]
        report = self.session.after_step(ended) if self.session is not None else StepReport()
        step = EngineStep(self.index, wall, outputs, tuple(report.steps), tuple(report.warnings))
        self.index += 1
        return step

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished_requests()

    def until_done(self):
        """Steps until the engine has no unfinished request, one EngineStep each."""
        while self.has_unfinished():
            yield self.step()
