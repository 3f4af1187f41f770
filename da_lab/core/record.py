"""The step record: what one engine step did, from the hook to the trace and the widgets.

One `StepRecord` per engine step, holding one `RequestStep` per request the step touched. Every
one of them is immutable (frozen dataclasses) and constructed once, complete: the hook's `Step`
(hook/step.py) constructs each request's hook part when the step is settled, from its plan and
what the attention builder received; `StepRecord.build` constructs the record's own
`RequestStep`s with the engine's outputs added (`RequestStep.with_output`, a new object) and the
record itself, once, with everything (the step driver hook/driver.py, for the Lab, the eval,
the bench and the server's trace). Nothing is assigned afterwards. Live or loaded from a trace,
it is the same object.

Units: positions and lengths in tokens; rows and kept positions in blocks (`block_size` tokens
each); `wall_s` in seconds, `hook_us` in microseconds. Rows are numpy arrays: physical block
ids (int32, as vLLM's block table holds them) and logical block indices (int32 as the hook
decides them live, int64 when read from a trace: compare by value).

Only what can't be derived is stored: the staged row (logical -> physical, what vLLM prepared),
the kept logical blocks (None: all of them), and the row/seq_len the builder received only where
they differ from what the hook computed. `to_json()` writes schema 2; `from_json()` reads schema 2
and the schema-1 dicts of older traces. Malformed content raises `RecordError` naming the step
and the field. Imports numpy only: a laptop replays a GPU run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from numbers import Real
from typing import Any

import numpy as np

from da_lab.core.fields import (
    RecordError,
    array_field,
    int_field,
    objects_field,
    typed_field,
    where,
)
from da_lab.core.group_rows import GroupRow

__all__ = ["SCHEMA", "RecordError", "Metadata", "RequestStep", "StepRecord"]

SCHEMA = 2
ROW_DTYPE = np.int32      # physical block ids
LOGICAL_DTYPE = np.int64  # logical block indices / token positions


def _differing(row: np.ndarray | None, kernel: np.ndarray | None) -> np.ndarray | None:
    """`row`, or None where it equals `kernel` (bytes compare fastest; the usual case, equal,
    stores nothing)."""
    if row is None:
        return None
    same = kernel is not None and row.dtype == kernel.dtype and row.tobytes() == kernel.tobytes()
    return None if same else row


def _list(a) -> list | None:
    return None if a is None else a.tolist() if isinstance(a, np.ndarray) else list(a)


def _equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and bool(np.array_equal(a, b))


# ---- the attention metadata bundle -----------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Metadata:
    """What the attention builder received for the whole batch (one per step)."""
    query_start_loc: np.ndarray     # int32, tokens: batch row i's queries are [q[i], q[i+1])
    seq_lens: np.ndarray            # int32, tokens each row's kernel reads (after the DA edit)
    slot_mapping: np.ndarray        # int64, KV cache slot each scheduled token is written to
    block_table_shape: tuple        # (rows, blocks) of the runner's block table
    max_seq_len: int                # tokens
    backend: str = ""
    runner: str = ""

    def to_json(self, arrays: bool = False) -> dict:
        conv = (lambda a: a) if arrays else _list
        return {"query_start_loc": conv(self.query_start_loc), "seq_lens": conv(self.seq_lens),
                "slot_mapping": conv(self.slot_mapping),
                "block_table_shape": list(self.block_table_shape),
                "max_seq_len": self.max_seq_len, "backend": self.backend, "runner": self.runner}

    @classmethod
    def from_json(cls, d: Any, step: Any = "?") -> Metadata | None:
        if d is None:
            return None
        if not isinstance(d, dict):
            raise RecordError(f"{where(step, 'metadata')} is {type(d).__name__}, not an object")
        c = "metadata."
        shape = typed_field(d, "block_table_shape", (list, tuple), step, c, None) or ()
        return cls(array_field(d, "query_start_loc", np.int32, step, c),
                   array_field(d, "seq_lens", np.int32, step, c),
                   array_field(d, "slot_mapping", np.int64, step, c), tuple(shape),
                   int_field(d, "max_seq_len", step, c, None),
                   typed_field(d, "backend", (str,), step, c, "") or "",
                   typed_field(d, "runner", (str,), step, c, "") or "")

    def __eq__(self, other) -> bool:
        return isinstance(other, Metadata) and all(
            _equal(getattr(self, f.name), getattr(other, f.name))
            if isinstance(getattr(self, f.name), np.ndarray)
            else getattr(self, f.name) == getattr(other, f.name) for f in fields(self))


# ---- one request in one step -----------------------------------------------------------------
_HOOK_INTS = ("row", "block_size", "seq_len", "query_len")


@dataclass(frozen=True, eq=False)
class RequestStep:
    """One request in one engine step. The hook fields are None for a request the hook does not
    track (no DA layout); the output fields are None when the step produced no output for it."""
    req: str                                  # the caller's request id
    row: int | None = None                    # batch row
    block_size: int | None = None             # tokens per block
    seq_len: int | None = None                # tokens in the context after this step's queries
    query_len: int | None = None              # tokens computed this step (prefill chunk or 1)
    directive: dict | None = None             # the active directive, Directive.to_dict()
    tag_buffer: str = ""                      # text of a tag being written, not yet closed
    n_output_seen: int = 0                    # output tokens the tag machine has read
    tokens_unseen: int = 0                    # sampled, not yet read (async scheduling: <= 1)
    events: list[dict] = field(default_factory=list)   # tag events of this step
    staged_row: np.ndarray | None = None      # int32 physical ids, logical order; None: not kept
    kept_logical: np.ndarray | None = None    # logical blocks the kernel reads; None: all
    # Kept blocks that also hold hidden tokens (the paper's unpadded chunks, rounded outward);
    # None: none (always for the card's whole-block chunks).
    partial_logical: np.ndarray | None = None
    built_seq_len: int | None = None          # tokens the builder received; None: not observed
    built_row: np.ndarray | None = None       # builder's row, only where != kernel_row
    # A hybrid model's other KV-cache groups' rows (core/group_rows.py); None: one group, or
    # rows not recorded.
    groups: tuple[GroupRow, ...] | None = None
    new_token_ids: list[int] | None = None    # tokens the engine returned this step
    new_text: str | None = None
    finished: bool | None = None

    # ---- derived ----------------------------------------------------------------------------
    @property
    def hooked(self) -> bool:
        """The hook tracked this request at this step (it has a directive and a row)."""
        return self.seq_len is not None

    @property
    def mode(self) -> str | None:
        return None if self.directive is None else self.directive.get("mode")

    @property
    def blocks_total(self) -> int | None:
        """Blocks of the full context (ceil(seq_len / block_size))."""
        return None if self.seq_len is None else -(-self.seq_len // self.block_size)

    @property
    def blocks_kept(self) -> int | None:
        """Blocks the hook kept for the kernel."""
        if self.kept_logical is not None:
            return len(self.kept_logical)
        return self.blocks_total

    @property
    def attn_seq_len(self) -> int | None:
        """Tokens the hook asked the kernel to read: seq_len less the hidden blocks."""
        if self.seq_len is None:
            return None
        return self.seq_len - (self.blocks_total - self.blocks_kept) * self.block_size

    @property
    def blocks_read(self) -> int | None:
        """Blocks the kernel read: from what the builder received when it was observed."""
        if self.built_seq_len is not None:
            return -(-self.built_seq_len // self.block_size)
        return self.blocks_kept

    @property
    def kept(self) -> np.ndarray | None:
        """The kept logical blocks, explicit (all of them when nothing was hidden)."""
        if self.kept_logical is not None or self.seq_len is None:
            return self.kept_logical
        return np.arange(self.blocks_total, dtype=LOGICAL_DTYPE)

    @property
    def kernel_row(self) -> np.ndarray | None:
        """The kernel row the hook computed: staged_row[kept_logical]."""
        if self.staged_row is None or self.kept_logical is None:
            return self.staged_row
        return self.staged_row[self.kept_logical]

    @property
    def read_row(self) -> np.ndarray | None:
        """The row the kernel read: the builder's when it differed, else kernel_row."""
        return self.built_row if self.built_row is not None else self.kernel_row

    @staticmethod
    def built_fields(seq_len: int, row: np.ndarray | None, kernel_row: np.ndarray | None) -> dict:
        """The `built_seq_len`/`built_row` keywords for what the attention builder received
        for a request whose kernel row the hook computed as `kernel_row` (the builder's row is
        stored only where it differs): hook/step.Step.settle constructs with them."""
        return {"built_seq_len": seq_len, "built_row": _differing(row, kernel_row)}

    def with_output(self, token_ids: list[int], text: str, finished: bool) -> RequestStep:
        """This request step with the engine's new tokens: a new RequestStep (StepRecord.build)."""
        return replace(self, new_token_ids=list(token_ids), new_text=text, finished=finished)

    # ---- JSON -------------------------------------------------------------------------------
    def to_json(self, arrays: bool = False) -> dict:
        """Schema 2. `arrays=True` leaves numpy arrays in (for encoders that reuse them)."""
        conv = (lambda a: a) if arrays else _list
        d: dict = {"req": self.req}
        if self.hooked:
            d.update(row=self.row, block_size=self.block_size, seq_len=self.seq_len,
                     query_len=self.query_len, directive=self.directive,
                     tag_buffer=self.tag_buffer, n_output_seen=self.n_output_seen,
                     tokens_unseen=self.tokens_unseen, events=self.events)
            for k in ("staged_row", "kept_logical", "partial_logical", "built_row"):
                v = getattr(self, k)
                if v is not None:
                    d[k] = conv(v)
            if self.built_seq_len is not None:
                d["built_seq_len"] = self.built_seq_len
            if self.groups is not None:
                d["groups"] = [g.to_json(arrays) for g in self.groups]
        if self.new_token_ids is not None:
            d.update(new_token_ids=list(self.new_token_ids), new_text=self.new_text,
                     finished=self.finished)
        return d

    @classmethod
    def from_json(cls, d: Any, step: Any = "?", i: int = 0, schema: int = SCHEMA) -> RequestStep:
        if not isinstance(d, dict):
            raise RecordError(f"{where(step, f'requests[{i}]')} is {type(d).__name__}, "
                              "not an object")
        c = f"requests[{i}]."
        kw: dict = {}
        if "seq_len" in d or "mode" in d or "directive" in d:
            kw = _hook_fields(d, step, c, schema)
        if d.get("new_token_ids") is not None:
            toks = array_field(d, "new_token_ids", np.int64, step, c)
            kw.update(new_token_ids=toks.tolist(),
                      new_text=typed_field(d, "new_text", (str,), step, c, "") or "",
                      finished=bool(typed_field(d, "finished", (bool,), step, c, False)))
        return cls(typed_field(d, "req", (str,), step, c), **kw)

    def __eq__(self, other) -> bool:
        if not isinstance(other, RequestStep):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not _equal(a, b):
                    return False
            elif a != b:
                return False
        return True


