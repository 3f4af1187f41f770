"""Parsing one complete DA tag (`parse_tag`): the grammar in core/tags.py's docstring. Pure;
never raises on what it is given. The stream machine that finds tags is core/tags.py.
"""

from __future__ import annotations

import re

from da_lab.core.directive import Closing, Directive, Event, EventKind, Mode, format_intervals

__all__ = ["parse_tag", "MAX_NUMBER", "CHUNK_ATTRS", "BLANK"]

MAX_NUMBER = 10**6
_MAX_DIGITS = len(str(MAX_NUMBER))
# The attribute names that carry chunk ids, in the reference's order of precedence.
CHUNK_ATTRS = ("magic_chunks", "chunks", "chunk", "ids", "id")

_NUM_RE = re.compile(r"[0-9]+")  # ASCII only: str.isdigit / \d would accept e.g. Arabic digits
_ITEM_RE = re.compile(r"[Cc]?([0-9]+)(?:-[Cc]?([0-9]+))?")
_DASH_RE = re.compile(r"[ \t\r\f]*-[ \t\r\f]*")
_ATTR_RE = re.compile(
    r"""([A-Za-z_][\w:.-]*)[ \t\r\f]*=[ \t\r\f]*("[^"]*"|'[^']*'|[^ \t\r\f"'=<>`]+)""")
_OPEN_RE = re.compile(r"<([A-Za-z]+)(?:[ \t\r\f/](.*))?>", re.DOTALL)
_CLOSE_RE = re.compile(r"</[ \t\r\f]*([A-Za-z]+)[ \t\r\f]*>")
# Blanks inside a tag: HTML's whitespace less the newline (a newline makes a tag malformed).
_BLANK = " \t\r\f"


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


# A tag's blanks, for the stream machine.
BLANK = _BLANK
