"""Diagram 4's "steer it yourself" panel (its kernel side), and the note that says what its
stream shows.

A button in the page makes the live engine's director write a tag into the followed request's
own output stream from the engine's next token (`Lab.steer`); the hook then traps it like a tag
the model wrote. With every step sent to the page, each button's state comes along: whether its
tag would be written and would change anything (`Lab.steer_check`), or why not. So the page
never offers a tag that then isn't written: a replay, an earlier step on screen (the page knows
that itself), a finished request, no room left, or a tag that repeats the mode in effect (LOCAL
while LOCAL, FOCUS on the chunks already focused) all turn buttons off, with the reason shown.
"""

from __future__ import annotations

import html
from pathlib import Path

from da_lab.core.tags import Directive, Mode, tag_text

from .source import added_entry

REPLAY = ("a recording: it replays steps that already ran, so there is nothing to steer "
          "(steering is in a lesson whose first cell starts an engine)")
EARLIER = ("you are looking at step {shown}, the engine is at step {latest}: a tag is written "
           "at the engine's next token, so move the slider to the last step first")


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


class SteeringPanel:
    """Which buttons work now and why the others don't, the chunks picked for FOCUS, and the
    outcome of the last press."""

    def __init__(self, lab, header: dict) -> None:
        self.lab = lab
        self.header = header
        self.req: str | None = None
        self.n_chunks = 0
        self.picked: tuple[int, ...] = ()
        self.status = ""              # the outcome of the last press (kept until the next)
        self.status_step: int | None = None     # the engine's step when it was pressed
        self.can_add = False          # the player has a "+ new request" button
        self.add_hint = "lab.add_request in a cell, then a new Player"   # or the lesson's way

    # ---- following a request ---------------------------------------------------------------
    def bind(self, records: list, req: str | None) -> None:
        """The diagram follows `req` from now on (its first request, or a new one). A request
        just added has no record yet: its chunks are read again once its first step has run
        (so "+ new request" does not leave the panel without chunks)."""
        if req is None or (req == self.req and self.n_chunks):
            return
        if req != self.req:
            # a new request: nothing ticked (the model picks its own chunk; a tick here would
            # suggest one), and the last press's outcome was about the request before
            self.req, self.picked = req, ()
            self.status, self.status_step = "", None
        lay = (added_entry(records, req) or {}).get("layout")
        if lay is None and self.lab is not None and req in self.lab.requests:
            # not stepped yet: the layout the Lab was given
            lay = getattr(getattr(self.lab.requests[req].get("prompt"), "layout", None),
                          "to_dict", dict)()
        # the card's whole-block chunks or the paper's spans: one checkbox per chunk either way
        self.n_chunks = len(lay.get("chunk_blocks") or lay.get("chunk_spans") or ()) \
            if isinstance(lay, dict) else 0
        self.dialect = "paper" if isinstance(lay, dict) and "chunk_spans" in lay else "card"

    def tag_for(self, mode: str, chunks=None) -> str:
        picked = tuple(chunks) if chunks is not None else self.picked
        # a request on the paper's prompt is steered with the paper's tags
        return tag_text(Directive(Mode(mode), picked if mode == Mode.FOCUS.value else ()),
                        getattr(self, "dialect", "card"))

    # ---- which buttons work now ------------------------------------------------------------
    def why_none(self) -> str | None:
        """Why no button can work now (None: each button decides for itself)."""
        if self.lab is None:
            return REPLAY
        if self.req is None:
            return "no request yet: add one, then step once"
        r = self.lab.requests.get(self.req)
        if r is None or r["finished"]:
            add = "“+ new request” in the player" if self.can_add else self.add_hint
            return (f"{self.req} has finished, and steering needs a running request: add "
                    f"one ({add}) and keep playing")
        return None

    def reasons(self) -> dict[str, str | None]:
        """Per mode, why its button can't work at the engine's latest step (None: it can)."""
        why = self.why_none()
        out = {}
        for m in Mode:
            if why is None and m is Mode.FOCUS and not self.picked:
                out[m.value] = "pick one or more chunks to focus on"
            else:
                out[m.value] = why or self.lab.steer_check(self.req, self.tag_for(m.value)).reason
        return out

    def state(self) -> dict:
        """What the page's panel shows (sent with every step of a live run)."""
        why = self.why_none()
        status = self.status
        if not status and self.req is not None:     # no press yet: what following it means now
            status = (f"following {self.req}: steer it while it runs" if why is None
                      else f"following {self.req}")
        return {"req": self.req, "chunks": [f"C{k}" for k in range(1, self.n_chunks + 1)],
                "picked": list(self.picked), "why": why, "reasons": self.reasons(),
                "status": status, "status_step": self.status_step,
                "tags": {m.value: self.tag_for(m.value) for m in Mode
                         if m is not Mode.FOCUS or self.picked}}

    def pick(self, chunks) -> None:
        self.picked = tuple(sorted({int(c) for c in chunks if 1 <= int(c) <= self.n_chunks}))

    # ---- pressing a button -----------------------------------------------------------------
    def steer(self, mode: str, chunks=None, *, shown: int | None = None,
              latest: int | None = None) -> str | None:
        """Have the director write the tag for `mode` (focus: `chunks`, else the picked ones)
        into the request's output from the engine's next token. `shown` / `latest`: the step on
        screen and the engine's (an earlier step on screen refuses). Returns the tag, or None."""
        if chunks is not None:
            self.pick(chunks)
        why = self.why_none()
        self.status_step = latest
        if why is None and shown is not None and latest is not None and shown < latest:
            why = EARLIER.format(shown=shown, latest=latest)
        if why is None and mode == Mode.FOCUS.value and not self.picked:
            why = "pick one or more chunks to focus on"
        if why is not None:
            self.status = f"could not steer: {why}"
            return None
        try:
            tag = self.tag_for(mode)
            at = self.lab.steer(self.req, tag)
        except (ValueError, KeyError) as e:
            self.status = f"could not steer: {e}"
            return None
        n = len(self.lab.encode(tag))
        self.status = (f"the director writes {tag} into {self.req}'s output at tokens "
                       f"{at}–{at + n - 1}; the hook traps it at '>' and the mode changes "
                       "the step after")
        return tag


