"""The hook's session: its only module-level state (`SESSION`), the way nano-vllm has one
`Context`. It holds the request book (book.py), what the runner told us at start (facts.py),
the steps not yet reported, and per thread the step being run. Two kinds of caller use it:

The runner wrappers (runners/), once per model-runner step:
    SESSION.begin_step(batch)                 # drain sampled tokens, advance the book, plan
    cm = SESSION.build(common_prefix_len, cm) # the builder: Step.build (the kernel-row edit)
    SESSION.end_build()                       # v1: the builder must not edit again this step
    SESSION.after_sampling(sampled)           # Step.after_sampling
    SESSION.end_step(scheduler_output, ...)   # Step.finish; serve mode: the service's turn

Code that drives an engine in this process (the Lab, the eval, the bench, teacher forcing,
the TP check) steps it through the one step driver (hook/driver.py), which calls
    report = SESSION.after_step(ended)  # StepReport: what the hook did in that engine step
and uses SESSION for the rest:
    SESSION.configure(record_rows=True)
    SESSION.end(request_id)             # the caller saw it finish, or aborted it

Its broad `except Exception` catches (each says why) hold one rule: a bug in the hook turns DA
off for the requests it touched, with a `hook_error` warning, and the engine steps on — the
plugin runs inside every vLLM process of the environment. The test suite fails any test in
which one fires unless the test says it expects it (tests/conftest.py), so a bug never passes
as "DA quietly off".

`after_step` is the after-step sequence, once and in order: hand the step's sampled tokens to
the tag machines (`RequestBook.drain`: under async scheduling one step late, the same on every
TP rank), settle the steps (`Step.settle`: CUDA copies that were in flight), take them, end
the requests that ended, and report the warnings raised since the last report. What the hook
decided travels in those steps: per request a `core.record.RequestStep` with its kept logical
blocks (`kept_logical`, the output of `core.mask.kept_blocks(directive, layout, seq_len,
query_len)`) and the row the kernel read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from da_lab.hook import account, grouped
from da_lab.hook.book import RequestBook
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.facts import EngineFacts
from da_lab.hook.plan import Batch, StepPlan, decide
from da_lab.hook.request import RequestState
from da_lab.hook.service import Service
from da_lab.hook.step import Step, StepReport

log = logging.getLogger("vllm.da_lab")


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
        self._layer_group: dict = {}     # layer name -> its KV-cache group (facts.GroupFacts)
        # The driver that runs this process's in-process engine (a Lab): vLLM keeps one.
        self.driver = None
        self._seen = self.book.warnings_total      # warnings already reported
        self.grouped = grouped.GroupedRead()   # the grouped read's state (hook/grouped.py)

    # ---- the engine's start ----------------------------------------------------------------
    @property
    def facts(self) -> EngineFacts:
        return self.book.facts

    def learn(self, facts: EngineFacts) -> None:
        """What the runner told us (runners/common.note_runner), once per engine."""
        self.book.learn(facts)
        self._layer_group = {layer: g for g in facts.groups for layer in g.layers}

    def note_installed(self) -> None:
        """register() patched vLLM in this process."""
        self.installed = True

    def use_fields(self, cm_fields: dict[str, tuple[str, str]]) -> None:
        self.cm_fields = dict(cm_fields)

    def refuse_model(self, err: DAUnsupported) -> None:
        """At engine start, the hook can't serve this engine: DA is off in it, and it says why.
        The engine runs on: the plugin is loaded into every vLLM process of the environment,
        so it must never stop one nobody asked for DA. DA requests are refused with the reason
        (`da_refused`; a server's edge answers 400), and the Lab refuses to start on it."""
        if self.book.disabled is None:
            log.warning("da_lab: DA is off in this engine: %s", err)
        self.book.disabled = str(err)

    # ---- each model-runner step (the runner wrappers) --------------------------------------
    def has_requests(self) -> bool:
        """The book holds a DA request (the runners skip reading a batch when none can be)."""
        return bool(self.book.requests)

    def tracks(self, req_id: str) -> bool:
        """Request `req_id` (vLLM's id) is one of the book's DA requests."""
        return req_id in self.book.requests

    def da_id_of(self, req_id: str) -> str | None:
        st = self.book.requests.get(req_id)
        return None if st is None else st.da_id

    def take_on(self, req_id: str, extra_args: dict, resumed=()) -> None:
        """A runner shows a request with a DA layout (the V2 runner, in add_requests): the book
        takes it on; `resumed`: the outputs a request resumed after preemption brings back."""
        self.book.track(req_id, extra_args, resumed=resumed)

    def hook_error(self, where: str, err: Exception, req_ids=None) -> None:
        """A runner adapter's part failed (book.hook_error: those requests run plain)."""
        self.book.hook_error(where, err, req_ids)

    def begin_step(self, read: Callable[..., Batch | None], *args, held=()) -> Step | None:
        """A model-runner step with real requests starts: the requests the runner no longer
        holds (`held`: the ids it holds) end, the sampled tokens go to the tag machines, the
        hook's step advances, the runner's `read(*args)` reads the step's batch (None when it
        can't hold a DA request), the book's requests are brought to it, the step's plan is
        made (hook/plan.decide) and its Step becomes this thread's, for the builder and
        sampler wrappers."""
        book = self.book
        try:
            # Before the step advances: drain reads the tokens of steps up to token_lag before
            # the one that starts (after it, it would wait on the step still on the GPU).
            book.drain()
        except Exception as e:   # noqa: BLE001 - a hook bug turns DA off, never the engine
            book.hook_error("reading the sampled tokens", e)
        try:
            # After the drain: a request that ended keeps the tokens it sampled last.
            book.forget_absent(held)
        except Exception as e:   # noqa: BLE001 - a hook bug turns DA off, never the engine
            book.hook_error("ending the requests the runner dropped", e)
        index = book.begin_step()
        step = None
        try:
            batch = read(*args)
        except Exception as e:   # noqa: BLE001 - a hook bug turns DA off, never the engine
            book.hook_error("reading the step's batch", e)
            batch = None
        if batch is not None:
            try:
                n_events, detok = book.advance(batch)
                plan, failed = decide(index, book, batch, self.record_rows, n_events, detok)
                book.commit(plan, failed)
            except Exception as e:   # noqa: BLE001 - a hook bug turns DA off, never the engine
                book.hook_error("the step's decision", e)
                plan = StepPlan(index)
            if plan.requests:
                step = Step(plan, self.record_rows, self.cm_fields, batch.staged)
                self.steps.append(step)
                self.timing["decide_rewrite_s"] += plan.decide_s
                self.timing["detok_tags_s"] += plan.detok_s
                self.timing["requests"] += len(plan.requests)
        self._thread.step = self._thread.sampling = step
        return step

    def _group(self, builder):
        """(the KV-cache group a builder serves, kernel blocks per KV block) or (None, 1)."""
        names = getattr(builder, "layer_names", None) or ()
        g = self._layer_group.get(names[0]) if names else None
        if g is None:
            return None, 1
        return g, max(1, g.block_size // builder.kv_cache_spec.block_size)

    def build(self, builder, common_prefix_len: int, cm):
        """The builder wrapper's part: the metadata `builder` gets. Only a global group's rows
        are edited; a sliding-window or state group's are read as vLLM builds them. A failure
        here leaves the step unmasked (its requests run plain from now on); the engine
        lives."""
        step = self._thread.step
        if step is None:
            return cm
        t0 = time.perf_counter()
        try:
            group, units = self._group(builder)
            if group is not None and not group.masked:
                return cm
            if step.editing and common_prefix_len:
                raise DAUnsupported("cascade attention (a shared prefix across the batch) "
                                    "cannot be combined with DA masks; start the engine "
                                    "with disable_cascade_attn=True")
            out = step.build(cm, self.facts, units)
            self.timing["apply_s"] += time.perf_counter() - t0
            return out
        except Exception as e:   # noqa: BLE001 - the step runs unmasked; the engine lives
            self.book.hook_error("the metadata edit", e, step.req_ids if step.editing else None)
            step.finish()
            self._thread.step = None
            return cm

    def reused_table(self, builder, block_table):
        """update_block_table: vLLM reuses one group's metadata for another group of the same
        kind with that group's block table; a global group's table gets the step's edit (the
        reused metadata's seq_lens are edited already)."""
        step = self._thread.step
        if step is None or not step.editing:
            return block_table
        group, units = self._group(builder)
        if group is None or not group.masked:
            return block_table
        try:
            return step.edit_table(block_table, units)
        except Exception as e:   # noqa: BLE001 - reported, then raised (below)
            # The reused metadata's seq_lens are edited already: no row of this step may run
            # at all with a partial edit, so the error stops the step (vLLM raises it).
            self.book.hook_error("the block-table edit of a reused group", e, step.req_ids)
            raise

    def attach_grouped(self, builder, meta, cm):
        """`builder` returned `meta` for this step's edited `cm`: the grouped read's plan rides
        on it when the flag is on and the rule groups the step (a global group's builder
        only). Never raises: a failure runs the step plain, with a warning."""
        step = self._thread.step
        if self.grouped.flag is None or step is None or not step.building:
            return meta
        group, _ = self._group(builder)
        if group is not None and not group.masked:     # a sliding-window or state group
            return meta
        return self.grouped.attach(meta, cm, step, self.book)

    def dummy_run(self, delta: int) -> None:
        """A runner's dummy run (profile, warm-up, graph capture) starts (+1) or ends (-1):
        its made-up rows are no step of the hook's."""
        self._thread.dummy += delta

    def in_dummy_run(self) -> bool:
        return bool(self._thread.dummy)

    def editing(self) -> bool:
        """The builder is about to edit this step's metadata (update_block_table refuses)."""
        step = self._thread.step
        return step is not None and step.editing

    def end_build(self) -> None:
        """The metadata is built: the builder must not edit again this step."""
        if self._thread.step is not None:
            self._thread.step.close_build()

    def after_sampling(self, sampled) -> None:
        """Right after the sampler (Step.after_sampling); once per step."""
        step, self._thread.sampling = self._thread.sampling, None
        if step is None:
            return
        try:
            step.after_sampling(sampled, self.book)
        except Exception as e:   # noqa: BLE001 - only the step's DA requests pay
            self.book.hook_error("after sampling", e, step.req_ids)

    def end_step(self, scheduler_output=None, view=None) -> None:
        """The step's forward is queued: the runner's seq_lens are put back; in a server the
        hook then looks after its own records (service.py)."""
        step, self._thread.step = self._thread.step, None
        if step is not None:
            step.finish()
        if self.service.on and not self._thread.dummy:
            self.service.after_step(scheduler_output, view)

    # ---- configuration and what runs (the driver) ------------------------------------------
    def hold(self, driver) -> None:
        """`driver` (a Lab) runs this process's in-process engine from now on."""
        if self.driver is not None and self.driver is not driver:
            raise RuntimeError("another driver runs this process's engine; shut it down first")
        self.driver = driver

    def release(self, driver) -> None:
        """`driver` shut its engine down."""
        if self.driver is driver:
            self.driver = None

    def configure(self, *, record_rows: bool | None = None, keep_finished: int | None = None,
                  keep_warnings: int | None = None, grouped_read: str | None = "keep") -> None:
        """record_rows: keep the staged rows and the metadata bundle in each record (what traces
        and diagrams need; costly at long contexts). keep_*: the bounded histories' sizes.
        grouped_read: None (off), "focus" (masked rows may share reads) or "all" (every DA
        row: GLOBAL rows too); hook/grouped.py."""
        if grouped_read != "keep":
            self.grouped.flag = grouped.check_flag(grouped_read)
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
        """The leak checks' per-request entries (hook/account.py)."""
        return account.entries(self.book)

    def rank_log(self) -> dict:
        """This worker's whole account, for the TP check (hook/account.py)."""
        return account.rank_log(self)

    def clear(self) -> None:
        """The engine shut down: forget every request."""
        self.book.clear()
        self.steps.clear()
        self._seen = self.book.warnings_total


SESSION = Session()
