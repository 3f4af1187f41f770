"""A step's plan: what the hook decides for one model-runner step, made once and never edited.

The runner adapters (runners/v1.py, v2.py) read vLLM's batch into a `Batch` (plain ids and
arrays). The request book advances its requests to this step (`RequestBook.advance`: the sampled
tokens into the tag machines, recomputes noticed), then `decide(index, book, batch)` makes the
`StepPlan`: per DA request a `RequestPlan` with its kept logical blocks (core/mask.kept_blocks,
a pure function), the director's token and the staged row. `decide` reads the book and writes
nothing, so the plan is a pure function of the batch and the book; the book then records it
(`RequestBook.commit`: the mask history). Both are frozen: whoever holds a plan holds a value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from da_lab.hook import faults


@dataclass(frozen=True)
class Batch:
    """One model-runner step's batch as the runner shows it, in batch-row order."""
    req_ids: tuple[str, ...]                 # vLLM's request ids
    seq_lens: np.ndarray                     # tokens in each row's context after this step
    query_lens: np.ndarray                   # tokens computed this step (prefill chunk or 1)
    staged: Callable[[int], np.ndarray]      # batch row -> its staged block-table row
    # First sight of a request: its extra_args and prompt length (None: tracked already, plain,
    # or taken on elsewhere: the V2 runner takes requests on in add_requests).
    extra: tuple = ()
    prompt_lens: tuple = ()
    # batch row -> the other KV-cache groups' staged rows, (group index, row) each (hybrid
    # models; None: one group)
    other_groups: Callable[[int], list] | None = None

    def extra_of(self, i: int):
        return self.extra[i] if i < len(self.extra) else None

    def prompt_len_of(self, i: int):
        return self.prompt_lens[i] if i < len(self.prompt_lens) else None


@dataclass(frozen=True, eq=False)
class RequestPlan:
    """One DA request's part of a step: what the kernel reads, what the director writes."""
    req_id: str                              # vLLM's request id
    da_id: str                               # the caller's
    row: int                                 # batch row
    block_size: int
    seq_len: int
    query_len: int
    directive: dict                          # Directive.to_dict() of the directive in force
    tag_buffer: str
    n_output_seen: int                       # output tokens the tag machine has read
    tokens_unseen: int                       # sampled, not yet read (async scheduling: <= 1)
    events: tuple                            # the tag machine's events of this step
    kept: np.ndarray                         # logical blocks the kernel reads (read-only)
    masked: bool                             # kept is fewer than all of the row's blocks
    partial: np.ndarray | None               # kept blocks that also hold hidden tokens
    staged_row: np.ndarray | None            # the staged row (a copy), when rows are recorded
    other_rows: tuple | None                 # the other groups' (index, row copy), likewise
    forced_token: int | None                 # the director's token for this step's sample
    samples: bool                            # this step samples an output token for it

    @property
    def attn_seq_len(self) -> int:
        """Tokens the kernel reads: seq_len less the hidden blocks' tokens."""
        n_blocks = -(-self.seq_len // self.block_size)
        return self.seq_len - (n_blocks - len(self.kept)) * self.block_size


@dataclass(frozen=True, eq=False)
class StepPlan:
    """The hook's decision for one model-runner step, for all of its DA requests."""
    index: int                               # the hook's step index (RequestBook.step_index)
    requests: tuple[RequestPlan, ...] = ()
    new_seq: np.ndarray | None = None        # the batch's seq_lens, masked rows shortened
    decide_s: float = 0.0                    # seconds deciding (tags excluded)
    detok_s: float = 0.0                     # seconds detokenizing + running the tag machines

    @property
    def masked(self) -> tuple[RequestPlan, ...]:
        return tuple(p for p in self.requests if p.masked)

    @property
    def masks(self) -> bool:
        return self.new_seq is not None

    @property
    def req_ids(self) -> list[str]:
        return [p.req_id for p in self.requests]

    @property
    def da_ids(self) -> list[str]:
        return [p.da_id for p in self.requests]

    @property
    def hook_us(self) -> float:
        return round((self.decide_s + self.detok_s) * 1e6, 1)


def decide(index: int, book, batch: Batch, record_rows: bool, n_events: dict[str, int],
           detok_s: float = 0.0) -> tuple[StepPlan, list[tuple[str, str, Exception]]]:
    """The plan of step `index`: one RequestPlan per DA request of `batch` the book holds.
    Reads the book (its requests' directives, layouts, scripts) and writes nothing. `n_events`:
    per request, where this step's events start in its event list (`RequestBook.advance`).
    Returns the plan and the requests whose part failed, (req_id, da_id, error) each: they
    are left out of the plan, and `RequestBook.commit` turns DA off for them alone with a
    hook_error warning (a bug here is the hook's, never the request's)."""
    t0 = time.perf_counter()
    plans, failed = [], []
    new_seq = None
    for i, req_id in enumerate(batch.req_ids):
        st = book.requests.get(req_id)
        if st is None:
            continue
        try:
            p = _request(st, i, int(batch.seq_lens[i]), int(batch.query_lens[i]), batch,
                         book.scripts.get(st.da_id), record_rows, n_events.get(req_id, 0))
        except Exception as e:   # noqa: BLE001 - any bug in one request's part: it alone pays
            failed.append((req_id, st.da_id, e))
            continue
        if p.masked:
            if new_seq is None:
                new_seq = np.array(batch.seq_lens, copy=True)
            new_seq[i] = p.attn_seq_len
        plans.append(p)
    if new_seq is not None:
        new_seq.flags.writeable = False
    return StepPlan(index, tuple(plans), new_seq, time.perf_counter() - t0, detok_s), failed


def _request(st, i: int, seq_len: int, q: int, batch: Batch, live_script, record_rows: bool,
             n_events: int) -> RequestPlan:
    """One request's part of a step."""
    faults.check("decide", (st.da_id,))
    bs = st.layout.block_size
    n_blocks = -(-seq_len // bs)
    # This step samples output index seq_len - prompt_len once the prompt is done.
    out_index = seq_len - st.prompt_len
    tok = st.forced_token(out_index, live_script) if out_index >= 0 else None
    kept = st.kept(seq_len, q)            # read-only, shared with the decision cache
    masked = len(kept) < n_blocks
    # A numpy copy: the runner reuses its staged rows' arrays.
    staged = batch.staged(i)[:n_blocks].copy() if record_rows else None
    others = tuple((g, row.copy()) for g, row in batch.other_groups(i)) \
        if record_rows and batch.other_groups is not None else None
    return RequestPlan(st.req_id, st.da_id, i, bs, seq_len, q, st.directive_dict(),
                       st.stream.buffer, st.n_seen, max(0, out_index - st.n_seen),
                       tuple(st.events[n_events:]), kept, masked,
                       st.partial() if masked else None, staged, others, tok,
                       seq_len >= st.prompt_len)
