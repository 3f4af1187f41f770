"""The DA hook inside a serving engine (`vllm serve`): the worker's side of da_lab's server.

A Lab steps its engine and reads the tracker after every step. A server has no such driver:
the API server, the engine core and the worker (where the hook runs) are separate processes.
So in serve mode the hook looks after itself, after every model step
(`runners/common.wrap_execute_model` calls `after_step`):
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

from da_lab.hook import faults, sampled
from da_lab.hook.counters import Counters, request_stats
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.session import SESSION
from da_lab.hook.state import TRACKER

SERVE_ENV = "DA_LAB_SERVE"
TRACE_ENV = "DA_LAB_TRACE"


def serving_env() -> bool:
    """DA_LAB_SERVE=1, in an engine whose core runs in its own process (every API server's
    does); an in-process engine is a Lab's, which reads the tracker itself."""
    return os.environ.get(SERVE_ENV, "") == "1" and \
        os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"


class Service:
    def __init__(self) -> None:
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
        SESSION.new_warnings()            # only what is raised from now on is counted
        self.trace_path = os.environ.get(TRACE_ENV) or None
        TRACKER.record_rows = bool(self.trace_path)

    def refuse_or_raise(self, err: DAUnsupported) -> None:
        """At engine start: a Lab (or any non-serving engine) refuses the model; a server keeps
        serving plain requests and says why DA is off."""
        if not serving_env():
            raise err
        TRACKER.disabled = str(err)

    # ---- after every model step ----------------------------------------------------------
    def after_step(self, scheduler_output, runner=None) -> None:
        """Never raises: whatever goes wrong here is a warning event, and the engine steps on
        (a failure here once ended every request of a server)."""
        try:
            self._after_step(scheduler_output, runner)
        except Exception as e:   # noqa: BLE001 - the engine must outlive a bug in the hook
            TRACKER.hook_error("after_step", e)

    def _after_step(self, scheduler_output, runner) -> None:
        t = TRACKER
        finished = getattr(scheduler_output, "finished_req_ids", None) or ()
        if not (t.requests or t.steps or self._states or t.refused or t.pending_outputs):
            return
        # By vLLM's request ids: two requests may share a da_id.
        report = SESSION.after_step([r for r in finished if r in t.requests or r in t.refused],
                                    engine_ids=True)
        for log in report.steps:
            self.counters.add_step(log)
        if self.trace_path and report.steps:
            self._trace(report.steps, report.warnings, runner)
        live = t.requests
        self.counters.requests += sum(1 for r in live if r not in self._states)
        for req_id, st in self._states.items():
            if req_id not in live:                  # ended since the last step: feed its rest
                self.counters.add_events(self.feed_rest(st))
        self._states = dict(live)
        self.counters.add_warnings(report.warnings + SESSION.new_warnings())

    def _trace(self, logs, warnings, runner) -> None:
        """Rank 0 writes the trace (every rank sees the same requests); opened at the first
        step with DA requests, when the engine's parts are known."""
        if self.trace is None:
            from da_lab.hook.trace import ServerTrace, tp_rank

            if tp_rank() != 0:
                self.trace_path = None
                return
            self.trace = ServerTrace(self.trace_path)
        self.trace.write(logs, warnings, runner)

    @staticmethod
    def feed_rest(st) -> list[dict]:
        """Feed a request's sampled tokens the tag machine has not read yet (the last ones of a
        request that ended); returns the events they raised."""
        n = len(st.events)
        if len(st.captured) > st.n_seen:
            TRACKER.feed(st, st.captured)
        return st.events[n:]

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
        t = TRACKER
        return {"serve": self.on, "disabled": t.disabled, "runner": t.runner_class,
                "backend": t.backend, "device": t.device, "vocab_size": t.model_vocab_size,
                "rank": self.rank, "trace": None if self.trace is None else str(self.trace.path)}

    def request(self, da_id: str) -> dict | None:
        """The stats of request `da_id`, with every token it sampled read by the tag machine
        (a client asks as soon as its stream ends, before the engine's next step)."""
        t = TRACKER
        sampled.drain(wait=True)
        for st in t.requests.values():
            if st.da_id == da_id:
                self.counters.add_events(self.feed_rest(st))
                return request_stats(st, live=True)
        st = t.finished.get(da_id)
        if st is None:
            refused = [w for w in t.warnings if w.get("req") == da_id
                       and w.get("kind") == "da_refused"]
            return {"id": da_id, "refused": refused[-1]["detail"]} if refused else None
        self.counters.add_events(self.feed_rest(st))
        return request_stats(st, live=False)

    def state(self) -> dict:
        t = TRACKER
        return {"live_requests": len(t.requests), "refused_live": len(t.refused),
                "pending_outputs": len(t.pending_outputs), "unconsumed_steps": len(t.steps),
                "live_scripts": len(t.scripts), "finished_kept": len(t.finished),
                "rank": self.rank}


SERVICE = Service()


def install() -> None:
    """Give vLLM's workers the method the API server calls (`collective_rpc("da_lab_rpc")`),
    and start serve mode where the environment asks for it."""
    from vllm.v1.worker.worker_base import WorkerBase

    if not hasattr(WorkerBase, "da_lab_rpc"):
        def da_lab_rpc(worker, op: str, *args):
            SERVICE.rank = getattr(worker, "rank", 0) or 0
            try:
                return SERVICE.rpc(op, *args)
            except Exception as e:   # noqa: BLE001 - an answer, never a failed engine call
                TRACKER.hook_error(f"da_lab_rpc({op})", e)
                return {"error": f"da_lab_rpc({op}): {type(e).__name__}: {e}"}

        WorkerBase.da_lab_rpc = da_lab_rpc
    if serving_env():
        SERVICE.start()