def _hook_fields(d: dict, step: Any, c: str, schema: int) -> dict:
    """The hook's part of a request entry (schema 1 or 2), checked: RequestStep's keywords."""
    row, bs, seq, q = (int_field(d, k, step, c) for k in _HOOK_INTS)
    if bs <= 0:
        raise RecordError(f"{where(step, c + 'block_size')} is {bs}, not > 0")
    directive = typed_field(d, "directive", (dict,), step, c, None)
    if directive is None:           # schema-1 records written before directives were kept
        directive = {"mode": typed_field(d, "mode", (str,), step, c)}
    staged = array_field(d, "staged_row", ROW_DTYPE, step, c)
    kept = array_field(d, "kept_logical", LOGICAL_DTYPE, step, c)
    total = -(-seq // bs)
    if schema == 1:
        # Schema 1 stored all kept positions (also when nothing was hidden) and the derived
        # numbers; without kept_logical, attn_seq_len says whether blocks were hidden.
        if kept is not None and len(kept) == total:
            kept = None
        elif kept is None and int_field(d, "attn_seq_len", step, c, seq) < seq:
            raise RecordError(f"{where(step, c + 'kept_logical')} is missing for a masked "
                              "request (a schema-1 record written without rows)")
    if kept is not None and len(kept) and (kept.min() < 0 or kept.max() >= total):
        raise RecordError(f"{where(step, c + 'kept_logical')} has blocks outside 0..{total - 1}")
    if staged is not None and kept is not None and len(staged) < total:
        raise RecordError(f"{where(step, c + 'staged_row')} has {len(staged)} blocks, "
                          f"fewer than the {total} of seq_len {seq}")
    part = array_field(d, "partial_logical", LOGICAL_DTYPE, step, c)
    if part is not None and (kept is None or not np.isin(part, kept).all()):
        raise RecordError(f"{where(step, c + 'partial_logical')} names blocks that are not kept")
    built = int_field(d, "built_seq_len", step, c, None)
    built_row = array_field(d, "built_row", ROW_DTYPE, step, c)
    if built is not None and built_row is not None and staged is not None:
        # Stored only where it differed from the kernel row; a writer that stored an equal
        # one reads back as not stored, as it was written live.
        built_row = _differing(built_row, staged if kept is None else staged[kept])
    groups = typed_field(d, "groups", (list,), step, c, None)
    if groups is not None:
        groups = tuple(GroupRow.from_json(g, step, f"{c}groups[{k}]")
                       for k, g in enumerate(groups))
    return dict(row=row, block_size=bs, seq_len=seq, query_len=q, directive=directive,
                groups=groups,
                tag_buffer=typed_field(d, "tag_buffer", (str,), step, c),
                n_output_seen=int_field(d, "n_output_seen", step, c, 0),
                tokens_unseen=int_field(d, "tokens_unseen", step, c, 0),
                events=objects_field(d, "events", step, c), staged_row=staged,
                kept_logical=kept, partial_logical=part, built_seq_len=built,
                built_row=built_row)


# ---- one engine step -------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class StepRecord:
    """Everything one engine step did. `to_json()` is exactly what a trace stores."""
    step: int                                            # the Lab's engine step index
    wall_s: float = 0.0                                  # seconds engine.step() took
    hook_us: float = 0.0                                 # microseconds the hook's decision took
    requests: list[RequestStep] = field(default_factory=list)
    kv: dict = field(default_factory=dict)      # physical KV map changes (engine/kvmap.py)
    metadata: Metadata | None = None            # the attention metadata bundle
    added: list[dict] = field(default_factory=list)      # requests added before this step
    warnings: list[dict] = field(default_factory=list)   # hook warning events of this step

    @property
    def scheduled(self) -> list[dict]:
        """[{"req", "query_len"}] of the requests the hook saw scheduled."""
        return [{"req": r.req, "query_len": r.query_len} for r in self.requests if r.hooked]

    def request(self, req: str) -> RequestStep | None:
        for r in self.requests:
            if r.req == req:
                return r
        return None

    def to_json(self, arrays: bool = False) -> dict:
        return {"step": self.step, "wall_s": self.wall_s, "hook_us": self.hook_us,
                "requests": [r.to_json(arrays) for r in self.requests], "kv": self.kv,
                "metadata": None if self.metadata is None else self.metadata.to_json(arrays),
                "added": self.added, "warnings": self.warnings}

    @classmethod
    def from_json(cls, d: Any, schema: int = SCHEMA) -> StepRecord:
        """A record from its JSON dict (schema 2, or the schema-1 dicts of older traces)."""
        if not isinstance(d, dict):
            raise RecordError(f"a record is a JSON {type(d).__name__}, not an object")
        step = int_field(d, "step", "?")
        reqs = typed_field(d, "requests", (list,), step, "", None) or []
        return cls(step, float(typed_field(d, "wall_s", (Real,), step, "", 0.0) or 0.0),
                   float(typed_field(d, "hook_us", (Real,), step, "", 0.0) or 0.0),
                   [RequestStep.from_json(r, step, i, schema) for i, r in enumerate(reqs)],
                   typed_field(d, "kv", (dict,), step, "", None) or {},
                   Metadata.from_json(d.get("metadata"), step),
                   objects_field(d, "added", step), objects_field(d, "warnings", step))

    @classmethod
    def build(cls, step: int, wall_s: float, hook_steps=(), outputs=(), added=(),
              warnings=(), kv: dict | None = None) -> StepRecord:
        """The one way a step's record is assembled (hook/driver.EngineStep.record, for the
        Lab, the bench's recorder and the server's trace): the hook's RequestSteps of the step
        (`hook_steps`: its settled steps, one per model-runner step, each with .requests,
        .hook_us, .metadata), each with the engine's new tokens (`outputs`: (request id, token
        ids, text, finished) per request that produced output) as a new RequestStep; a request
        the hook does not track gets a RequestStep of its own."""
        hook_us, metadata = 0.0, None
        by_req: dict[str, RequestStep] = {}
        for h in hook_steps:
            hook_us += h.hook_us
            metadata = h.metadata or metadata
            for r in h.requests:
                by_req[r.req] = r
        for req, token_ids, text, finished in outputs:
            r = by_req.get(req)
            by_req[req] = (RequestStep(req, new_token_ids=list(token_ids), new_text=text,
                                       finished=finished) if r is None
                           else r.with_output(token_ids, text, finished))
        return cls(step, wall_s, hook_us, list(by_req.values()), kv=kv or {},
                   metadata=metadata, added=list(added), warnings=list(warnings))

    def __eq__(self, other) -> bool:
        if not isinstance(other, StepRecord):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self))
