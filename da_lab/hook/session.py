"""The one door to the DA hook for code that drives an engine in this process: the Lab, the
eval, the bench and the server's worker method. Everything else in hook/ is the hook's own.

    from da_lab.hook.session import SESSION as hook
    hook.configure(record_rows=True)
    outs = engine.step()
    report = hook.after_step()          # StepReport: what the hook did in that engine step
    hook.end(request_id)                # the caller saw it finish, or aborted it

`after_step` is the after-step sequence, once and in order: hand the step's sampled tokens to
the tag machines (`drain`: under async scheduling one step late, the same on every TP rank),
fill in what the attention builder received (`settle`: CUDA copies that were in flight), take
the step's logs (one `HookStep` per metadata build) and the warnings raised since the last
report. What the hook decided travels in those logs, built once in the worker: per request a
`core.record.RequestStep` with its kept logical blocks (`kept_logical`, the output of
`core.mask.kept_blocks(directive, layout, seq_len, query_len)`) and the row the kernel read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from da_lab.core.record import RequestStep
from da_lab.hook import sampled
from da_lab.hook.context import HookStep
from da_lab.hook.request import RequestState
from da_lab.hook.state import TRACKER, Tracker


@dataclass
class StepReport:
    """What the hook did in one engine step."""
    steps: list[HookStep] = field(default_factory=list)   # one per metadata build (usually 1)
    warnings: list[dict] = field(default_factory=list)    # raised since the last report

    @property
    def requests(self) -> list[RequestStep]:
        return [r for h in self.steps for r in h.requests]

    @property
    def hook_us(self) -> float:
        return sum(h.hook_us for h in self.steps)


class Session:
    def __init__(self, tracker: Tracker) -> None:
        self._t = tracker
        self._seen = tracker.warnings_total      # warnings already reported

    # ---- configuration and what runs --------------------------------------------------------
    def configure(self, *, record_rows: bool | None = None, keep_finished: int | None = None,
                  keep_warnings: int | None = None) -> None:
        """record_rows: keep the staged rows and the metadata bundle in each record (what traces
        and diagrams need; costly at long contexts). keep_*: the bounded histories' sizes."""
        if record_rows is not None:
            self._t.record_rows = record_rows
        if keep_finished is not None:
            self._t.keep_finished = keep_finished
        if keep_warnings is not None:
            self._t.keep_warnings = keep_warnings

    @property
    def runner_class(self) -> str:
        return self._t.runner_class

    @property
    def backend(self) -> str:
        return self._t.backend

    @property
    def device(self) -> str:
        return self._t.device

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary (director token ids must be below it); 0 before a start."""
        return self._t.model_vocab_size

    @property
    def disabled(self) -> str | None:
        """Why DA is off in this engine (a model the hook refused), else None."""
        return self._t.disabled

    @property
    def timing(self) -> dict:
        """Seconds the hook spent deciding, applying and detokenizing, and requests seen."""
        return self._t.timing

    # ---- each engine step --------------------------------------------------------------------
    def after_step(self, ended=(), *, engine_ids: bool = False) -> StepReport:
        """The after-step sequence (module docstring), then the requests that `ended` in the
        step are moved to the finished history, and the warnings raised until then reported.
        `ended`: the caller's request ids (da_ids), or vLLM's own with `engine_ids` (a
        server's worker, where da_ids may repeat). A request whose ending fails is refused
        with a warning; the others end as usual."""
        ended = list(ended)
        sampled.drain(wait=bool(ended))    # every queued token of a request that ended
        steps = self._t.reset_log()
        for ended_id in ended:
            if engine_ids:
                st = self._t.requests.get(ended_id)
                self._t.end_guarded(st.da_id if st else None, [ended_id],
                                    lambda r=ended_id: self._t.end_request(r))
            else:
                known = self.request_state(ended_id) is not None
                req_ids = [r for r, s in self._t.requests.items() if s.da_id == ended_id]
                self._t.end_guarded(ended_id if known else None, req_ids,
                                    lambda d=ended_id: self._t.end(d))
        return StepReport(steps, self.new_warnings())

    def new_warnings(self) -> list[dict]:
        """Warnings raised since the last report (the kept ones: the history is bounded)."""
        out = self._t.new_warnings(self._seen)
        self._seen = self._t.warnings_total
        return out

    def discard_steps(self) -> None:
        """Forget the logs of steps the caller does not record (teacher forcing)."""
        self._t.reset_log()

    # ---- requests ----------------------------------------------------------------------------
    def steer(self, da_id: str, at: int, ids: list[int]) -> None:
        """The director writes `ids` into request `da_id`'s output from index `at` on."""
        self._t.steer(da_id, at, ids)

    def end(self, da_id: str) -> None:
        """The caller saw request `da_id` finish, or aborted it."""
        self._t.end(da_id)

    def end_request(self, req_id: str) -> None:
        """vLLM ended engine request `req_id` (the server's worker, where da_ids may repeat)."""
        self._t.end_request(req_id)

    def forget_script(self, da_id: str) -> None:
        """A reused request id starts without the steering of the request it names."""
        self._t.end_script(da_id)

    def request_state(self, da_id: str) -> RequestState | None:
        """The hook's state of a request, running or among the last finished ones."""
        for st in list(self._t.requests.values()) + list(self._t.finished.values()):
            if st.da_id == da_id:
                return st
        return None

    def running(self) -> list[RequestState]:
        return list(self._t.requests.values())

    def refused(self, da_id: str) -> bool:
        """Request `da_id` runs as plain attention: the hook refused its layout or script."""
        return da_id in self._t.refused.values()

    def entries(self) -> dict[str, int]:
        """Per-request entries that must be 0 whenever no request runs, and the bounded
        histories' overflow (the leak checks count these)."""
        t = self._t
        return {"tracker.requests": len(t.requests), "tracker.refused": len(t.refused),
                "tracker.pending_outputs": len(t.pending_outputs),
                "tracker.scripts": len(t.scripts),
                "tracker.finished_over_bound": max(0, len(t.finished) - t.keep_finished),
                "tracker.warnings_over_bound": max(0, len(t.warnings) - t.keep_warnings)}

    def rank_log(self) -> dict:
        """This worker's whole account, left as it is (the tensor-parallel check compares
        ranks): who runs, the steps not yet reported, every DA request's events, mask history
        and sampled tokens (also those still on their way to the tag machine), the warnings."""
        import da_lab.hook as hook_pkg

        t = self._t
        t.settle()        # step records whose host copies were in flight (CUDA)
        pending: dict[str, list[int]] = {}
        for _, rows, host, ev in t.pending_outputs:
            if ev is not None:
                ev.synchronize()
            toks = host.tolist()
            for req_id, i in rows:
                pending.setdefault(req_id, []).append(int(toks[i]))
        reqs = {st.da_id: {
            "events": st.events,
            "mask_history": [[int(a), int(b), None if k is None else [int(x) for x in k]]
                             for a, b, k in st.mask_history],
            "captured": [int(x) for x in st.captured] + pending.get(st.req_id, []),
            "text": st.text} for st in list(t.finished.values()) + list(t.requests.values())}
        return {"hook_installed": hook_pkg._installed, "runner_class": t.runner_class,
                "backend": t.backend, "device": t.device,
                "steps": [s.to_json() for s in t.steps], "requests": reqs,
                "warnings": t.warnings}

    def clear(self) -> None:
        """The engine shut down: forget every request."""
        self._t.clear()
        self._seen = self._t.warnings_total


SESSION = Session(TRACKER)
