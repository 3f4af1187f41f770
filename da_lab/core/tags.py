"""Declarative-Attention tags: parse them and trap them in a decoded token stream.

Two dialects, one machine. The design card's (`<focus C3,C7>`, `<local N>`) and the paper's
(Ho et al. 2026, arXiv 2609.02737; reference implementation `declarative-attention`):

    <global>                     attend to everything
    <local>  | <local N>         no chunks (card: N >= 1 keeps just the N most recent blocks)
    <focus IDS>                  the listed chunks            (card: C3,C7  C2-C5; paper: 2, 5)
    <focus magic_chunks="IDS">   the same, as an attribute    (also chunks= chunk= ids= id=)
    </focus> </local> </global>  restore the directive in force when the matching tag opened
    IDS  := ITEM ("," ITEM)*     ITEM := ID | ID "-" ID (ascending)    ID := ["C"|"c"] DIGITS

Keywords are case-insensitive (as HTML's are); a space or tab separates a keyword from its
arguments; `<focus .../>` is an opening tag; ids are 1-based and every number is in 1..10**6.
Every complete tag with a DA keyword opens a scope, even one refused (so its closing tag pairs
with it and changes nothing); a closing tag unwinds to the last scope of its keyword, and one
that closes nothing is reported and ignored. `<answer>` and every other tag are text. A '<' that
does not go on to spell a DA keyword followed by '>', ' ', '\\t' or '/' is ordinary text and is
released silently; once a keyword is complete the candidate is a DA tag: it ends at '>'
(trapped or refused), or is malformed on a newline, a second '<', or on growing past
max_tag_len characters. docs/protocol.md lists where this differs from the reference.
"""

from __future__ import annotations

import dataclasses
import re

from da_lab.core.directive import (
    DIALECTS,
    Closing,
    Directive,
    Event,
    EventKind,
    Mode,
    format_intervals,
    tag_text,
)

__all__ = [
    "Mode", "Directive", "Closing", "EventKind", "Event", "DIALECTS", "parse_tag", "tag_text",
    "TagStream", "MAX_DEPTH",
]

MAX_NUMBER = 10**6
_MAX_DIGITS = len(str(MAX_NUMBER))
# Scopes kept open: the card's dialect never closes its tags, so the oldest go past this.
MAX_DEPTH = 64
# The attribute names that carry chunk ids, in the reference's order of precedence.
CHUNK_ATTRS = ("magic_chunks", "chunks", "chunk", "ids", "id")

# ---------------------------------------------------------------------------------------------
# Parsing one complete tag

_NUM_RE = re.compile(r"[0-9]+")  # ASCII only: str.isdigit / \d would accept e.g. Arabic digits
_ITEM_RE = re.compile(r"[Cc]?([0-9]+)(?:-[Cc]?([0-9]+))?")
_DASH_RE = re.compile(r"[ \t]*-[ \t]*")
_ATTR_RE = re.compile(r"""([A-Za-z_][\w:.-]*)[ \t]*=[ \t]*("[^"]*"|'[^']*'|[^ \t"'=<>`]+)""")
_OPEN_RE = re.compile(r"<([A-Za-z]+)(?:[ \t/](.*))?>", re.DOTALL)
_CLOSE_RE = re.compile(r"</([A-Za-z]+)[ \t]*>")
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


def _parse_ids(value: str) -> list[tuple[int, int]]:
    """'C2-C5, C7' / '2, 5' / '2 5' -> [(2, 5), (7, 7)]; an empty item is malformed."""
    value = _DASH_RE.sub("-", value.strip(_BLANK))
    if not value:
        raise _Malformed("<focus> needs at least one chunk id")
    intervals = []
    for raw in value.split(","):
        items = raw.split()
        if not items:
            raise _Malformed(f"empty chunk id in {value!r}")
        for item in items:
            m = _ITEM_RE.fullmatch(item)
            if m is None:
                raise _Malformed(f"bad chunk id {item!r} (expected 3, C3 or C2-C5)")
            lo = _number(m.group(1), "chunk id")
            hi = lo if m.group(2) is None else _number(m.group(2), "chunk id")
            if hi < lo:
                raise _Malformed(f"descending range C{lo}-C{hi}")
            intervals.append((lo, hi))
    return intervals


def _focus_ids(args: str) -> list[tuple[int, int]]:
    if "=" not in args:
        return _parse_ids(args)               # bare ids: <focus C3,C7> or <focus 2, 5>
    attrs, pos = {}, 0
    while pos < len(args):                     # name=value pairs, blank-separated
        m = _ATTR_RE.match(args, pos)
        rest = args[m.end():] if m else ""
        if m is None or (rest and rest[0] not in _BLANK):
            raise _Malformed(f"bad attributes {args!r} (expected magic_chunks=\"2,5\")")
        v = m.group(2)
        attrs[m.group(1).lower()] = v[1:-1] if v[0] in "\"'" else v   # last one wins, as in HTML
        pos = len(args) - len(rest.lstrip(_BLANK))
    name = next((a for a in CHUNK_ATTRS if a in attrs), None)
    if name is None:
        raise _Malformed(f"<focus> names no chunks: give {CHUNK_ATTRS[0]}=\"2,5\"")
    return _parse_ids(attrs[name])


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
    return f"unknown chunk{plural} {format_intervals(unknown)} (prompt has {has})"


