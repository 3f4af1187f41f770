"""The DA hook inside a serving engine (`vllm serve`): the worker's side of da_lab's server.

A Lab steps its engine and reads the tracker after every step. A server has no such driver:
the API server, the engine core and the worker (where the hook runs) are separate processes.
So in serve mode the hook looks after itself, after every model step
(`Session.end_step`, from the runners' `execute_model` wrapper, calls `after_step`):
  - sampled tokens that have landed go to the tag machine; requests vLLM finished or aborted
    are forgotten, their last tokens fed first (a client that went away leaves no DA state);
  - the step's records are folded into the counters (counters.py), written to the trace when
    DA_LAB_TRACE names a file (trace.py), and dropped: nothing grows with the server's age.
The API server reaches this process through `rpc` (installed as the worker method
`da_lab_rpc`, called with `engine_client.collective_rpc`, the path vLLM's endpoint-plugin
contract prescribes): "status", "request" (one request's DA stats), "state", "counters".

Serve mode is on when DA_LAB_SERVE=1 is in the environment (`da-lab serve` sets it; then a
model the hook refuses still starts, DA stays off, and DA requests get HTTP 400 at the edge),
or from the API server's first "status" call.
"""

from __future__ import annotations

import os

from da_lab.hook import faults
from da_lab.hook.counters import Counters, request_stats

SERVE_ENV = "DA_LAB_SERVE"
TRACE_ENV = "DA_LAB_TRACE"


def serving_env() -> bool:
    """DA_LAB_SERVE=1, in an engine whose core runs in its own process (every API server's
    does); an in-process engine is a Lab's, which reads the tracker itself."""
    return os.environ.get(SERVE_ENV, "") == "1" and \
        os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"


class Service:
    """The worker's side of a server; one per session (`Session.service`), which it is
    handed: the request book, the steps, the warnings are the session's."""

    def __init__(self, session) -> None:
        self.session = session
        self.on = False
        self.counters = Counters()
        self.trace = None                 # trace.ServerTrace when DA_LAB_TRACE is set
        self.trace_path: str | None = None
        self.rank = 0
        self._states: dict = {}           # req_id -> RequestState at the last step's end

    def start(self) -> None:
        """Serve mode: step records only when traced (staged rows cost time at long contexts)."""
        if self.on:
            return
        self.on = True
        self.session.new_warnings()       # only what is raised from now on is counted
        self.trace_path = os.environ.get(TRACE_ENV) or None
        self.session.configure(record_rows=bool(self.trace_path))

    # ---- after every model step ----------------------------------------------------------
    def after_step(self, scheduler_output, view=None) -> None:
        """Never raises: whatever goes wrong here is a warning event, and the engine steps on
        (a failure here once ended every request of a server). `view`: what a trace reads off
        the runner (runners/common.RunnerView)."""
        try:
            self._after_step(scheduler_output, view)
        except Exception as e:   # noqa: BLE001 - the engine must outlive a bug in the hook
            self.session.book.hook_error("after_step", e)

    def _after_step(self, scheduler_output, view) -> None:
        s, b = self.session, self.session.book
        finished = scheduler_output.finished_req_ids or () if scheduler_output else ()
        if not (b.requests or s.steps or self._states or b.refused or b.pending):
            return
        # By vLLM's request ids: two requests may share a da_id.
        report = s.after_step([r for r in finished if r in b.requests or r in b.refused],
                              engine_ids=True)
        for log in report.steps:
            self.counters.add_step(log)
        live = b.requests
        self.counters.requests += sum(1 for r in live if r not in self._states)
        for req_id, st in self._states.items():
            if req_id not in live:                  # ended since the last step: feed its rest
                self.counters.add_events(b.feed_rest(st))
        self._states = dict(live)
        # After the rest is fed: a run that ended gets its last tokens in the trace.
        if self.trace_path and (report.steps or self.trace is not None and self.trace.ending()):
            self._trace(report.steps, report.warnings, view)
        self.counters.add_warnings(report.warnings + s.new_warnings())

    def _trace(self, logs, warnings, view) -> None:
        """Rank 0 writes the trace (every rank sees the same requests); opened at the first
        step with DA requests, when the engine's parts are known. Each record is an
        `EngineStep` as a Lab's step driver makes (hook/driver.py), built by the trace from
        this model step's hook steps and the tokens its runs read (hook/trace.py)."""
        if self.trace is None:
            from da_lab.hook.trace import ServerTrace, tp_rank

            if tp_rank() != 0:
                self.trace_path = None
                return
            self.trace = ServerTrace(self.trace_path, self.session.book)
        self.trace.write(logs, warnings, view)

    # ---- what the API server asks ----------------------------------------------------------
    def rpc(self, op: str, *args):
        if op == "status":
            self.start()
            return self.status()
        if op == "request":
            faults.check("rpc", (args[0],))
            return self.request(str(args[0]))
        if op == "state":
            return self.state()
        if op == "counters":
            return dict(self.counters.snapshot(), **self.state())
        raise ValueError(f"da_lab_rpc: unknown operation {op!r}")

    def status(self) -> dict:
        b, f = self.session.book, self.session.facts
        return {"serve": self.on, "disabled": b.disabled, "runner": f.runner_class,
                "backend": f.backend, "device": f.device, "vocab_size": f.vocab_size,
                "rank": self.rank, "trace": None if self.trace is None else str(self.trace.path)}

    def request(self, da_id: str) -> dict | None:
        """The stats of request `da_id`, with every token it sampled read by the tag machine
        (a client asks as soon as its stream ends, before the engine's next step)."""
        t = self.session.book
        t.drain(wait=True)
        for st in t.requests.values():
            if st.da_id == da_id:
                self.counters.add_events(t.feed_rest(st))
                return request_stats(st, live=True)
        st = t.finished.get(da_id)
        if st is None:
            refused = [w for w in t.warnings if w.get("req") == da_id
                       and w.get("kind") == "da_refused"]
            return {"id": da_id, "refused": refused[-1]["detail"]} if refused else None
        self.counters.add_events(t.feed_rest(st))
        return request_stats(st, live=False)

    def state(self) -> dict:
        t = self.session.book
        return {"live_requests": len(t.requests), "refused_live": len(t.refused),
                "pending_outputs": len(t.pending), "unconsumed_steps": len(self.session.steps),
                "live_scripts": len(t.scripts), "finished_kept": len(t.finished),
                "rank": self.rank}


def install(service: Service) -> None:
    """Give vLLM's workers the method the API server calls (`collective_rpc("da_lab_rpc")`),
    and start serve mode where the environment asks for it."""
    from vllm.v1.worker.worker_base import WorkerBase

    if not hasattr(WorkerBase, "da_lab_rpc"):
        def da_lab_rpc(worker, op: str, *args):
            service.rank = getattr(worker, "rank", 0) or 0
            try:
                return service.rpc(op, *args)
            except Exception as e:   # noqa: BLE001 - an answer, never a failed engine call
                service.session.book.hook_error(f"da_lab_rpc({op})", e)
                return {"error": f"da_lab_rpc({op}): {type(e).__name__}: {e}"}

        WorkerBase.da_lab_rpc = da_lab_rpc
    if serving_env():
        service.start()
