"""Where the diagrams' step records come from: a recorded trace, or a Lab running in this process.

Both sources look the same to a player: `.header` (provenance, skeleton, the KV map when the run
began), `.records` (one `StepRecord` per engine step, da_lab/core/record.py), and `ensure(i)`,
which says whether record i exists — a live source makes it exist by running engine steps.
`kv_state` replays the per-step KV changes into the physical map any diagram can draw.
"""

from __future__ import annotations

from pathlib import Path

from da_lab.core.record import RequestStep, StepRecord
from da_lab.trace import Trace, apply_kv_changes, load


class TraceSource:
    """A recorded run: every record is already there, nothing ever runs. With `follow=True`
    the trace is still being written (a server started with DA_LAB_TRACE): asking for a record
    past the end re-reads the file for the records appended since (trace/tail.py)."""

    def __init__(self, trace: Trace | str | Path, *, follow: bool = False) -> None:
        self.live = follow
        self._tail = None
        if follow:
            from da_lab.trace.tail import TraceTail

            self._tail = TraceTail(trace)
            self.records: list[StepRecord] = self._tail.read()
            if self._tail.header is None:
                raise ValueError(f"{trace}: no trace header yet (the server writes the file "
                                 "at its first DA step)")
            self.header = self._tail.header
            return
        self.trace = trace if isinstance(trace, Trace) else load(trace)
        self.header = self.trace.header
        self.records = self.trace.records

    def refresh(self) -> int:
        """Read what was appended (follow mode); returns the number of new records."""
        new = self._tail.read() if self._tail is not None else []
        self.records.extend(new)
        return len(new)

    def ensure(self, i: int) -> bool:
        if i >= len(self.records):
            self.refresh()
        return 0 <= i < len(self.records)

    def __len__(self) -> int:
        return len(self.records)


class LiveSource:
    """A Lab running in this process. Records appear only when an engine step runs, and each
    missing record costs exactly one `lab.step()`: the player asks for the next one on each tick,
    so the engine never runs ahead of what is on screen."""

    live = True

    def __init__(self, lab, new_request=None) -> None:
        """`new_request(lab)`, if given, adds a request to the Lab and returns its id (or an
        object with `.rid` whose str() describes it): the player's "new request" button."""
        self.lab = lab
        self._new_request = new_request
        # The same header a recording made now would carry (Lab.record writes these three).
        self.header = {"provenance": lab.provenance(), "skeleton": lab.skeleton(),
                       "initial_kv": lab.kv_changes_from_empty()}
        self.records: list[StepRecord] = []

    @property
    def can_add(self) -> bool:
        return self._new_request is not None

    def new_request(self):
        """Add a request through the factory given at construction (see __init__)."""
        if self._new_request is None:
            raise ValueError("this LiveSource was made without new_request=")
        return self._new_request(self.lab)

    def ensure(self, i: int) -> bool:
        while len(self.records) <= i:
            if not self.lab.has_unfinished():
                return False
            self.records.append(self.lab.step())
        return i >= 0

    def __len__(self) -> int:
        return len(self.records)


# ---------------------------------------------------------------------------------------------
# reading records: which requests a run has, and one request's part of a step


def first_request(records: list) -> str | None:
    """The first request added in the run (what a diagram follows unless told otherwise)."""
    for rec in records:
        for a in rec.added:
            return a["req"]
    return None


def added_entry(records: list, req: str) -> dict | None:
    """The `added` entry of `req`: prompt length, max_tokens, DA layout, director script."""
    for rec in records:
        for a in rec.added:
            if a["req"] == req:
                return a
    return None


def request_in(record: StepRecord, req: str) -> RequestStep | None:
    """`req`'s part of one step record, or None if it did not run in that step."""
    return record.request(req)


# ---------------------------------------------------------------------------------------------
# the physical KV map after step i


# A snapshot every CHECKPOINT records: scrubbing backwards then replays at most that many steps'
# changes instead of the whole run; stepping forward replays only the new steps' changes.
CHECKPOINT = 64
_CACHE_SIZE = 4   # a few (header, records) pairs: one page rarely shows more runs than that


def _copy(blocks: dict[int, dict]) -> dict[int, dict]:
    return {b: {"owners": list(v["owners"]), "cached": bool(v["cached"])}
            for b, v in blocks.items()}


class _KVReplay:
    def __init__(self, header: dict, records: list) -> None:
        self.header, self.records = header, records   # held to check identity, not copied
        self.blocks: dict[int, dict] = {}
        initial = header.get("initial_kv")
        if isinstance(initial, dict):
            apply_kv_changes(self.blocks, initial, "initial_kv")
        self.base = _copy(self.blocks)   # state before record 0
        self.at = -1                     # self.blocks = state after record self.at
        self.checkpoints: dict[int, dict] = {}

    def advance_to(self, i: int) -> dict[int, dict]:
        if i < self.at:
            k = max((c for c in self.checkpoints if c <= i), default=None)
            self.blocks = _copy(self.checkpoints[k] if k is not None else self.base)
            self.at = -1 if k is None else k
        while self.at < i:
            self.at += 1
            apply_kv_changes(self.blocks, self.records[self.at].kv, f"record {self.at}")
            if self.at % CHECKPOINT == CHECKPOINT - 1:
                self.checkpoints[self.at] = _copy(self.blocks)
        return self.blocks


_replays: list[_KVReplay] = []


def kv_state(header: dict, records: list, i: int) -> dict[int, dict]:
    """{physical block id: {"owners": [request ids], "cached": bool}} after record i's changes
    (i = -1: the map when the run began). Blocks never mentioned are absent, i.e. free.

    Cached per (header, records) pair, so showing step i+1 after step i applies one record's
    changes. The returned dict is the cache's own state: read it, copy it to keep it.
    Records may only be appended to (a live run), never edited in place."""
    if not -1 <= i < len(records):
        raise IndexError(f"no record {i} (the run has {len(records)})")
    rep = next((r for r in _replays if r.header is header and r.records is records), None)
    if rep is None:
        rep = _KVReplay(header, records)
        _replays.insert(0, rep)
        del _replays[_CACHE_SIZE:]
    return rep.advance_to(i)
