"""Where the diagrams' step records come from: a recorded trace, or a Lab running in this process.

Both sources look the same to a player: `.header` (provenance, skeleton, the KV map when the run
began), `.records` (one `StepRecord` per engine step, da_lab/core/record.py), and `ensure(i)`,
which says whether record i exists — a live source makes it exist by running engine steps.
(The page replays the per-step KV changes into the physical map itself: static/store.js.)
"""

from __future__ import annotations

from pathlib import Path

from da_lab.core.record import StepRecord
from da_lab.trace import Trace, load


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

    def close(self) -> int:
        """Stop following (the writer has stopped): read what was appended, then nothing more
        is expected. Returns the number of records read."""
        n = self.refresh()
        self._tail, self.live = None, False
        return n

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

    def __init__(self, lab, new_request=None, add_hint: str | None = None) -> None:
        """`new_request(lab)`, if given, adds a request to the Lab and returns its id (or an
        object with `.da_id` whose str() describes it): the player's "new request" button.
        `add_hint`: how the reader adds one otherwise, said when the run has finished (e.g.
        "Press Ask above with another question"; default: in a cell)."""
        self.lab = lab
        self._new_request = new_request
        self.add_hint = add_hint
        # The same header a recording made now would carry (Lab.record writes these three).
        self.header = {"provenance": lab.provenance(), "skeleton": lab.skeleton(),
                       "initial_kv": lab.kv_changes_from_empty()}
        self.records: list[StepRecord] = []
        self._group = [self]        # the sources every step this one runs is recorded in

    def branch(self, new_request=None, add_hint: str | None = None) -> LiveSource:
        """Another source over the same Lab whose records begin at the engine's next step (its
        header: the KV map now). Every step either one runs is recorded in both, so a player of
        each can run the engine and neither misses a step (lesson 04's readers beside its
        lesson request; 06's paper-format request beside its question)."""
        other = LiveSource(self.lab, new_request, add_hint)
        other._group = self._group
        self._group.append(other)
        return other

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
            rec = self.lab.step()
            for src in self._group:
                src.records.append(rec)
        return i >= 0

    def __len__(self) -> int:
        return len(self.records)


# ---------------------------------------------------------------------------------------------
# reading records: which requests a run has, and what was said when each was added


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


def add_hint(source) -> str:
    """How a reader adds a request to a source's Lab, in their words (a lesson with a button of
    its own says so: LiveSource(add_hint=...)); the default: in a cell."""
    return getattr(source, "add_hint", None) or "Add a request to the Lab in a cell"
