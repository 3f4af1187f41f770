"""Declarative-Attention tags: parse them and trap them in a decoded token stream.

Two dialects, one machine. The design card's (`<focus C3,C7>`, `<local N>`) and the paper's
(Ho et al. 2026, arXiv 2609.02737; reference implementation `declarative-attention`):

    <global>                     attend to everything
    <local>  | <local N>         no chunks (card: N >= 1 keeps just the N most recent blocks)
    <focus IDS>                  the listed chunks            (card: C3,C7  C2-C5; paper: 2, 5)
    <focus magic_chunks="IDS">   the same, as an attribute    (also chunks= chunk= ids= id=)
    </focus> </local> </global>  closing tags: what they do depends on the rules (below)
    IDS  := ITEM ("," ITEM)*     ITEM := ID | ID "-" ID (ascending)    ID := ["C"|"c"] DIGITS

Two rule sets (`rules=`, directive.RULES). "reference" (the default; `declarative-attention`'s
stack): every complete tag with a DA keyword opens a scope, even one refused (so its closing tag
pairs with it and changes nothing); a closing tag unwinds to the last scope of its keyword. The
paper's (§2.3): an opening <focus>/<local> sets the mode, the closing tag of the mode in force
reverts to GLOBAL, and <global>/</global> are prompting structure that make no transition.
Under both, a closing tag that closes nothing is reported and ignored.

Keywords are case-insensitive (as HTML's are); a blank (space, tab, CR or FF: HTML's whitespace
less the newline) separates a keyword from its arguments, and may follow "</" (`</ focus>`);
`<focus .../>` is an opening tag; ids are 1-based and every number is in 1..10**6. `<answer>` and
every other tag are text. A '<' that does not go on to spell a DA keyword followed by '>', '/'
or a blank is ordinary text and is released silently, except that a keyword followed by a
newline or another whitespace or control character is reported as a malformed tag (HTML may
read it as a tag; here it is text). Once a keyword and a blank are seen the candidate is a DA
tag: it ends at '>' (trapped or refused), or is malformed on a newline, a second '<', or on
growing past max_tag_len characters. docs/protocol.md lists where this differs from the
reference.
"""

from __future__ import annotations

import copy
import dataclasses
import re

from da_lab.core.directive import (
    DIALECTS,
    RULES,
    Closing,
    Directive,
    Event,
    EventKind,
    Mode,
    tag_text,
)
from da_lab.core.tag_parse import BLANK as _BLANK
from da_lab.core.tag_parse import MAX_NUMBER, parse_tag

__all__ = [
    "Mode", "Directive", "Closing", "EventKind", "Event", "DIALECTS", "RULES", "parse_tag",
    "tag_text", "TagStream", "MAX_DEPTH", "MAX_NUMBER",
]

# Scopes kept open: the card's dialect never closes its tags, so the oldest go past this.
MAX_DEPTH = 64

# ---------------------------------------------------------------------------------------------
# The per-request stream state machine

_KEYWORDS = frozenset(f"<{s}{m.value}" for m in Mode for s in ("", "/"))
_PREFIXES = frozenset(k[:i] for k in _KEYWORDS for i in range(1, len(k) + 1))
_MIN_TAG_LEN = len("<global>")
GLOBAL = Directive()  # every request starts here
# Chars that end a DA tag candidate (trap, or malformed).
_STOP_RE = re.compile(r"[<>\n]")


def _key(buf: str) -> str:
    """A candidate's keyword part in lower case, without the whitespace HTML allows after '</'
    (held while the keyword is spelled; the odd kinds are reported once it is complete)."""
    if buf.startswith("</"):
        return "</" + buf[2:].lstrip().lower()
    return buf.lower()


def _odd(text: str) -> str | None:
    """The first whitespace or control character in `text` that is not a tag's blank."""
    return next((c for c in text if c not in _BLANK and (c.isspace() or c < " " or c == "\x7f")),
                None)


def _odd_detail(c: str) -> str:
    if c == "\n":
        return "newline inside tag"
    return f"{c!r} inside tag: a tag's blanks are space, tab, CR and FF, so this is text"


