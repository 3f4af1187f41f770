"""One request's per-step numbers and stream text across a run, for diagram 4 (dahook.py)."""

from __future__ import annotations

from bisect import bisect_right

from .source import request_in


class Series:
    """One request's per-step numbers and text, gathered once per record as records arrive (a
    live run appends), so showing step i is a slice, not a rescan of the run."""

    def __init__(self, records: list, req: str) -> None:
        self.records, self.req = records, req
        self.idx: list[int] = []        # record indices where req has hook data
        self.steps: list[int] = []
        self.read: list[int] = []
        self.total: list[int] = []
        self.text_end: list[int] = []   # len(stream text) after each record (every record)
        self.parts: list[str] = []
        self.tags: list[tuple[int, int, int, str]] = []   # (record idx, start, end, kind)
        self.n = 0
        self._len = 0

    def scan(self) -> None:
        for k in range(self.n, len(self.records)):
            h = request_in(self.records[k], self.req)
            if h is not None and h.hooked:
                self.idx.append(k)
                self.steps.append(self.records[k].step)
                self.read.append(h.blocks_read)
                self.total.append(h.blocks_total)
                for e in h.events:
                    if e.get("kind") in ("tag_trapped", "malformed_tag") and e.get("text"):
                        self.tags.append((k, *self._span("".join(self.parts), e), e["kind"]))
            new = (h.new_text if h is not None else None) or ""
            self.parts.append(new)
            self._len += len(new)
            self.text_end.append(self._len)
        self.n = len(self.records)

    @staticmethod
    def _span(text: str, e: dict) -> tuple[int, int]:
        """Where a trapped tag sits in the stream: the event's offset is just past its last
        character; if the decoded text drifted from the hook's, find the tag's last copy."""
        t, end = e["text"], int(e.get("offset") or 0)
        if text[max(0, end - len(t)):end] == t:
            return end - len(t), end
        at = text.rfind(t)
        return (at, at + len(t)) if at >= 0 else (0, 0)

    def upto(self, i: int) -> int:
        """How many per-step entries belong to records <= i."""
        return bisect_right(self.idx, i)