def parse_tag(text: str, n_chunks: int | None = None) -> Directive | Closing | Event:
    """Parse one complete tag such as "<focus C3,C7>", '<focus magic_chunks="2">' or "</focus>".

    Returns the Directive (opening tags), the Closing (closing tags), or an Event
    (MALFORMED_TAG / UNKNOWN_CHUNK, offset=len(text)) when the tag is invalid. Never raises.
    """
    if not isinstance(text, str):
        return Event(EventKind.MALFORMED_TAG, 0, repr(text), None, "tag is not a string")

    def bad(kind: EventKind, detail: str) -> Event:
        return Event(kind, len(text), text, None, detail)

    if (m := _CLOSE_RE.fullmatch(text)) is not None:
        if m.group(1).lower() in Mode.__members__.values():
            return Closing(Mode(m.group(1).lower()))
    m = _OPEN_RE.fullmatch(text)
    if m is None or m.group(1).lower() not in Mode.__members__.values():
        return bad(EventKind.MALFORMED_TAG, "not a <global>, <local> or <focus> tag")
    keyword, args = m.group(1).lower(), (m.group(2) or "")
    try:
        if text[len(keyword) + 1] == "/" and args.strip(_BLANK):
            raise _Malformed("'/' inside tag")
        # <focus C3/> and <global/> are opening tags, as HTML reads them.
        args = args.strip(_BLANK).removesuffix("/").rstrip(_BLANK)
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
        intervals = _focus_ids(args)
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

_KEYWORDS = frozenset(f"<{s}{m.value}" for m in Mode for s in ("", "/"))
_PREFIXES = frozenset(k[:i] for k in _KEYWORDS for i in range(1, len(k) + 1))
_MIN_TAG_LEN = len("<global>")
GLOBAL = Directive()  # every request starts here
# Chars that end a DA tag candidate (trap, or malformed).
_STOP_RE = re.compile(r"[<>\n]")


class TagStream:
    """Traps DA tags in text fed piece by piece; one instance per request.

    Events depend only on the concatenation of everything fed, never on how it was split.
    """

    def __init__(
        self,
        n_chunks: int | None = None,
        max_tag_len: int = 256,
        directive: Directive = GLOBAL,
    ) -> None:
        if max_tag_len < _MIN_TAG_LEN:
            raise ValueError(f"max_tag_len must be >= {_MIN_TAG_LEN}, got {max_tag_len}")
        self._n_chunks = n_chunks
        self._max = max_tag_len
        self._directive = directive
        self._buf = ""  # the partial tag held, '' when none
        self._in_tag = False  # False: buf is a keyword prefix; True: keyword + ' ' seen
        self._offset = 0
        # Open scopes, outermost first: (keyword, the directive in force when it opened).
        self._stack: list[tuple[Mode, Directive]] = []

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

    @property
    def stack(self) -> tuple[str, ...]:
        """The keywords of the open scopes, outermost first (what a closing tag can close)."""
        return tuple(k.value for k, _ in self._stack)

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
                # Keyword prefix: at most 8 chars, so char by char is cheap.
                c = text[i]
                i += 1
                grown = buf + c
                key = buf.lower()
                if grown.lower() in _PREFIXES:
                    buf = grown
                elif key in _KEYWORDS and c == ">":
                    self._trap(grown, base + i, events)
                    buf = ""
                elif key in _KEYWORDS and c in " \t/":
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
        if isinstance(result, Closing):
            self._close(tag, result.mode, offset, events)
            return
        if tag[1] != "/":
            # Any opening DA tag opens a scope, a refused one too: its closing tag then pairs
            # with it and restores what it found, which is what it left in force.
            if len(self._stack) >= MAX_DEPTH:
                del self._stack[0]
            keyword = Mode(re.match(r"<([A-Za-z]+)", tag).group(1).lower())
            self._stack.append((keyword, self._directive))
        if isinstance(result, Event):
            events.append(dataclasses.replace(result, offset=offset))
            return
        self._set(result, tag, offset, events)

    def _close(self, tag: str, mode: Mode, offset: int, events: list[Event]) -> None:
        for k in range(len(self._stack) - 1, -1, -1):
            if self._stack[k][0] is mode:
                restored = self._stack[k][1]
                del self._stack[k:]
                self._set(restored, tag, offset, events)
                return
        self._malformed(tag, offset, f"{tag} closes no open <{mode.value}>: ignored", events)

    def _set(self, new: Directive, tag: str, offset: int, events: list[Event]) -> None:
        old = self._directive
        events.append(Event(EventKind.TAG_TRAPPED, offset, tag, new, str(new)))
        if new != old:
            self._directive = new
            events.append(Event(EventKind.MODE_CHANGED, offset, tag, new, f"{old} -> {new}"))
