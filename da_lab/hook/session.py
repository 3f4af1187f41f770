"""The hook's session: its only module-level state (`SESSION`), the way nano-vllm has one
`Context`. It holds the request book (book.py), what the runner told us at start (facts.py),
the steps not yet reported, and per thread the step being run. Two kinds of caller use it:

The runner wrappers (runners/), once per model-runner step:
    step = SESSION.begin_step(decide, ...)   # drain sampled tokens, advance, Step.begin
    cm = SESSION.build(common_prefix_len, cm) # the builder: Step.apply, Step.note_built
    SESSION.end_build()                       # v1: the builder must not edit again this step
    SESSION.after_sampling(sampled)           # Step.after_sampling
    SESSION.end_step(scheduler_output, ...)   # Step.finish; serve mode: the service's turn

Code that drives an engine in this process (the Lab, the eval, the bench, the TP check):
    from da_lab.hook.session import SESSION as hook
    hook.configure(record_rows=True)
    outs = engine.step()
    report = hook.after_step()          # StepReport: what the hook did in that engine step
    hook.end(request_id)                # the caller saw it finish, or aborted it

`after_step` is the after-step sequence, once and in order: hand the step's sampled tokens to
the tag machines (`RequestBook.drain`: under async scheduling one step late, the same on every
TP rank), settle the steps (`Step.settle`: CUDA copies that were in flight), take them, end
the requests that ended, and report the warnings raised since the last report. What the hook
decided travels in those steps: per request a `core.record.RequestStep` with its kept logical
blocks (`kept_logical`, the output of `core.mask.kept_blocks(directive, layout, seq_len,
query_len)`) and the row the kernel read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from da_lab.core.record import RequestStep
from da_lab.hook import faults, grouped
from da_lab.hook.book import RequestBook
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.facts import EngineFacts
from da_lab.hook.request import RequestState
from da_lab.hook.service import Service, serving_env
from da_lab.hook.step import Step


@dataclass
class StepReport:
    """What the hook did in one engine step."""
    steps: list[Step] = field(default_factory=list)       # one per metadata build (usually 1)
    warnings: list[dict] = field(default_factory=list)    # raised since the last report

    @property
    def requests(self) -> list[RequestStep]:
        return [r for h in self.steps for r in h.requests]

    @property
    def hook_us(self) -> float:
        return sum(h.hook_us for h in self.steps)


class _Running(threading.local):
    """The step being run on this thread: vLLM runs a worker's steps on one thread, and a
    second engine thread must not see another's step."""
    step: Step | None = None        # the builder's: None when the step has no DA request
    sampling: Step | None = None    # the sampler's (director tokens, the tokens' way home)
    dummy: int = 0                  # inside a runner's dummy run (profile, warm-up, capture)


