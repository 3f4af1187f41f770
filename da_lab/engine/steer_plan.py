"""Where a steered tag goes in a running request's output, or why it can't go anywhere.

`Lab.steer` asks the director to write a tag into a request's own output stream (hook/
director.py); `Lab.steer_check` asks the same question without writing. The answer is a
`SteerPlan`: the first output index the tag will take, or the reason it would not be written or
would change nothing. A plan that says a tag will be written is a promise the engine keeps:

- it starts at the engine's next unsampled token, past any tag the director is writing there
  and never over a tag the request's script writes later (the script's tokens would win);
- it closes (its '>') at least one token before the request's last, so the mode can change;
- it changes the directive: LOCAL while LOCAL, or FOCUS on the chunks already focused, is
  refused rather than written twice. "Already" counts the tags the director has yet to write
  before it (the script's and earlier steers'), not tags the model may write by itself; the
  tag machine's own rules decide what they leave in force (a scripted `</focus>` restores what
  its `<focus ...>` found: a copy of the request's tag machine reads them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from da_lab.core.tags import Closing, Directive, Mode, TagStream, parse_tag


@dataclass
class SteerPlan:
    at: int | None                  # first output index the tag takes (None: refused)
    ids: list[int] = field(default_factory=list)
    reason: str | None = None       # why it is refused; None: it will be written

    @property
    def ok(self) -> bool:
        return self.reason is None


def _describe(d: Directive) -> str:
    if d.mode is Mode.FOCUS:
        return "focused on " + str(d)[len("focus "):]
    return f"in {str(d).upper()} mode"


def next_index(lab, da_id: str) -> int:
    """The first output index the engine has not sampled yet for `da_id`. The Lab's token count,
    or one past what the hook last decided (async scheduling: a token still in flight)."""
    n = len(lab.requests[da_id]["token_ids"])
    st = lab.request_state(da_id)
    if st is not None and st.da_id == da_id and st.last_seq_len >= st.prompt_len:
        n = max(n, st.last_seq_len - st.prompt_len + 1)
    return n


def _place(at: int, n: int, script: list[tuple[int, int, str]]) -> int:
    """The first index >= at where n tokens overlap no scripted tag."""
    for a, k, _text in sorted(script):
        if a < at + n and at < a + k:
            at = a + k
    return at


def _directive_at(lab, da_id: str, at: int, n_chunks: int | None) -> tuple[Directive, str]:
    """The directive in effect when a tag starting at `at` is trapped, as (directive, how to
    say so): what a copy of the request's tag machine holds once it has read every scripted tag
    not fed to it yet that starts before `at` (the rest of one it is reading included)."""
    st = lab.request_state(da_id)
    stream = copy.deepcopy(st.stream) if st is not None else TagStream(n_chunks)
    seen = st.n_seen if st is not None else 0
    how = f"{da_id} is already {_describe(stream.directive)}"
    for a, k, text in sorted(lab.requests[da_id]["script"]):
        if a < at and a + k > seen:
            part = stream.buffer
            before = stream.directive
            stream.feed(text[len(part):] if a < seen and part and text.startswith(part)
                        else text)
            if stream.directive != before or isinstance(parse_tag(text, n_chunks), Closing):
                how = (f"{da_id} will already be {_describe(stream.directive)}: the director "
                       f"writes {text} from token {a}")
    return stream.directive, how


def plan(lab, da_id: str, tag: str) -> SteerPlan:
    """Where `tag` would be written into request `da_id`'s output, or why it would not."""
    r = lab.requests.get(da_id)
    if r is None:
        return SteerPlan(None, reason=f"no running request {da_id!r} to steer")
    if r["finished"]:
        return SteerPlan(None, reason=f"no running request {da_id!r} to steer: it finished "
                                      f"({len(r['token_ids'])} of {r['max_tokens']} tokens)")
    layout = getattr(r["prompt"], "layout", None)
    if layout is None or lab.session.refused(da_id) or \
            any(f["kind"] == "da_refused" for f in r["flags"]):
        # The director writes only into requests the hook tracks (a DA layout it accepted).
        return SteerPlan(None, reason=f"request {da_id!r} runs without DA (no layout, or the "
                                      "hook refused it): there is nothing to steer")
    n_chunks = layout.n_chunks if layout is not None else None
    new = parse_tag(tag, n_chunks)
    if isinstance(new, Closing):
        return SteerPlan(None, reason=f"{tag!r} closes a scope the model opened: steer with "
                                      "<global>, <local> or <focus ...> instead")
    if not isinstance(new, Directive):
        return SteerPlan(None, reason=f"{tag!r} is not a tag the hook acts on: {new.detail}")
    ids = lab.encode(tag)
    at = _place(next_index(lab, da_id), len(ids), r["script"])
    # The mode changes the step after '>': a tag that can't close before the last token
    # would be half-written and change nothing.
    room = r["max_tokens"] - at - 1
    if len(ids) > room:
        return SteerPlan(None, ids, f"request {da_id!r} has {max(room, 0)} tokens left after "
                                    f"its next one; {tag} needs {len(ids)} and one more step "
                                    "to take effect")
    now, how = _directive_at(lab, da_id, at, n_chunks)
    if now == new:
        return SteerPlan(None, ids, f"{how}; {tag} would change nothing")
    return SteerPlan(at, ids)