_LEGEND = (
    '<span style="background:#ffe066;border-radius:3px">&lt;tag&gt;</span> trapped: the hook '
    "caught it at '&gt;', and the mode changes the step after · "
    "struck through: a malformed tag (hover it: why it changed nothing) · "
    '<span style="border-bottom:2px dotted #ff5400">&lt;loc</span> being written (in the '
    "hook's tag buffer)")


def stream_note(header: dict, added: dict, live: bool = True) -> str:
    """What the learner reads in the stream: the marks, and whose words the text is."""
    from da_lab.models.tiny import MODEL_NAME, TRAINED_NAME

    prov = header.get("provenance") or {}
    name = str(prov.get("model_name") or Path(str(prov.get("model", ""))).name)
    scripted = bool(added.get("tags"))
    if name == TRAINED_NAME:
        who = (f"{name} was trained to write <code>&lt;focus Ck&gt;</code> naming the chunk "
               "that holds the answer, then the answer (key, value), then stop. The lab ignores "
               "its stop token, so after the answer it babbles fragments of the records it can "
               "still see: steer FOCUS to another chunk and the babble changes.")
        if scripted:
            who += " Here the director's script also writes tags, cutting into the model's own."
    elif name == MODEL_NAME:
        who = (f"{name} has random weights: its text is noise. Every tag here is the "
               "director's: " + ("written from its script or by your buttons." if live
                                 else "written from its script."))
    else:
        by = ["the director's script"] if scripted else []
        by += ["your buttons"] if live else []
        who = (f"The text is {_escape(name)}'s own; tags come from "
               + " and ".join(by + ["the model itself, if it learned to write them"]) + ".")
    return f'<div style="font-size:11px;color:#555;margin:2px 0 4px">{who}<br>{_LEGEND}</div>'