class TagStream:
    """Traps DA tags in text fed piece by piece; one instance per request. Never raises on
    what it is fed: a tag it can't use is an event, and the directive stays as it was.

    Events depend only on the concatenation of everything fed, never on how it was split.
    `rules`: "reference" (the reference implementation's stack of scopes, the default) or
    "paper" (the paper's §2.3: a closing tag reverts to GLOBAL; <global> makes no transition).
    """

    def __init__(
        self,
        n_chunks: int | None = None,
        max_tag_len: int = 256,
        directive: Directive = GLOBAL,
        rules: str = "reference",
    ) -> None:
        if max_tag_len < _MIN_TAG_LEN:
            raise ValueError(f"max_tag_len must be >= {_MIN_TAG_LEN}, got {max_tag_len}")
        if rules not in RULES:
            raise ValueError(f"rules must be one of {', '.join(RULES)}, not {rules!r}")
        self._n_chunks = n_chunks
        self._max = max_tag_len
        self._directive = directive
        self._rules = rules
        self._buf = ""  # the partial tag held, '' when none
        self._in_tag = False  # False: buf is a keyword prefix; True: keyword + blank seen
        self._offset = 0
        # Open scopes, outermost first: (keyword, the directive in force when it opened).
        # The reference's rules only: the paper's machine holds one mode and no scopes.
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
    def rules(self) -> str:
        return self._rules

    @property
    def stack(self) -> tuple[str, ...]:
        """The keywords a closing tag can close now, outermost first: the open scopes (the
        reference's rules), or the mode in force unless it is GLOBAL (the paper's)."""
        if self._rules == "paper":
            return () if self.mode is Mode.GLOBAL else (self.mode.value,)
        return tuple(k.value for k, _ in self._stack)

    def fork(self) -> TagStream:
        """An independent copy in the same state: feed it to see what a text would do."""
        twin = copy.copy(self)
        twin._stack = list(self._stack)
        return twin

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
                # Keyword prefix: a few chars (more only with blanks after '</'), char by char.
                c = text[i]
                i += 1
                buf, in_tag = self._spell(buf, c, base + i, events)
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

    def _spell(self, buf: str, c: str, offset: int, events: list[Event]) -> tuple[str, bool]:
        """One char after a keyword prefix `buf`: the new (buffer, inside a tag)."""
        grown = buf + c
        if _key(grown) in _PREFIXES:
            # Only whitespace after '</' grows a prefix past a keyword: bounded like a tag.
            return (grown if len(grown) <= self._max else ""), False
        if _key(buf) not in _KEYWORDS:
            return ("<" if c == "<" else ""), False     # not a DA tag, just text
        odd = _odd(buf)             # e.g. a newline between '</' and the keyword
        if c == ">" or c == "/" or c in _BLANK:
            if odd is not None:
                self._malformed(grown, offset, _odd_detail(odd), events)
                return "", False
            if c == ">":
                self._trap(grown, offset, events)
                return "", False
            return grown, True
        odd = odd or _odd(c)
        if odd is not None:         # <focus\n2>, <local\v>, </focus\x00>: HTML may read a tag
            self._malformed(grown, offset, _odd_detail(odd), events)
            return "", False
        return ("<" if c == "<" else ""), False          # <focused, <local-: text

    def _malformed(self, text: str, offset: int, detail: str, events: list[Event]) -> None:
        events.append(Event(EventKind.MALFORMED_TAG, offset, text, None, detail))

    def _trap(self, tag: str, offset: int, events: list[Event]) -> None:
        result = parse_tag(tag, self._n_chunks)
        if isinstance(result, Closing):
            self._close(tag, result.mode, offset, events)
            return
        if tag[1] != "/" and self._rules == "reference":
            # Any opening DA tag opens a scope, a refused one too: its closing tag then pairs
            # with it and restores what it found, which is what it left in force.
            if len(self._stack) >= MAX_DEPTH:
                del self._stack[0]
            keyword = Mode(re.match(r"<([A-Za-z]+)", tag).group(1).lower())
            self._stack.append((keyword, self._directive))
        if isinstance(result, Event):
            events.append(dataclasses.replace(result, offset=offset))
            return
        if result.mode is Mode.GLOBAL and self._rules == "paper":
            self._stay(tag, offset, events)
            return
        self._set(result, tag, offset, events)

    def _close(self, tag: str, mode: Mode, offset: int, events: list[Event]) -> None:
        if self._rules == "paper":
            if mode is Mode.GLOBAL:
                self._stay(tag, offset, events)
            elif self.mode is mode:
                self._set(GLOBAL, tag, offset, events)
            else:
                self._malformed(tag, offset, f"{tag} closes no open <{mode.value}> (the mode is "
                                f"{self.mode.value}): ignored", events)
            return
        for k in range(len(self._stack) - 1, -1, -1):
            if self._stack[k][0] is mode:
                restored = self._stack[k][1]
                del self._stack[k:]
                self._set(restored, tag, offset, events)
                return
        self._malformed(tag, offset, f"{tag} closes no open <{mode.value}>: ignored", events)

    def _stay(self, tag: str, offset: int, events: list[Event]) -> None:
        """The paper's <global> and </global>: trapped, and no transition."""
        d = self._directive
        events.append(Event(EventKind.TAG_TRAPPED, offset, tag, d,
                            f"{d}: {tag} makes no transition under the paper's rules"))

    def _set(self, new: Directive, tag: str, offset: int, events: list[Event]) -> None:
        old = self._directive
        events.append(Event(EventKind.TAG_TRAPPED, offset, tag, new, str(new)))
        if new != old:
            self._directive = new
            events.append(Event(EventKind.MODE_CHANGED, offset, tag, new, f"{old} -> {new}"))
