"""One model-runner step of the DA hook, owned by one `Step` from its decision to its record.

The runner wrappers (runners/) drive it, in this order, once per step with DA requests:

  begin           decide every DA request's kept blocks and director token from the request
                  book; one `core.record.RequestStep` per request is created here
  apply           the builder wrapper: the CommonAttentionMetadata the kernel should read
                  (metadata.py makes the edit)
  note_built      what the builder received, on the step's own RequestSteps (on CUDA the
                  host copies may still be in flight: `settle` completes them)
  after_sampling  the director's tokens into the sampled ones; the DA rows' tokens start their
                  way to the tag machines (the book's `pending`, drained at a later begin)
  finish          the forward is queued: the runner's seq_lens are put back (CUDA)
  settle          the records are complete: the session hands the step on (`StepReport`)

A Step is the hook's log of one metadata build too (`index`, `hook_us`, `requests`,
`metadata`): `StepRecord.build` assembles the engine step's record from these.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from da_lab.core.mask import kept_blocks
from da_lab.core.record import Metadata, RequestStep
from da_lab.hook import faults, metadata
from da_lab.hook.book import RequestBook
from da_lab.hook.facts import EngineFacts
from da_lab.hook.request import RequestState


class Step:
    def __init__(self, index: int, book: RequestBook, record_rows: bool) -> None:
        self.index = index                   # the hook's step index (RequestBook.step_index)
        self.book = book
        self.record_rows = record_rows       # keep staged rows and metadata in the records
        self.hook_us = 0.0                   # microseconds the decision took
        self.requests: list[RequestStep] = []   # one per DA request, complete once settled
        self.metadata: Metadata | None = None   # what the builder received (rows recorded)
        self.reqs: list[str] = []            # the step's DA requests (vLLM's ids)
        # The decision: batch rows to compact with their kept logical blocks, the full
        # seq_lens array with masked rows shortened, and the director's (batch row, token).
        self.rows: list[int] = []
        self.kepts: list[np.ndarray] = []
        self.new_seq: np.ndarray | None = None
        self.forced: list[tuple[int, int]] = []
        self.sampling: list[tuple[str, int]] = []   # DA rows that sample: (req_id, batch row)
        self.decide_s = self.detok_s = 0.0
        self.editing = True      # the builder may still edit (closed once metadata is built)
        self.built = False       # the builder wrapper noted what it received
        self.applied = None      # CUDA: the block-table address already edited in place
        self.restore = None      # CUDA: (seq_lens, rows, saved values) to put back
        self._unsettled = None   # completes the records once host copies landed (CUDA)
        # The grouped read (hook/grouped.py): the staged rows' reader, used when the plan is
        # made at build time, and the plan's account of the step (None: no plan was made).
        self.staged = None
        self.grouping: dict | None = None

    @property
    def masks(self) -> bool:
        return bool(self.rows)

    # ---- begin: the decision ------------------------------------------------------------------
    def begin(self, req_ids: list[str], outputs: list[list[int] | None], extra: list, staged,
              seq_lens: np.ndarray, query_lens: np.ndarray) -> None:
        """Decide every DA request's kept blocks and director tokens for this step.

        `extra[i]`: request i's extra_args on first sight (None: tracked already or plain);
        `outputs[i]`: its sampled tokens so far; `staged(i)` gives batch row i's full
        block-table row as a numpy array (physical ids; read only when rows are recorded),
        never modified here. A request whose work here fails is refused (runs plain from now
        on, with a warning); the other requests of the step go on.
        """
        t0 = time.perf_counter()
        book = self.book
        self.staged = staged
        for i, req_id in enumerate(req_ids):
            st = book.track(req_id, extra[i]) if extra[i] is not None else \
                book.requests.get(req_id)
            if st is None:
                continue
            try:
                rec, kept, tok = self._request(st, i, outputs[i], int(seq_lens[i]),
                                               int(query_lens[i]), staged)
            except Exception as e:   # noqa: BLE001 - isolate: only this request pays
                book.refuse(req_id, st.da_id, e)
                continue
            if rec.kept_logical is not None:
                if self.new_seq is None:
                    self.new_seq = seq_lens.copy()
                self.new_seq[i] = rec.attn_seq_len
                self.rows.append(i)
                self.kepts.append(kept)
            if rec.seq_len >= st.prompt_len:
                self.sampling.append((req_id, i))
            if tok is not None:
                self.forced.append((i, tok))
            self.requests.append(rec)
            self.reqs.append(req_id)
        elapsed = time.perf_counter() - t0
        self.decide_s = elapsed - self.detok_s
        self.hook_us = round(elapsed * 1e6, 1)

    def _request(self, st: RequestState, i: int, output_ids: list[int] | None,
                 seq_len: int, q: int, staged) -> tuple[RequestStep, np.ndarray, int | None]:
        """One request's part of a step: (its record, kept blocks, director token or None)."""
        faults.check("decide", (st.da_id,))
        book = self.book
        bs = st.layout.block_size
        n_events = len(st.events)
        if output_ids is not None:
            t1 = time.perf_counter()
            book.feed(st, output_ids)
            self.detok_s += time.perf_counter() - t1
        # Positions computed before are computed again: vLLM preempted the request and
        # recomputes it (in one prefill or in chunks, past whatever prefix stayed cached).
        recompute = seq_len - q < st.max_seq_len
        st.last_seq_len = seq_len
        st.max_seq_len = max(st.max_seq_len, seq_len)
        # This step samples output index seq_len - prompt_len once the prompt is done.
        out_index = seq_len - st.prompt_len
        tok = (st.forced_token(out_index, book.scripts.get(st.da_id)) if out_index >= 0
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
            book.event(st, {"kind": "recompute_under_mask", "text": "",
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
                          partial_logical=st.partial() if masked else None,
                          # A numpy copy: the runner reuses its staged rows' arrays.
                          staged_row=staged(i)[:n_blocks].copy() if self.record_rows
                          else None)
        return rec, kept, tok

    # ---- apply and note_built: the builder ----------------------------------------------------
    def apply(self, cm, fields: dict):
        """The CommonAttentionMetadata the builder should see (metadata.py makes the edit)."""
        return metadata.apply(cm, self, fields)

    def note_built(self, cm, facts: EngineFacts) -> None:
        """Record what the builder actually received, on the step's own RequestSteps: the
        seq_lens (and, with rows recorded, the rows and the metadata bundle) the kernel reads."""
        if self.built:        # one record per step even if several builders run
            return
        self.built = True
        recs = self.requests
        if not self.record_rows:
            seq = cm.seq_lens.numpy() if cm.seq_lens.device.type == "cpu" else None
            for rec in recs:
                rec.note_built(int(seq[rec.row]) if seq is not None else rec.attn_seq_len, None)
            return
        bt = cm.block_table_tensor
        n = cm.num_reqs
        width = min(bt.shape[1], max(rec.blocks_total for rec in recs))
        (rows, seq, slots), ev = metadata.host_copies(
            [bt[:n, :width], cm.seq_lens[:n], cm.slot_mapping[: cm.num_actual_tokens]])
        meta = Metadata(cm.query_start_loc_cpu.numpy().copy(), seq, slots, tuple(bt.shape),
                        int(cm.max_seq_len), facts.backend, facts.runner_class)
        self.metadata = meta

        def fill() -> None:
            if ev is not None:
                ev.synchronize()
            bt_h, seq_h = np.asarray(rows), np.asarray(seq)
            for rec in recs:
                s = int(seq_h[rec.row])
                rec.note_built(s, bt_h[rec.row, : -(-s // rec.block_size)])
            meta.seq_lens, meta.slot_mapping = seq_h, np.asarray(slots)

        if ev is None:
            fill()
        else:
            self._unsettled = fill

    # ---- after sampling, finish, settle -------------------------------------------------------
    def after_sampling(self, sampled: torch.Tensor) -> None:
        """Right after the sampler, for both runners:
        1. the director overwrites the sampled token of rows whose script says so;
        2. the DA rows' tokens start their way to the tag machine. Neither runner keeps them
           on the host in time (v1 under async scheduling has -1 placeholders, V2 keeps them
           on the GPU), so the hook queues its own non-blocking copy, which the book reads
           once it has landed (`RequestBook.drain`): with async scheduling, always one step
           later (a race here once gave the two ranks of a TP=2 engine different masks)."""
        faults.check("sampling", (r.req for r in self.requests))
        if self.forced:
            rows = torch.tensor([r for r, _ in self.forced], dtype=torch.long)
            toks = torch.tensor([t for _, t in self.forced], dtype=sampled.dtype)
            if sampled.device.type != "cpu":
                rows, toks = rows.to(sampled.device), toks.to(sampled.device)
            sampled[rows, 0] = toks
        if self.sampling:
            if sampled.device.type == "cpu":
                self.book.pending.append((self.index, self.sampling, sampled[:, 0].clone(),
                                          None))
            else:
                host = sampled[:, 0].to("cpu", non_blocking=True)
                ev = torch.cuda.Event()
                ev.record()
                self.book.pending.append((self.index, self.sampling, host, ev))

    def finish(self) -> None:
        """The forward that read the edited seq_lens is queued: put back the runner's."""
        metadata.restore(self)

    def settle(self) -> None:
        """Complete the records whose host copies were in flight (CUDA)."""
        if self._unsettled is not None:
            fill, self._unsettled = self._unsettled, None
            fill()

    def to_json(self) -> dict:
        return {"step": self.index, "hook_us": self.hook_us,
                "requests": [r.to_json() for r in self.requests]}
