"""The request book: every DA request of one worker from first sight to its end, in one place.

A request is taken on (`track`) the first time a runner shows it with a DA layout, runs while
the runner holds it, and ends in one way (`end`): vLLM finished or aborted it, the caller saw it
finish, or the runner no longer holds it (`forget_absent`). Whatever breaks in one request's
part of the hook refuses that request (`refuse`): it runs as plain attention from then on and a
warning says why. The book also holds what travels with the requests between steps: their
sampled tokens on their way to the tag machines (`pending`, `drain`), the director scripts the
Lab steers with (`scripts`) and the bounded histories (`finished`, `warnings`). vLLM never
appears here: the runners hand it plain ids and arrays.
"""

from __future__ import annotations

import logging
import time

from da_lab.core.mask import kept_blocks
from da_lab.core.tags import Event, TagStream
from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_ID, EXTRA_LAYOUT, parse_layout
from da_lab.hook import director, faults
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.facts import EngineFacts
from da_lab.hook.request import RequestState

log = logging.getLogger("vllm.da_lab")


class RequestBook:
    """All DA requests of one worker process (vLLM's request ids are the keys)."""

    def __init__(self) -> None:
        self.requests: dict[str, RequestState] = {}
        self.facts = EngineFacts()       # what the runner told us at start (facts.py)
        self.disabled: str | None = None  # why DA is off in this engine (a refused model)
        self.tokenizer = None            # a `tokenizers.Tokenizer`, loaded on first use
        self.vocab_size = 0              # the tokenizer's (the model's may be larger)
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
        # Director scripts the Lab adds while a request runs (Lab.steer): da_id -> [(at, ids)].
        self.scripts: dict[str, list[tuple[int, list[int]]]] = {}
        # (step, rows [(req_id, batch row)], host tokens, CUDA event) per step, in order, whose
        # sampled tokens the tag machine has not read yet (their host copy may be in flight).
        self.pending: list = []
        # The step being decided; advanced only by begin_step(), once per model-runner step.
        self.step_index = -1

    def learn(self, facts: EngineFacts) -> None:
        """The engine started: what its runner told us (written once per engine)."""
        self.facts = facts

    def begin_step(self) -> int:
        """A model-runner step starts: the only place the hook's step index advances."""
        self.step_index += 1
        return self.step_index

    # ---- taking a request on -----------------------------------------------------------------
    def tokenizer_now(self):
        """The model's tokenizer (`tokenizers.Tokenizer`), loaded on first use."""
        if self.tokenizer is None:
            from pathlib import Path

            from tokenizers import Tokenizer

            path = Path(self.facts.tokenizer_path) / "tokenizer.json"
            self.tokenizer = Tokenizer.from_file(str(path))
            self.vocab_size = self.tokenizer.get_vocab_size()
        return self.tokenizer

    def track(self, req_id: str, extra_args: dict | None, prompt_len: int | None = None,
              resumed=()) -> RequestState | None:
        """The request's DA state, built on first sight (`resumed`: the outputs so far of a
        request vLLM resumed after preemption, when the runner shows them). A request whose
        layout or director script is bad runs as a plain request: a `da_refused` warning says
        so, and one bad request never stops the others (the error stays with it)."""
        st = self.requests.get(req_id)
        if st is not None or not extra_args or EXTRA_LAYOUT not in extra_args \
                or req_id in self.refused:
            return st
        try:
            st = self._new_state(req_id, extra_args, prompt_len)
        except Exception as e:   # noqa: BLE001 - a bad layout or script: only this request pays
            self.refuse(req_id, str(extra_args.get(EXTRA_ID, req_id)), e)
            return None
        st.captured.extend(int(t) for t in resumed)
        self.requests[req_id] = st
        return st

    def _new_state(self, req_id: str, extra_args: dict, prompt_len: int | None) -> RequestState:
        from tokenizers.decoders import DecodeStream

        if self.disabled:       # serving a model the hook refused (see hook/service.py)
            raise DAUnsupported(self.disabled)
        layout = parse_layout(extra_args[EXTRA_LAYOUT], prompt_len)
        da_block = self.facts.da_block_size
        if da_block and layout.block_size != da_block:
            raise DAUnsupported(f"the layout's blocks are {layout.block_size} tokens, this "
                                f"engine's global attention layers keep {da_block}-token "
                                f"blocks: build the layout with block_size={da_block}")
        script = director.normalize(extra_args.get(EXTRA_DIRECTOR), self.tokenizer_now)
        director.check(script, self.facts.vocab_size)
        return RequestState(req_id, str(extra_args.get(EXTRA_ID, req_id)), layout,
                            TagStream(n_chunks=layout.n_chunks, rules=layout.rules),
                            DecodeStream(skip_special_tokens=True), script=script)

    def steer(self, da_id: str, at: int, ids: list[int]) -> None:
        """Force `ids` into request `da_id`'s output from index `at` on: the director's live
        script. The caller (engine/steer_plan.py) picked `at`: not yet sampled, clear of every
        other scripted tag, with room for the tag to close and take effect."""
        self.scripts.setdefault(da_id, []).append((at, list(ids)))

    # ---- refusing and ending -----------------------------------------------------------------
    def refuse(self, req_id: str, da_id: str, err: Exception) -> None:
        """Run `req_id` as a plain request from now on and say why."""
        self.requests.pop(req_id, None)
        self.refused[req_id] = da_id
        self.warn({"kind": "da_refused", "req": da_id, "step": self.step_index, "text": "",
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
        self.warn({"kind": "hook_error", "req": None, "step": self.step_index, "text": "",
                   "detail": detail})
        for req_id in hit:
            self.refuse(req_id, self.requests[req_id].da_id, err)

    def ids_of(self, da_id: str) -> list[str]:
        """vLLM's ids of the running requests named `da_id` (a server's ids may repeat)."""
        return [r for r, st in self.requests.items() if st.da_id == da_id]

    def end(self, req_ids, *, da_id: str | None = None) -> None:
        """The one way a request ends: vLLM's requests `req_ids` finished, were aborted or are
        no longer held by the runner; with `da_id`, the caller saw its request `da_id` end
        (its live script and refusals go too). Each request's state moves to `finished`
        under the fault site after_step: if its ending fails, that request alone is refused
        with a hook_error warning, and its ending completes; the others end as usual."""
        for req_id in req_ids:
            st = self.requests.get(req_id)
            try:
                faults.check("after_step", (st.da_id,) if st is not None else ())
                self._close(req_id)
            except Exception as e:   # noqa: BLE001 - only this request's account pays
                self.hook_error("ending a request", e, [req_id])
                self._close(req_id)
        if da_id is not None:
            self.scripts.pop(da_id, None)
            for req_id in [r for r, d in self.refused.items() if d == da_id]:
                del self.refused[req_id]

    def forget_absent(self, live) -> None:
        """Requests the runner no longer holds (`live`: the ids it holds) have ended: this
        catches a request the runner dropped before the caller's after-step saw it end."""
        for req_id in [r for r in self.refused if r not in live]:
            del self.refused[req_id]
        self.end([r for r in self.requests if r not in live])

    def _close(self, req_id: str) -> None:
        self.refused.pop(req_id, None)
        st = self.requests.pop(req_id, None)
        if st is None:
            return
        self._take_pending(st)
        if st.stream.buffer:
            self.event(st, {"kind": "aborted_mid_tag", "text": st.stream.buffer,
                            "detail": "request ended with a partial tag in its buffer"})
        self.finished.pop(st.da_id, None)     # a reused id: the newest run is the one kept
        self.finished[st.da_id] = st
        while len(self.finished) > self.keep_finished:
            self.finished.pop(next(iter(self.finished)))
        if not self.ids_of(st.da_id):         # its live script ends with its last request
            self.scripts.pop(st.da_id, None)

    def clear(self) -> None:
        """Forget every request (an engine shut down)."""
        self.requests.clear()
        self.scripts.clear()
        self.finished.clear()
        self.refused.clear()
        self.pending.clear()

    # ---- events and warnings -----------------------------------------------------------------
    def event(self, st: RequestState, ev: dict) -> None:
        ev = dict(ev, req=st.da_id, step=self.step_index)
        st.events.append(ev)
        if ev["kind"] == "recompute_under_mask":
            st.recomputed_under_mask = True
        if ev["kind"] in ("aborted_mid_tag", "recompute_under_mask"):
            self.warn(ev)

    def warn(self, ev: dict) -> None:
        self.warnings.append(ev)
        self.warnings_total += 1
        if len(self.warnings) > self.keep_warnings:
            del self.warnings[: len(self.warnings) - self.keep_warnings]

    def new_warnings(self, since_total: int) -> list[dict]:
        """Warnings raised after `warnings_total` was `since_total` (the kept ones)."""
        n = self.warnings_total - since_total
        return self.warnings[len(self.warnings) - n:] if n > 0 else []

    # ---- a step: advance the requests, then record the plan -----------------------------------
    def advance(self, batch) -> tuple[dict[str, int], float]:
        """Bring the DA requests of `batch` (hook/plan.Batch) to this step: take a new one on at
        first sight, feed each its sampled tokens (the tag machine), notice a recompute.
        Returns where each request's events of this step start, and the seconds the
        detokenizer and tag machines took. A request whose part fails is refused."""
        n_events: dict[str, int] = {}
        detok = 0.0
        for i, req_id in enumerate(batch.req_ids):
            ex = batch.extra_of(i)
            st = self.track(req_id, ex, batch.prompt_len_of(i)) if ex is not None \
                else self.requests.get(req_id)
            if st is None:
                continue
            n_events[req_id] = len(st.events)
            try:
                t0 = time.perf_counter()
                self.feed(st, st.captured)
                detok += time.perf_counter() - t0
                self._note_position(st, int(batch.seq_lens[i]), int(batch.query_lens[i]))
            except Exception as e:   # noqa: BLE001 - a bug in one request's part: it alone pays
                self.hook_error("advancing a request to the step", e, [req_id])
        return n_events, detok

    def _note_position(self, st: RequestState, seq_len: int, q: int) -> None:
        """Positions computed before are computed again: vLLM preempted the request and
        recomputes it (in one prefill or in chunks, past whatever prefix stayed cached). The
        recompute equals the first run only if no step of either hid a block. Its last
        positions are new ones, which an uninterrupted run would have computed under the
        directive; a recompute keeps every block its query touches, so a tag trapped but not
        applied yet (its `>` sampled just before the preemption) counts, not just history."""
        recompute = seq_len - q < st.max_seq_len
        st.last_seq_len = seq_len
        st.max_seq_len = max(st.max_seq_len, seq_len)
        n_blocks = -(-seq_len // st.layout.block_size)
        if recompute and not st.recomputing and (
                st.ever_masked or len(kept_blocks(st.stream.directive, st.layout, seq_len, 1))
                < n_blocks):
            self.event(st, {"kind": "recompute_under_mask", "text": "",
                            "detail": "the request is being recomputed (preempted?); its "
                                      "KV is rebuilt under the current mask, not the "
                                      "mask history, so its tokens may differ"})
        st.recomputing = recompute

    def commit(self, plan, failed=()) -> None:
        """The step's plan (hook/plan.StepPlan) is made: refuse the requests whose part failed,
        and add each planned request's step to its mask history."""
        for req_id, _, err in failed:
            self.hook_error("a request's part of the step's decision", err, [req_id])
        for p in plan.requests:
            st = self.requests.get(p.req_id)
            if st is None:
                continue
            # The kept array is shared with the decision cache (never written), so this is free.
            st.mask_history.append((p.seq_len - p.query_len, p.seq_len,
                                    p.kept if p.masked else None))
            if p.masked:
                st.ever_masked = True

    # ---- sampled tokens on their way to the tag machines --------------------------------------
    def queue_sampled(self, step: int, rows: list[tuple[str, int]], host, event) -> None:
        """Step `step`'s sampled tokens of the DA rows `rows` ((req_id, batch row) each), on
        their way to the host (`host`, readable after the CUDA `event`, or now when None)."""
        self.pending.append((step, rows, host, event))

    def drain(self, wait: bool = False) -> None:
        """Hand the sampled tokens the coming decision may read to their requests (in step
        order): those of every step up to `token_lag` steps before it (0 without async
        scheduling, 1 with it). Waiting on a copy that old costs nothing: its step finished
        before this one began. With `wait`, every queued token (a server settling requests
        that have ended). The lag is fixed, never "whenever the copy has landed", so every
        tensor-parallel rank decides the same thing at the same step."""
        newest = self.step_index - self.facts.token_lag    # drain runs before begin_step
        while self.pending and (wait or self.pending[0][0] <= newest):
            _, rows, host, ev = self.pending.pop(0)
            if ev is not None:
                ev.synchronize()
            toks = host.tolist()
            for req_id, i in rows:
                st = self.requests.get(req_id)
                if st is not None:
                    st.captured.append(int(toks[i]))

    def _take_pending(self, st: RequestState) -> None:
        """A request that ends takes its tokens still queued (past the drain's lag under async
        scheduling): its last samples are never lost. Its rows stay queued; the drain skips
        them, the request being no longer live."""
        for _, rows, host, ev in self.pending:
            mine = [i for r, i in rows if r == st.req_id]
            if mine:
                if ev is not None:
                    ev.synchronize()
                toks = host.tolist()
                st.captured.extend(int(toks[i]) for i in mine)

    def feed(self, st: RequestState, output_ids: list[int]) -> list[Event]:
        """Decode the tokens sampled since the last step and run the tag machine on them."""
        n = len(output_ids)
        if n <= st.n_seen:
            return []
        tok = self.tokenizer_now()
        events: list[Event] = []
        for t in output_ids[st.n_seen:n]:
            if t < 0:            # async scheduling placeholder: not sampled yet
                break
            if t >= self.vocab_size:   # the model's vocab is larger than the tokenizer's
                piece = None
                st.undecodable += 1
                if st.undecodable == 1:
                    self.event(st, {"kind": "undecodable_token", "text": "",
                                    "detail": f"token id {t} is not in the tokenizer; such "
                                              "tokens count as no text for the tag machine"})
            else:
                piece = st.decoder.step(tok, t)
            st.n_seen += 1
            if piece:
                st.text += piece
                events += st.stream.feed(piece)
        for e in events:
            self.event(st, e.to_dict())
        return events

    def feed_rest(self, st: RequestState) -> list[dict]:
        """Feed a request's sampled tokens the tag machine has not read yet (the last ones of a
        request that ended); returns the events they raised."""
        n = len(st.events)
        if len(st.captured) > st.n_seen:
            self.feed(st, st.captured)
        return st.events[n:]
