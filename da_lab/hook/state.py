"""All DA requests of a worker and the per-step rewrite, independent of vLLM's classes.

The adapters in `v1.py` hand this module plain arrays (request ids, output token lists, the
staged block-table rows, seq_lens); it returns the rows and seq_lens the kernel should read.
Keeping vLLM out of here keeps the bookkeeping testable and the version differences in one place.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from da_lab.core.mask import kept_blocks
from da_lab.core.record import RequestStep
from da_lab.core.tags import Event, TagStream
from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_ID, EXTRA_LAYOUT, parse_layout
from da_lab.hook import director, faults
from da_lab.hook.context import HookStep
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.request import Decision, RequestState

log = logging.getLogger("vllm.da_lab")


class Tracker:
    """All DA requests of one worker process, and what the hook did at each step."""

    def __init__(self) -> None:
        self.requests: dict[str, RequestState] = {}
        self.tokenizer = None            # a `tokenizers.Tokenizer`, loaded on first use
        self.vocab_size = 0
        self.tokenizer_path: str | None = None
        self.record_rows = True          # keep staged rows + metadata in step records
        self.steps: list[HookStep] = []  # one entry per metadata build with DA requests
        self.unsettled: list = []        # callables completing steps' records (settle())
        # Ended requests, by da_id, for the caller to collect (events, mask history); bounded
        # so a long-running engine does not keep every request it ever served.
        self.finished: dict[str, RequestState] = {}
        self.keep_finished = 256
        # The most recent warning events (all requests), bounded like `finished`;
        # `warnings_total` counts every one ever raised, so a reader can take what is new.
        self.warnings: list[dict] = []
        self.keep_warnings = 256
        self.warnings_total = 0
        # Requests whose DA state could not be built (bad layout or director script): they
        # run as plain requests; here only until the runner drops them. req_id -> da_id
        self.refused: dict[str, str] = {}
        self.model_vocab_size = 0        # the model's (set at engine start): director ids < it
        self.disabled: str | None = None  # why DA is off in this engine (a refused model)
        # (step, rows [(req_id, batch row)], host tokens, CUDA event) per step, in order, whose
        # sampled tokens the tag machine has not read yet (their host copy may be in flight).
        self.pending_outputs: list = []
        # Steps between sampling a token and the decision that reads it beyond the next one:
        # 1 under async scheduling (the runner's note sets it), else 0. Fixed, so TP ranks agree.
        self.token_lag = 0
        self.runner_class = ""
        self.v2_installed = False        # register(): the V2 runner's wrappers are in place
        self.device = ""
        self.backend = ""
        # The step being decided; advanced only by begin_step(), once per model-runner step.
        self.step_index = -1
        # Director scripts the Lab adds while a request runs (Lab.steer): da_id -> [(at, ids)].
        self.scripts: dict[str, list[tuple[int, list[int]]]] = {}
        # decide_rewrite: the decision and bookkeeping here; apply: the builder-side rewrite
        # of the metadata (v1.py); detok_tags: incremental detokenize + tag state machine.
        self.timing = {"decide_rewrite_s": 0.0, "apply_s": 0.0, "detok_tags_s": 0.0,
                       "requests": 0}

    # ---- steps and live scripts ----------------------------------------------------------
    def begin_step(self) -> int:
        """A model-runner step starts: the only place the hook's step index advances."""
        self.step_index += 1
        return self.step_index

    def steer(self, da_id: str, at: int, ids: list[int]) -> None:
        """Force `ids` into request `da_id`'s output from index `at` on: the director's live
        script. The caller (engine/steering.py) picked `at`: not yet sampled, clear of every
        other scripted tag, with room for the tag to close and take effect."""
        self.scripts.setdefault(da_id, []).append((at, list(ids)))

    def end_script(self, da_id: str) -> None:
        """The request finished: its live script is done."""
        self.scripts.pop(da_id, None)

    # ---- request lifecycle -------------------------------------------------------------
    def _tok(self):
        if self.tokenizer is None:
            from pathlib import Path

            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(Path(self.tokenizer_path) / "tokenizer.json"))
            self.vocab_size = self.tokenizer.get_vocab_size()
        return self.tokenizer

    def track(self, req_id: str, extra_args: dict | None,
              prompt_len: int | None = None) -> RequestState | None:
        """The request's DA state, built on first sight. A request whose layout or director
        script is bad runs as a plain request: a `da_refused` warning says so, and one bad
        request never stops the others (the error stays with it)."""
        st = self.requests.get(req_id)
        if st is not None or not extra_args or EXTRA_LAYOUT not in extra_args \
                or req_id in self.refused:
            return st
        try:
            st = self._new_state(req_id, extra_args, prompt_len)
        except Exception as e:   # noqa: BLE001 - whatever broke, only this request pays
            self.refuse(req_id, str(extra_args.get(EXTRA_ID, req_id)), e)
            return None
        self.requests[req_id] = st
        return st

    def _new_state(self, req_id: str, extra_args: dict, prompt_len: int | None) -> RequestState:
        from tokenizers.decoders import DecodeStream

        if self.disabled:       # serving a model the hook refused (see hook/service.py)
            raise DAUnsupported(self.disabled)
        layout = parse_layout(extra_args[EXTRA_LAYOUT], prompt_len)
        script = director.normalize(extra_args.get(EXTRA_DIRECTOR), self._tok)
        director.check(script, self.model_vocab_size)
        return RequestState(req_id, str(extra_args.get(EXTRA_ID, req_id)), layout,
                            TagStream(n_chunks=layout.n_chunks),
                            DecodeStream(skip_special_tokens=True), script=script)

    def refuse(self, req_id: str, da_id: str, err: Exception) -> None:
        """Run `req_id` as a plain request from now on and say why."""
        self.requests.pop(req_id, None)
        self.refused[req_id] = da_id
        self._warn({"kind": "da_refused", "req": da_id, "step": self.step_index, "text": "",
                    "detail": f"DA off for this request, it runs as plain attention: "
                              f"{type(err).__name__}: {err}"})

    def hook_error(self, where: str, err: Exception, req_ids=None) -> None:
        """A bug or an unforeseen state in the hook's per-step work (`where`): the requests it
        touched (`req_ids`; None: every DA request, when the step's work can't be pinned on
        one) run as plain attention from now on, a `hook_error` warning says why, and the
        engine steps on. Never raises."""
        hit = list(self.requests) if req_ids is None else [r for r in req_ids
                                                            if r in self.requests]
        detail = f"{where}: {type(err).__name__}: {err}"
        log.warning("da_lab: the DA hook failed in %s; DA is off for %d request(s), which run "
                    "as plain attention", detail, len(hit))
        self._warn({"kind": "hook_error", "req": None, "step": self.step_index, "text": "",
                    "detail": detail})
        for req_id in hit:
            self.refuse(req_id, self.requests[req_id].da_id, err)

    def drop_missing(self, live: set[str] | dict) -> None:
        """Forget requests the runner no longer holds (finished or aborted). This ends a
        request when the runner drops it before the after-step sees vLLM finish it (a batch
        that steps on), so it takes the after-step's guard (`end_guarded`)."""
        for req_id in [r for r in self.refused if r not in live]:
            del self.refused[req_id]
        for req_id in [r for r in self.requests if r not in live]:
            self.end_guarded(self.requests[req_id].da_id, [req_id],
                             lambda r=req_id: r in self.requests and self._end(r))

    def end_guarded(self, da_id: str | None, req_ids: list[str], end) -> None:
        """One request's ending (`end()`) under the after-step's guard, fault site
        after_step: if it fails, that request alone (`req_ids`, vLLM's ids) is refused with a
        hook_error warning, and `end()` finishes the ending; the other requests end as usual."""
        try:
            faults.check("after_step", (da_id,) if da_id is not None else ())
            end()
        except Exception as e:   # noqa: BLE001 - only this request's account pays
            self.hook_error("ending a request", e, req_ids)
            end()

    def end(self, da_id: str) -> None:
        """The caller saw request `da_id` finish or aborted it: move its state to `finished`
        now rather than at the runner's next step (which may never come)."""
        self.end_script(da_id)
        for req_id in [r for r, st in self.requests.items() if st.da_id == da_id]:
            self._end(req_id)
        for req_id in [r for r, d in self.refused.items() if d == da_id]:
            del self.refused[req_id]

    def end_request(self, req_id: str) -> None:
        """vLLM finished or aborted the engine request `req_id` (one prompt of one client: ids
        the caller chose may repeat, vLLM's own may not)."""
        if req_id in self.requests:
            da_id = self.requests[req_id].da_id
            self._end(req_id)
            if not any(st.da_id == da_id for st in self.requests.values()):
                self.end_script(da_id)
        self.refused.pop(req_id, None)

    def _end(self, req_id: str) -> None:
        st = self.requests.pop(req_id)
        if st.stream.buffer:
            self._event(st, {"kind": "aborted_mid_tag", "text": st.stream.buffer,
                             "detail": "request ended with a partial tag in its buffer"})
        self.finished.pop(st.da_id, None)     # a reused id: the newest run is the one kept
        self.finished[st.da_id] = st
        while len(self.finished) > self.keep_finished:
            self.finished.pop(next(iter(self.finished)))

    def _event(self, st: RequestState, ev: dict) -> None:
        ev = dict(ev, req=st.da_id, step=self.step_index)
        st.events.append(ev)
        if ev["kind"] == "recompute_under_mask":
            st.recomputed_under_mask = True
        if ev["kind"] in ("aborted_mid_tag", "recompute_under_mask"):
            self._warn(ev)

    def _warn(self, ev: dict) -> None:
        self.warnings.append(ev)
        self.warnings_total += 1
        if len(self.warnings) > self.keep_warnings:
            del self.warnings[: len(self.warnings) - self.keep_warnings]

    def new_warnings(self, since_total: int) -> list[dict]:
        """Warnings raised after `warnings_total` was `since_total` (the kept ones)."""
        n = self.warnings_total - since_total
        return self.warnings[len(self.warnings) - n:] if n > 0 else []

    # ---- the per-step work ------------------------------------------------------------
    def feed(self, st: RequestState, output_ids: list[int]) -> list[Event]:
        """Decode the tokens sampled since the last step and run the tag machine on them."""
        n = len(output_ids)
        if n <= st.n_seen:
            return []
        tok = self._tok()
        events: list[Event] = []
        for t in output_ids[st.n_seen:n]:
            if t < 0:            # async scheduling placeholder: not sampled yet
                n = st.n_seen
                break
            if t >= self.vocab_size:   # the model's vocab is larger than the tokenizer's
                piece = None
                st.undecodable += 1
                if st.undecodable == 1:
                    self._event(st, {"kind": "undecodable_token", "text": "",
                                     "detail": f"token id {t} is not in the tokenizer; such "
                                               "tokens count as no text for the tag machine"})
            else:
                piece = st.decoder.step(tok, t)
            st.n_seen += 1
            if piece:
                st.text += piece
                events += st.stream.feed(piece)
        for e in events:
            self._event(st, e.to_dict())
        return events

    def rewrite(self, req_ids: list[str], outputs: list[list[int] | None], extra: list,
                staged, seq_lens: np.ndarray, query_lens: np.ndarray) -> Decision | None:
        """Decide every DA request's kept blocks and director tokens for this step.

        `staged(i)` gives batch row i's full block-table row as a numpy array (physical ids;
        read only when rows are recorded), never modified here. Returns None when the step
        needs no change. A request whose work here fails is refused (runs plain from now on,
        with a warning); the other requests of the step go on.
        """
        t0 = time.perf_counter()
        rows: list[int] = []
        kepts: list[np.ndarray] = []
        new_seq = None
        record = []
        forced: list[tuple[int, int]] = []
        sampling: list[tuple[str, int]] = []
        reqs: list[str] = []
        self._detok = 0.0
        for i, req_id in enumerate(req_ids):
            st = self.track(req_id, extra[i]) if extra[i] is not None else self.requests.get(req_id)
            if st is None:
                continue
            try:
                rec, kept, tok = self._request_step(st, i, outputs[i], int(seq_lens[i]),
                                                    int(query_lens[i]), staged)
            except Exception as e:   # noqa: BLE001 - isolate: only this request pays
                self.refuse(req_id, st.da_id, e)
                continue
            if rec.kept_logical is not None:
                if new_seq is None:
                    new_seq = seq_lens.copy()
                new_seq[i] = rec.attn_seq_len
                rows.append(i)
                kepts.append(kept)
            if rec.seq_len >= st.prompt_len:
                sampling.append((req_id, i))
            if tok is not None:
                forced.append((i, tok))
            record.append(rec)
            reqs.append(req_id)
        elapsed = time.perf_counter() - t0
        if not record:
            return None
        self.timing["decide_rewrite_s"] += elapsed - self._detok
        self.timing["detok_tags_s"] += self._detok
        self.timing["requests"] += len(record)
        log = HookStep(self.step_index, round(elapsed * 1e6, 1), record)
        self.steps.append(log)
        return Decision(rows, kepts, new_seq, forced, sampling, self.step_index, log, reqs)

    def _request_step(self, st: RequestState, i: int, output_ids: list[int] | None,
                      seq_len: int, q: int, staged) -> tuple[RequestStep, np.ndarray, int | None]:
        """One request's part of a step: (its record, kept blocks, director token or None)."""
        faults.check("decide", (st.da_id,))
        bs = st.layout.block_size
        n_events = len(st.events)
        if output_ids is not None:
            t1 = time.perf_counter()
            self.feed(st, output_ids)
            self._detok += time.perf_counter() - t1
        # Positions computed before are computed again: vLLM preempted the request and
        # recomputes it (in one prefill or in chunks, past whatever prefix stayed cached).
        recompute = seq_len - q < st.max_seq_len
        st.last_seq_len = seq_len
        st.max_seq_len = max(st.max_seq_len, seq_len)
        # This step samples output index seq_len - prompt_len once the prompt is done.
        out_index = seq_len - st.prompt_len
        tok = (st.forced_token(out_index, self.scripts.get(st.da_id)) if out_index >= 0
               else None)
        kept = st.kept(seq_len, q)
        n_blocks = -(-seq_len // bs)
        masked = len(kept) < n_blocks
        # The recompute equals the first run only if no step of either hid a block. Its last
        # positions are new ones, which an uninterrupted run would have computed under the
        # directive; a recompute keeps every block its query touches, so a tag trapped but
        # not applied yet (its `>` sampled just before the preemption) counts, not just history.
        if recompute and not st.recomputing and (
                st.ever_masked or len(kept_blocks(st.stream.directive, st.layout, seq_len, 1))
                < n_blocks):
            self._event(st, {"kind": "recompute_under_mask", "text": "",
                             "detail": "the request is being recomputed (preempted?); its "
                                       "KV is rebuilt under the current mask, not the "
                                       "mask history, so its tokens may differ"})
        st.recomputing = recompute
        # The kept array is shared with the decision cache (never mutated), so this is free.
        st.mask_history.append((seq_len - q, seq_len, kept if masked else None))
        if masked:
            st.ever_masked = True
        rec = RequestStep(st.da_id, i, bs, seq_len, q, st.directive_dict(),
                          st.stream.buffer, st.n_seen,
                          # sampled but not yet seen by the tag machine (async: <= 1)
                          max(0, out_index - st.n_seen), st.events[n_events:],
                          kept_logical=kept if masked else None,
                          partial_logical=st.partial() if masked else None)
        if self.record_rows:
            # A numpy copy: the runner reuses its staged rows' arrays.
            rec.staged_row = staged(i)[:n_blocks].copy()
        return rec, kept, tok

    def clear(self) -> None:
        """Forget every request (an engine shut down)."""
        self.requests.clear()
        self.scripts.clear()
        self.finished.clear()
        self.refused.clear()
        self.pending_outputs.clear()
        self.unsettled.clear()

    def settle(self) -> None:
        """Fill in what the builder received, for steps whose copy to the host was still in
        flight (metadata.note_built on CUDA)."""
        while self.unsettled:
            self.unsettled.pop(0)()

    def reset_log(self) -> list[HookStep]:
        self.settle()
        steps, self.steps = self.steps, []
        return steps


TRACKER = Tracker()


__all__ = ["TRACKER", "Tracker", "RequestState", "Decision", "EXTRA_LAYOUT", "EXTRA_DIRECTOR",
           "EXTRA_ID"]
