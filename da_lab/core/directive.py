"""What a DA tag means once parsed: the `Directive` the attention decision reads, the `Closing`
of a paper-style closing tag, and the `Event`s the tag machine reports. Pure data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Mode", "Directive", "Closing", "EventKind", "Event", "tag_text", "DIALECTS",
           "RULES", "format_intervals"]

# The design card's dialect ("card": <focus C3,C7>, <local N>) and the paper's (Ho et al. 2026,
# arXiv 2609.02737: <focus magic_chunks="3,7">, closing tags). The tag machine reads both.
DIALECTS = ("card", "paper")
# How closing tags and <global> move the mode (docs/protocol.md, "Two rule sets"):
#   reference  the reference implementation's: every DA tag opens a scope and a closing tag
#              restores the directive in force when its tag opened (a stack); <global> is a mode
#   paper      the paper's §2.3: an opening <focus>/<local> sets the mode, the matching closing
#              tag reverts to GLOBAL, and <global>/</global> make no transition
RULES = ("reference", "paper")


class Mode(enum.StrEnum):
    GLOBAL = "global"
    FOCUS = "focus"
    LOCAL = "local"


def format_intervals(intervals: list[tuple[int, int]]) -> str:
    return ",".join(f"C{a}" if a == b else f"C{a}-C{b}" for a, b in intervals)


def _runs(ids: tuple[int, ...]) -> list[tuple[int, int]]:
    """Sorted unique ids -> maximal runs of consecutive ids."""
    out: list[tuple[int, int]] = []
    for i in ids:
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def _format_ids(ids: tuple[int, ...]) -> str:
    # Runs of 3+ become ranges so that long focus lists still fit within max_tag_len.
    parts: list[tuple[int, int]] = []
    for a, b in _runs(ids):
        if b - a >= 2:
            parts.append((a, b))
        else:
            parts.extend((i, i) for i in range(a, b + 1))
    return format_intervals(parts)


@dataclass(frozen=True)
class Directive:
    """What the attention decision needs. Normalised and validated on construction."""

    mode: Mode = Mode.GLOBAL
    chunks: tuple[int, ...] = ()  # sorted, unique; only for FOCUS
    recent: int | None = None  # only for LOCAL N; None = the whole response

    def __post_init__(self) -> None:
        mode = Mode(self.mode)
        chunks = tuple(sorted({int(c) for c in self.chunks}))
        recent = None if self.recent is None else int(self.recent)
        if mode is Mode.FOCUS and not chunks:
            raise ValueError("a focus directive needs at least one chunk")
        if mode is not Mode.FOCUS and chunks:
            raise ValueError(f"chunks are only meaningful for focus, not {mode.value}")
        if chunks and chunks[0] < 1:
            raise ValueError("chunk ids are 1-based")
        if recent is not None and (mode is not Mode.LOCAL or recent < 1):
            raise ValueError("recent must be >= 1 and is only meaningful for local")
        # Frozen dataclass: normalised values have to go in through object.__setattr__.
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "chunks", chunks)
        object.__setattr__(self, "recent", recent)

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "chunks": list(self.chunks), "recent": self.recent}

    @classmethod
    def from_dict(cls, d: dict) -> Directive:
        return cls(
            mode=Mode(d.get("mode", Mode.GLOBAL.value)),
            chunks=tuple(d.get("chunks") or ()),
            recent=d.get("recent"),
        )

    def __str__(self) -> str:
        if self.mode is Mode.FOCUS:
            return f"focus {_format_ids(self.chunks)}"
        if self.mode is Mode.LOCAL and self.recent is not None:
            return f"local {self.recent}"
        return self.mode.value


@dataclass(frozen=True)
class Closing:
    """A paper-style closing tag (`</focus>`): restores the directive in force when the
    matching tag opened."""

    mode: Mode

    def __str__(self) -> str:
        return f"/{self.mode.value}"


def tag_text(directive: Directive | Closing, dialect: str = "card") -> str:
    """The canonical tag: "<focus C3,C7>" (card) or '<focus magic_chunks="3,7">' (paper), or
    "</focus>" for a Closing; parse_tag() inverts each."""
    if isinstance(directive, Closing):
        return f"</{directive.mode.value}>"
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}")
    if dialect == "card":
        return f"<{directive}>"
    if directive.mode is Mode.FOCUS:
        return f'<focus magic_chunks="{",".join(map(str, directive.chunks))}">'
    if directive.recent is not None:
        raise ValueError("the paper's protocol has no <local N>: use the card dialect")
    return f"<{directive.mode.value}>"


class EventKind(enum.StrEnum):
    TAG_TRAPPED = "tag_trapped"
    MODE_CHANGED = "mode_changed"
    MALFORMED_TAG = "malformed_tag"
    UNKNOWN_CHUNK = "unknown_chunk"


@dataclass(frozen=True)
class Event:
    kind: EventKind
    offset: int  # stream offset just after the char that decided the event
    text: str  # raw tag text involved
    directive: Directive | None = None  # the new directive for TAG_TRAPPED / MODE_CHANGED
    detail: str = ""

    def to_dict(self) -> dict:
        return {
            "kind": self.kind.value,
            "offset": self.offset,
            "text": self.text,
            "directive": None if self.directive is None else self.directive.to_dict(),
            "detail": self.detail,
        }
