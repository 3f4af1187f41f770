"""One model-runner step of the DA hook, owned by one `Step` from its plan to its records.

The session (session.py) drives it, once per model-runner step with DA requests:

  Step(plan)      the plan (hook/plan.StepPlan: per request the kept blocks, the director's
                  token, the staged row), made before, immutable
  build           the builder wrapper: the kernel-row edit (metadata.KernelEdit, the one owner
                  of the edit and its undo) and what the builder received (on CUDA the host
                  copies may still be in flight)
  close_build     the metadata is built: no builder edits again this step
  after_sampling  the director's tokens into the sampled ones; the DA rows' tokens start their
                  way to the tag machines (the book's `pending`, drained at a later step)
  finish          the forward is queued: the runner's seq_lens are put back (CUDA)
  settle          every request's `core.record.RequestStep` and the `Metadata` bundle are
                  constructed, once, complete (after the host copies landed)

Only the Step's own methods change its state; its plan and records are values. A Step is the
hook's log of one model-runner step (`index`, `hook_us`, `requests`, `metadata`), from which
`StepRecord.build` assembles the engine step's record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from da_lab.core.group_rows import GroupRow
from da_lab.core.record import Metadata, RequestStep
from da_lab.hook import faults
from da_lab.hook.metadata import KernelEdit, host_copies
from da_lab.hook.plan import StepPlan


@dataclass(frozen=True, eq=False)
class _Observed:
    """What the attention builder received, as host arrays (or copies in flight)."""
    seq: object                   # seq_lens (numpy, or a CPU tensor being copied); None: unread
    rows: object = None           # the block table's rows, when rows are recorded
    slots: object = None          # the slot mapping, when rows are recorded
    query_start_loc: np.ndarray | None = None
    shape: tuple = ()
    max_seq_len: int = 0
    event: object = None          # the CUDA event after which the copies are readable
    units: int = 1                # kernel blocks per KV block in the builder's rows


class Step:
    def __init__(self, plan: StepPlan, record_rows: bool, fields: dict, staged=None) -> None:
        self.plan = plan
        self.record_rows = record_rows       # keep staged rows and metadata in the records
        self._edit = KernelEdit(plan, fields) if plan.masks else None
        self._open = True                    # the builder may still edit this step
        self._observed: _Observed | None = None
        self._facts = None
        self._requests: tuple[RequestStep, ...] | None = None
        self._metadata: Metadata | None = None
        self.staged = staged                 # batch row -> its staged row (the grouped read)
        # The grouped read's account of this step (hook/grouped.py, its one writer): None
        # while no plan was made.
        self.grouping: dict | None = None

    # ---- what the step is -----------------------------------------------------------------
    @property
    def index(self) -> int:
        return self.plan.index

    @property
    def hook_us(self) -> float:
        return self.plan.hook_us

    @property
    def req_ids(self) -> list[str]:
        """The step's DA requests, by vLLM's request ids."""
        return self.plan.req_ids

    @property
    def masks(self) -> bool:
        return self.plan.masks

    @property
    def building(self) -> bool:
        """The builder has not finished this step's metadata yet (the grouped read's window)."""
        return self._open

    @property
    def editing(self) -> bool:
        """The builder is about to edit this step's metadata (update_block_table refuses)."""
        return self._open and self._edit is not None

    @property
    def requests(self) -> tuple[RequestStep, ...]:
        """One RequestStep per DA request, complete (the step settles first if it must)."""
        self.settle()
        return self._requests

    @property
    def metadata(self) -> Metadata | None:
        """What the builder received for the batch (rows recorded), else None."""
        self.settle()
        return self._metadata

    # ---- the builder ----------------------------------------------------------------------
    def build(self, cm, facts, units: int = 1):
        """The CommonAttentionMetadata a global group's builder should read (the kernel-row
        edit, while the step is open; `units`: kernel blocks per KV block of the builder's
        rows), and note what it reads, once per step even if several builders run."""
        faults.check("build", self.plan.da_ids)
        out = self._edit.apply(cm, units, copy=facts.hybrid) if self.editing else cm
        if self._observed is None:
            self._observe(out, facts, units)
        return out

    def edit_table(self, block_table, units: int = 1):
        """A global group's block table when vLLM reuses another global group's metadata."""
        return self._edit.table(block_table, units)

    def close_build(self) -> None:
        """The metadata is built: the builder must not edit again this step."""
        self._open = False

    def _observe(self, cm, facts, units: int) -> None:
        self._facts = facts
        if not self.record_rows:
            seq = cm.seq_lens.numpy().copy() if cm.seq_lens.device.type == "cpu" else None
            self._observed = _Observed(seq)
            return
        bt = cm.block_table_tensor
        n = cm.num_reqs
        width = min(bt.shape[1], units * max(-(-p.seq_len // p.block_size)
                                             for p in self.plan.requests))
        (rows, seq, slots), ev = host_copies(
            [bt[:n, :width:units], cm.seq_lens[:n], cm.slot_mapping[: cm.num_actual_tokens]])
        # Kernel blocks b*units + j of KV block b: every units-th one, divided, is the row in
        # the KV manager's blocks, the units the plan's kept blocks are in.
        self._observed = _Observed(seq, rows, slots, cm.query_start_loc_cpu.numpy().copy(),
                                   tuple(bt.shape), int(cm.max_seq_len), ev, units)

    # ---- after sampling, finish, settle -----------------------------------------------------
    def after_sampling(self, sampled: torch.Tensor, book) -> None:
        """Right after the sampler, for both runners:
        1. the director overwrites the sampled token of rows whose script says so;
        2. the DA rows' tokens start their way to the tag machine. Neither runner keeps them
           on the host in time (v1 under async scheduling has -1 placeholders, V2 keeps them
           on the GPU), so the hook queues its own non-blocking copy, which the book reads
           once it has landed (`RequestBook.drain`): with async scheduling, always one step
           later (a race here once gave the two ranks of a TP=2 engine different masks)."""
        plans = self.plan.requests
        faults.check("sampling", self.plan.da_ids)
        forced = [(p.row, p.forced_token) for p in plans if p.forced_token is not None]
        if forced:
            rows = torch.tensor([r for r, _ in forced], dtype=torch.long)
            toks = torch.tensor([t for _, t in forced], dtype=sampled.dtype)
            if sampled.device.type != "cpu":
                rows, toks = rows.to(sampled.device), toks.to(sampled.device)
            sampled[rows, 0] = toks
        sampling = [(p.req_id, p.row) for p in plans if p.samples]
        if sampling:
            if sampled.device.type == "cpu":
                book.queue_sampled(self.index, sampling, sampled[:, 0].clone(), None)
            else:
                host = sampled[:, 0].to("cpu", non_blocking=True)
                ev = torch.cuda.Event()
                ev.record()
                book.queue_sampled(self.index, sampling, host, ev)

    def finish(self) -> None:
        """The forward that read the edited seq_lens is queued: put back the runner's."""
        self._open = False
        if self._edit is not None:
            self._edit.undo()

    def settle(self) -> None:
        """Construct the records, once: every request's RequestStep (its plan and what the
        builder received) and the Metadata bundle, after the host copies landed (CUDA)."""
        if self._requests is not None:
            return
        ob = self._observed
        if ob is not None and ob.event is not None:
            ob.event.synchronize()
        seq = None if ob is None or ob.seq is None else np.asarray(ob.seq)
        rows = None if ob is None or ob.rows is None else np.asarray(ob.rows)
        if rows is not None and ob.units > 1:
            rows = rows // ob.units
        reqs = []
        for p in self.plan.requests:
            kept = p.kept if p.masked else None
            built = {}
            if ob is not None:
                s = int(seq[p.row]) if seq is not None else p.attn_seq_len
                row = rows[p.row, : -(-s // p.block_size)] if rows is not None else None
                kernel = p.staged_row if kept is None or p.staged_row is None \
                    else p.staged_row[kept]
                built = RequestStep.built_fields(s, row, kernel)
            reqs.append(RequestStep(p.da_id, p.row, p.block_size, p.seq_len, p.query_len,
                                    p.directive, p.tag_buffer, p.n_output_seen, p.tokens_unseen,
                                    list(p.events), p.staged_row, kept,
                                    p.partial if p.masked else None, **built,
                                    groups=self._group_rows(p)))
        self._requests = tuple(reqs)
        if ob is not None and ob.rows is not None:
            f = self._facts
            self._metadata = Metadata(ob.query_start_loc, seq, np.asarray(ob.slots), ob.shape,
                                      ob.max_seq_len, f.backend, f.runner_class)

    def _group_rows(self, p) -> tuple[GroupRow, ...] | None:
        """A hybrid model's other groups' rows for the record, each cut to the blocks that
        hold the context."""
        if p.other_rows is None or self._facts is None:
            return None
        out = []
        for g, row in p.other_rows:
            gf = self._facts.groups[g]
            n = -(-p.seq_len // gf.block_size) if gf.block_size else len(row)
            out.append(GroupRow(g, gf.kind, gf.block_size, row[:n], gf.sliding_window))
        return tuple(out)

    def to_json(self) -> dict:
        return {"step": self.index, "hook_us": self.hook_us,
                "requests": [r.to_json() for r in self.requests]}


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