class Session:
    def __init__(self) -> None:
        self.book = RequestBook()
        self.record_rows = True          # keep staged rows + metadata in step records
        self.steps: list[Step] = []      # steps with DA requests not reported yet
        self.installed = False           # register() patched this process
        # CommonAttentionMetadata field -> (treatment, why), for the installed release
        # (runners/common.install, from versions/cm_fields.py).
        self.cm_fields: dict[str, tuple[str, str]] = {}
        # decide_rewrite: the decision and bookkeeping; apply: the builder-side edit of the
        # metadata; detok_tags: incremental detokenize + tag state machine.
        self.timing = {"decide_rewrite_s": 0.0, "apply_s": 0.0, "detok_tags_s": 0.0,
                       "requests": 0}
        self._thread = _Running()
        self.service = Service(self)     # serve mode (`vllm serve`): service.py
        self._seen = self.book.warnings_total      # warnings already reported
        # The grouped read (hook/grouped.py): which rows may join a group (None: off), why this
        # engine can't run it (None: it can), its cost model, and the recent steps' plans.
        self.grouped_read = grouped.flag_from_env()
        self.grouped_unavailable: str | None = "no engine has started"
        self.grouped_cost = None
        self.grouped_plan = None          # the last step's plan, carried on while it holds
        self.grouped_history: deque[dict] = deque(maxlen=1024)

    # ---- the engine's start ----------------------------------------------------------------
    @property
    def facts(self) -> EngineFacts:
        return self.book.facts

    def learn(self, facts: EngineFacts) -> None:
        """What the runner told us (runners/common.note_runner), once per engine."""
        self.book.learn(facts)

    def note_installed(self) -> None:
        """register() patched vLLM in this process."""
        self.installed = True

    def use_fields(self, cm_fields: dict[str, tuple[str, str]]) -> None:
        self.cm_fields = dict(cm_fields)

    def refuse_model(self, err: DAUnsupported) -> None:
        """At engine start: a Lab (or any non-serving engine) refuses the model; a server keeps
        serving plain requests and says why DA is off."""
        if not serving_env():
            raise err
        self.book.disabled = str(err)

    # ---- each model-runner step (the runner wrappers) --------------------------------------
    def begin_step(self, decide, *args) -> Step | None:
        """A model-runner step with real requests starts: hand the sampled tokens to the tag
        machines, advance the hook's step, let the runner's `decide(step, *args)` begin it, and
        make it this thread's step for the builder and sampler wrappers."""
        book = self.book
        try:
            # Before the step advances: drain reads the tokens of steps up to token_lag before
            # the one that starts (after it, it would wait on the step still on the GPU).
            book.drain()
        except Exception as e:   # noqa: BLE001 - a hook bug turns DA off, never the engine
            book.hook_error("reading the sampled tokens", e)
        step = Step(book.begin_step(), book, self.record_rows)
        try:
            decide(step, *args)
        except Exception as e:   # noqa: BLE001 - a hook bug turns DA off, never the engine
            book.hook_error("the step's decision", e)
            step.requests = []
        if not step.requests:
            step = None
        else:
            self.steps.append(step)
            self.timing["decide_rewrite_s"] += step.decide_s
            self.timing["detok_tags_s"] += step.detok_s
            self.timing["requests"] += len(step.requests)
        self._thread.step = self._thread.sampling = step
        return step

    def build(self, common_prefix_len: int, cm):
        """The builder wrapper's part: the metadata the builder gets. A failure here leaves the
        step unmasked (its requests run plain from now on); the engine lives."""
        step = self._thread.step
        if step is None:
            return cm
        t0 = time.perf_counter()
        try:
            faults.check("build", (r.req for r in step.requests))
            out = cm
            if step.editing and step.masks:
                if common_prefix_len:
                    raise DAUnsupported("cascade attention (a shared prefix across the batch) "
                                        "cannot be combined with DA masks; start the engine "
                                        "with disable_cascade_attn=True")
                out = step.apply(cm, self.cm_fields)
            step.note_built(out, self.facts)
            self.timing["apply_s"] += time.perf_counter() - t0
            return out
        except Exception as e:   # noqa: BLE001 - the step runs unmasked; the engine lives
            self.book.hook_error("the metadata edit", e, step.reqs if step.editing else None)
            step.finish()
            self._thread.step = None
            return cm

    def note_grouped(self, unavailable: str | None, cost) -> None:
        """What the grouped read can do in this engine (runners/common.note_runner)."""
        self.grouped_unavailable, self.grouped_cost = unavailable, cost
        self.grouped_plan = None

    def attach_grouped(self, meta, cm):
        """The builder returned `meta` for this step's edited `cm`: with the flag on, the step's
        plan; if the rule groups it, the plan rides on `meta` to every layer's forward. A
        failure here runs the step plain, with a warning. Never raises."""
        step = self._thread.step
        if self.grouped_read is None or step is None or not step.editing:
            return meta
        if self.grouped_unavailable:              # said once per engine, at its first step
            last = self.grouped_history[-1] if self.grouped_history else {}
            if last.get("refused") != self.grouped_unavailable:
                self._grouped_refused(f"unavailable in this engine: {self.grouped_unavailable}")
            self.grouped_history.append({"grouped": False, "refused": self.grouped_unavailable})
            return meta
        try:
            t, self.grouped_plan = grouped.attach(meta, cm, step, self.grouped_read,
                                                  self.grouped_cost, self.grouped_plan)
            if t is not None:
                t.on_refused = self._grouped_refused
        except Exception as e:   # noqa: BLE001 - the plain path is always right
            self.grouped_plan = None
            step.grouping = {"grouped": False, "refused": f"{type(e).__name__}: {e}"}
            self._grouped_refused(step.grouping["refused"])
        if step.grouping is not None:
            self.grouped_history.append(step.grouping)
        return meta

    def _grouped_refused(self, why: str) -> None:
        book = self.book
        book.warn({"kind": "grouped_read_refused", "req": None, "step": book.step_index,
                   "text": "", "detail": f"the step runs the plain path: {why}"})

    def dummy_run(self, delta: int) -> None:
        """A runner's dummy run (profile, warm-up, graph capture) starts (+1) or ends (-1):
        its made-up rows are no step of the hook's."""
        self._thread.dummy += delta

    def in_dummy_run(self) -> bool:
        return bool(self._thread.dummy)

    def editing(self) -> bool:
        """The builder is about to edit this step's metadata (update_block_table refuses)."""
        step = self._thread.step
        return step is not None and step.editing and step.masks

    def end_build(self) -> None:
        """The metadata is built: the builder must not edit again this step."""
        if self._thread.step is not None:
            self._thread.step.editing = False

    def after_sampling(self, sampled) -> None:
        """Right after the sampler (Step.after_sampling); once per step."""
        step, self._thread.sampling = self._thread.sampling, None
        if step is None:
            return
        try:
            step.after_sampling(sampled)
        except Exception as e:   # noqa: BLE001 - only the step's DA requests pay
            self.book.hook_error("after sampling", e, step.reqs)

    def end_step(self, scheduler_output=None, view=None) -> None:
        """The step's forward is queued: the runner's seq_lens are put back; in a server the
        hook then looks after its own records (service.py)."""
        step, self._thread.step = self._thread.step, None
        if step is not None:
            step.finish()
        if self.service.on and not self._thread.dummy:
            self.service.after_step(scheduler_output, view)

    # ---- configuration and what runs (the driver) ------------------------------------------
    def configure(self, *, record_rows: bool | None = None, keep_finished: int | None = None,
                  keep_warnings: int | None = None, grouped_read: str | None = "keep") -> None:
        """record_rows: keep the staged rows and the metadata bundle in each record (what traces
        and diagrams need; costly at long contexts). keep_*: the bounded histories' sizes.
        grouped_read: None (off), "focus" (masked rows may share reads) or "all" (every DA
        row: GLOBAL rows too); hook/grouped.py."""
        if grouped_read != "keep":
            self.grouped_read = grouped.check_flag(grouped_read)
        if record_rows is not None:
            self.record_rows = record_rows
        if keep_finished is not None:
            self.book.keep_finished = keep_finished
        if keep_warnings is not None:
            self.book.keep_warnings = keep_warnings

    @property
    def runner_class(self) -> str:
        return self.facts.runner_class

    @property
    def backend(self) -> str:
        return self.facts.backend

    @property
    def device(self) -> str:
        return self.facts.device

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary (director token ids must be below it); 0 before a start."""
        return self.facts.vocab_size

    @property
    def disabled(self) -> str | None:
        """Why DA is off in this engine (a model the hook refused), else None."""
        return self.book.disabled

    # ---- each engine step (the driver) -----------------------------------------------------
    def after_step(self, ended=(), *, engine_ids: bool = False) -> StepReport:
        """The after-step sequence (module docstring), then the requests that `ended` in the
        step are moved to the finished history, and the warnings raised until then reported.
        `ended`: the caller's request ids (da_ids), or vLLM's own with `engine_ids` (a
        server's worker, where da_ids may repeat). A request whose ending fails is refused
        with a warning; the others end as usual."""
        ended = list(ended)
        self.book.drain(wait=bool(ended))    # every queued token of a request that ended
        steps = self.take_steps()
        for ended_id in ended:
            if engine_ids:
                self.book.end([ended_id])
            else:
                self.book.end(self.book.ids_of(ended_id), da_id=ended_id)
        return StepReport(steps, self.new_warnings())

    def take_steps(self) -> list[Step]:
        """The steps not reported yet, settled (their records complete)."""
        for s in self.steps:
            s.settle()
        steps, self.steps = self.steps, []
        return steps

    def new_warnings(self) -> list[dict]:
        """Warnings raised since the last report (the kept ones: the history is bounded)."""
        out = self.book.new_warnings(self._seen)
        self._seen = self.book.warnings_total
        return out

    def discard_steps(self) -> None:
        """Forget the logs of steps the caller does not record (teacher forcing)."""
        self.take_steps()

    # ---- requests (the driver) -------------------------------------------------------------
    def steer(self, da_id: str, at: int, ids: list[int]) -> None:
        """The director writes `ids` into request `da_id`'s output from index `at` on."""
        self.book.steer(da_id, at, ids)

    def end(self, da_id: str) -> None:
        """The caller saw request `da_id` finish, or aborted it."""
        self.book.end(self.book.ids_of(da_id), da_id=da_id)

    def forget_script(self, da_id: str) -> None:
        """A reused request id starts without the steering of the request it names."""
        self.book.scripts.pop(da_id, None)

    def request_state(self, da_id: str) -> RequestState | None:
        """The hook's state of a request, running or among the last finished ones."""
        b = self.book
        for st in list(b.requests.values()) + list(b.finished.values()):
            if st.da_id == da_id:
                return st
        return None

    def running(self) -> list[RequestState]:
        return list(self.book.requests.values())

    def refused(self, da_id: str) -> bool:
        """Request `da_id` runs as plain attention: the hook refused its layout or script."""
        return da_id in self.book.refused.values()

    def entries(self) -> dict[str, int]:
        """Per-request entries that must be 0 whenever no request runs, and the bounded
        histories' overflow (the leak checks count these)."""
        b = self.book
        return {"tracker.requests": len(b.requests), "tracker.refused": len(b.refused),
                "tracker.pending_outputs": len(b.pending),
                "tracker.scripts": len(b.scripts),
                "tracker.finished_over_bound": max(0, len(b.finished) - b.keep_finished),
                "tracker.warnings_over_bound": max(0, len(b.warnings) - b.keep_warnings)}

    def rank_log(self) -> dict:
        """This worker's whole account, left as it is (the tensor-parallel check compares
        ranks): who runs, the steps not yet reported, every DA request's events, mask history
        and sampled tokens (also those still on their way to the tag machine), the warnings."""
        b = self.book
        for s in self.steps:     # step records whose host copies were in flight (CUDA)
            s.settle()
        pending: dict[str, list[int]] = {}
        for _, rows, host, ev in b.pending:
            if ev is not None:
                ev.synchronize()
            toks = host.tolist()
            for req_id, i in rows:
                pending.setdefault(req_id, []).append(int(toks[i]))
        reqs = {st.da_id: {
            "events": st.events,
            "mask_history": [[int(a), int(c), None if k is None else [int(x) for x in k]]
                             for a, c, k in st.mask_history],
            "captured": [int(x) for x in st.captured] + pending.get(st.req_id, []),
            "text": st.text} for st in list(b.finished.values()) + list(b.requests.values())}
        f = self.facts
        return {"hook_installed": self.installed, "runner_class": f.runner_class,
                "backend": f.backend, "device": f.device,
                "steps": [s.to_json() for s in self.steps], "requests": reqs,
                "warnings": b.warnings}

    def clear(self) -> None:
        """The engine shut down: forget every request."""
        self.book.clear()
        self.steps.clear()
        self._seen = self.book.warnings_total


SESSION = Session()
