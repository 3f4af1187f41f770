"""Declarative-Attention tags: parse them and trap them in a decoded token stream.

Grammar (keywords are lower-case; only a space may separate a keyword from its arguments):
    <global>                  attend to everything
    <local>  | <local N>      attend to the response only (N >= 1: just the N most recent blocks)
    <focus IDS>               attend to the listed prompt chunks
    IDS  := ITEM ("," ITEM)*  ITEM := ID | ID "-" ID (ascending)   ID := ("C" | "c") DIGITS
Spaces after commas, around "-" and around the arguments are tolerated; ids are 1-based and
every number must be in 1..10**6. A '<' that does not go on to spell `<global`, `<local` or
`<focus` followed by '>' or ' ' is ordinary text and is released silently. Once a keyword is
complete the candidate is a DA tag: it ends at '>' (trapped or malformed), or is malformed on a
newline, a second '<', or on growing past max_tag_len characters.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass

__all__ = [
    "Mode",
    "Directive",
    "EventKind",
    "Event",
    "parse_tag",
    "tag_text",
    "TagStream",
]

MAX_NUMBER = 10**6
_MAX_DIGITS = len(str(MAX_NUMBER))


class Mode(enum.StrEnum):
    GLOBAL = "global"
    FOCUS = "focus"
    LOCAL = "local"


def _format_intervals(intervals: list[tuple[int, int]]) -> str:
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
    return _format_intervals(parts)


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


def tag_text(directive: Directive) -> str:
    """Canonical tag for a directive, e.g. "<focus C3,C7>"; parse_tag() inverts it."""
    return f"<{directive}>"


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


# ---------------------------------------------------------------------------------------------
# Parsing one complete tag

_TAG_RE = re.compile(r"<(global|local|focus)(?: (.*))?>", re.DOTALL)
_NUM_RE = re.compile(r"[0-9]+")  # ASCII only: str.isdigit / \d would accept e.g. Arabic digits
_ITEM_RE = re.compile(r"[Cc]([0-9]+)(?:[ \t]*-[ \t]*[Cc]([0-9]+))?")
_BLANK = " \t"


class _Malformed(Exception):
    pass


def _number(digits: str, what: str) -> int:
    # Bound the length before int(): huge digit strings would be slow (or hit the int limit).
    core = digits.lstrip("0") or "0"
    if len(core) > _MAX_DIGITS or int(core) > MAX_NUMBER:
        raise _Malformed(f"{what} {digits} is larger than {MAX_NUMBER}")
    value = int(core)
    if value < 1:
        raise _Malformed(f"{what} must be >= 1, got {digits}")
    return value


def _parse_focus(args: str) -> list[tuple[int, int]]:
    if not args:
        raise _Malformed("<focus> needs at least one chunk id")
    intervals = []
    for raw in args.split(","):
        item = raw.strip(_BLANK)
        m = _ITEM_RE.fullmatch(item)
        if m is None:
            raise _Malformed(f"bad chunk id {item!r} (expected C3 or C2-C5)")
        lo = _number(m.group(1), "chunk id")
        hi = lo if m.group(2) is None else _number(m.group(2), "chunk id")
        if hi < lo:
            raise _Malformed(f"descending range C{lo}-C{hi}")
        intervals.append((lo, hi))
    return intervals


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _unknown_chunk_detail(unknown: list[tuple[int, int]], n_chunks: int) -> str:
    unknown = _merge(unknown)
    plural = "s" if len(unknown) > 1 or unknown[0][0] != unknown[0][1] else ""
    has = f"C1..C{n_chunks}" if n_chunks > 0 else "no chunks"
    return f"unknown chunk{plural} {_format_intervals(unknown)} (prompt has {has})"


def parse_tag(text: str, n_chunks: int | None = None) -> Directive | Event:
    """Parse one complete tag such as "<focus C3,C7>".

    Returns the Directive, or an Event (MALFORMED_TAG / UNKNOWN_CHUNK, offset=len(text)) when
    the tag is invalid. Never raises.
    """
    if not isinstance(text, str):
        return Event(EventKind.MALFORMED_TAG, 0, repr(text), None, "tag is not a string")

    def bad(kind: EventKind, detail: str) -> Event:
        return Event(kind, len(text), text, None, detail)

    m = _TAG_RE.fullmatch(text)
    if m is None:
        return bad(EventKind.MALFORMED_TAG, "not a <global>, <local> or <focus> tag")
    keyword, args = m.group(1), (m.group(2) or "").strip(_BLANK)
    try:
        if keyword == "global":
            if args:
                raise _Malformed("<global> takes no arguments")
            return Directive(Mode.GLOBAL)
        if keyword == "local":
            if not args:
                return Directive(Mode.LOCAL)
            if _NUM_RE.fullmatch(args) is None:
                raise _Malformed(f"<local N> needs a whole number N >= 1, got {args!r}")
            return Directive(Mode.LOCAL, recent=_number(args, "N"))
        intervals = _parse_focus(args)
    except _Malformed as exc:
        return bad(EventKind.MALFORMED_TAG, str(exc))
    if n_chunks is not None:
        # Check bounds on the intervals, before expanding them into ids.
        unknown = [(max(lo, n_chunks + 1), hi) for lo, hi in intervals if hi > n_chunks]
        if unknown:
            return bad(EventKind.UNKNOWN_CHUNK, _unknown_chunk_detail(unknown, n_chunks))
    ids = tuple(i for lo, hi in _merge(intervals) for i in range(lo, hi + 1))
    return Directive(Mode.FOCUS, chunks=ids)


# ---------------------------------------------------------------------------------------------
# The per-request stream state machine

_KEYWORDS = frozenset({"<global", "<local", "<focus"})
_PREFIXES = frozenset(k[:i] for k in _KEYWORDS for i in range(1, len(k) + 1))
_MIN_TAG_LEN = len("<global>")
# Chars that end a DA tag candidate (trap, or malformed).
_STOP_RE = re.compile(r"[<>\n]")


class TagStream:
    """Traps DA tags in text fed piece by piece; one instance per request.

    Events depend only on the concatenation of everything fed, never on how it was split.
    """

    def __init__(
        self,
        n_chunks: int | None = None,
        max_tag_len: int = 64,
        directive: Directive = Directive(),
    ) -> None:
        if max_tag_len < _MIN_TAG_LEN:
            raise ValueError(f"max_tag_len must be >= {_MIN_TAG_LEN}, got {max_tag_len}")
        self._n_chunks = n_chunks
        self._max = max_tag_len
        self._directive = directive
        self._buf = ""  # the partial tag held, '' when none
        self._in_tag = False  # False: buf is a keyword prefix; True: keyword + ' ' seen
        self._offset = 0

    @property
    def buffer(self) -> str:
        return self._buf

    @property
    def directive(self) -> Directive:
        return self._directive

    @property
    def mode(self) -> Mode:
        return self._directive.mode

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def n_chunks(self) -> int | None:
        return self._n_chunks

    @property
    def max_tag_len(self) -> int:
        return self._max

    def feed(self, text: str) -> list[Event]:
        """Consume one decoded piece; return the events it completed."""
        if not isinstance(text, str):
            raise TypeError(f"feed() takes str, not {type(text).__name__}")
        # Fast path: the common token has no '<' and nothing is pending.
        if not self._buf and "<" not in text:
            self._offset += len(text)
            return []
        events: list[Event] = []
        buf, in_tag, base, limit = self._buf, self._in_tag, self._offset, self._max
        i, n = 0, len(text)
        while i < n:
            if not buf:
                j = text.find("<", i)
                if j < 0:
                    break
                buf, in_tag, i = "<", False, j + 1
                continue
            if not in_tag:
                # Keyword prefix: at most 7 chars, so char by char is cheap.
                c = text[i]
                i += 1
                grown = buf + c
                if grown in _PREFIXES:
                    buf = grown
                elif buf in _KEYWORDS and c == ">":
                    self._trap(grown, base + i, events)
                    buf = ""
                elif buf in _KEYWORDS and c == " ":
                    buf, in_tag = grown, True
                else:
                    # Not a DA tag, just text. A '<' here may itself open a new candidate.
                    buf = "<" if c == "<" else ""
                continue
            # Inside a DA tag: jump to the next stop char within the room left.
            room = limit - len(buf)
            m = _STOP_RE.search(text, i, min(n, i + room + 1))
            if m is None:
                if i + room < n:
                    # The char at i+room would push the tag past max_tag_len.
                    buf += text[i : i + room]
                    i += room + 1
                    self._malformed(buf, base + i, f"tag longer than {limit} characters", events)
                    buf = ""
                else:
                    buf += text[i:]
                    i = n
                continue
            k = m.start()
            buf += text[i:k]
            c = text[k]
            i = k + 1
            if c == ">":
                if len(buf) + 1 > limit:
                    self._malformed(buf, base + i, f"tag longer than {limit} characters", events)
                else:
                    self._trap(buf + ">", base + i, events)
                buf = ""
            elif c == "\n":
                self._malformed(buf, base + i, "newline inside tag", events)
                buf = ""
            else:  # '<': this candidate is broken, the new '<' starts another
                self._malformed(buf, base + i, "'<' inside tag", events)
                buf, in_tag = "<", False
        self._buf, self._in_tag = buf, in_tag
        self._offset = base + n
        return events

    def _malformed(self, text: str, offset: int, detail: str, events: list[Event]) -> None:
        events.append(Event(EventKind.MALFORMED_TAG, offset, text, None, detail))

    def _trap(self, tag: str, offset: int, events: list[Event]) -> None:
        result = parse_tag(tag, self._n_chunks)
        if isinstance(result, Event):
            events.append(dataclasses.replace(result, offset=offset))
            return
        old = self._directive
        events.append(Event(EventKind.TAG_TRAPPED, offset, tag, result, str(result)))
        if result != old:
            self._directive = result
            events.append(
                Event(EventKind.MODE_CHANGED, offset, tag, result, f"{old} -> {result}")
            )
