"""Diagram 4's "steer it yourself" panel, and the note that says what its stream shows.

A button makes the live engine's director write a tag into the followed request's own output
stream from the engine's next token (`Lab.steer`); the hook then traps it like a tag the model
wrote. Before every step is drawn, each button asks the Lab whether its tag would be written and
would change anything (`Lab.steer_check`); a button that can't is disabled and the reason is
shown beside it. So the panel never says a tag will be written that then isn't: a replay, an
earlier step on screen, a finished request, no room left, or a tag that repeats the mode in
effect (LOCAL while LOCAL, FOCUS on the chunks already focused) all turn buttons off.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from da_lab.core.tags import Directive, Mode, parse_tag, tag_text

from .source import added_entry

REPLAY = "replay: steering needs a live engine (LIVE = True in the first cell)"


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


class SteeringPanel:
    """The buttons, the chunk picker, the outcome of the last press, and why buttons are off."""

    def __init__(self, lab, header: dict) -> None:
        self.lab = lab
        self.header = header
        self.req: str | None = None
        self._at_end = True           # the step on screen is the engine's latest
        self._latest_step = self._shown_step = None
        self.buttons: dict[str, widgets.Button] = {}
        for m in Mode:
            b = widgets.Button(description=m.value.upper(), disabled=lab is None,
                               tooltip=REPLAY if lab is None else "")
            b.add_class(f"da-steer-{m.value}")
            b.on_click(lambda _b, m=m: self.steer(m.value))
            self.buttons[m.value] = b
        self.chunk_picker = widgets.SelectMultiple(options=[], rows=4, disabled=lab is None,
                                                   description="focus on")
        self.chunk_picker.add_class("da-steer-chunks")
        self.chunk_picker.observe(lambda _c: self.refresh(), "value")
        # The outcome of the last press (kept until the next one) ...
        self.status = widgets.Label("")
        self.status.add_class("da-steer-status")
        # ... and, refreshed every step, why buttons are off right now.
        self.off = widgets.HTML()
        self.off.add_class("da-steer-off")
        self.widget = widgets.VBox([
            widgets.HTML("<b>steer it yourself</b> <span style='font-size:11px'>(a button makes "
                         "the engine write that tag into the response from its next token)</span>"),
            widgets.HBox([*self.buttons.values(), self.chunk_picker]),
            self.status, self.off])
        self.note = widgets.HTML()    # under the stream: what the learner is reading
        self.note.add_class("da-stream-note")
        self.refresh()

    # ---- following a request ---------------------------------------------------------------
    def bind(self, records: list, req: str, layout) -> None:
        """The diagram follows `req` from now on (its first request, or a new one)."""
        self.req = req
        added = added_entry(records, req) or {}
        self.note.value = stream_note(self.header, added, live=self.lab is not None)
        if layout is not None and not self.chunk_picker.options:
            self.chunk_picker.options = [f"C{k}" for k in range(1, layout.n_chunks + 1)]
            self.chunk_picker.value = [f"C{default_focus(added, layout.n_chunks)}"]

    def tag_for(self, mode: str) -> str:
        chunks = tuple(int(c[1:]) for c in self.chunk_picker.value) \
            if mode == Mode.FOCUS.value else ()
        return tag_text(Directive(Mode(mode), chunks))

    # ---- which buttons work now ------------------------------------------------------------
    def refresh(self, records: list | None = None, i: int | None = None) -> None:
        """Enable each button whose tag the engine would write now; say why the others can't."""
        if records is not None and i is not None:
            self._at_end = i >= len(records) - 1
            self._latest_step = records[-1].step if records else None
            self._shown_step = records[i].step
        why = self._why_none()
        per = {m: why for m in self.buttons}
        if why is None:
            for m in self.buttons:
                if m == Mode.FOCUS.value and not self.chunk_picker.value:
                    per[m] = "pick one or more chunks to focus on"
                    continue
                plan = self.lab.steer_check(self.req, self.tag_for(m))
                per[m] = plan.reason
        for m, b in self.buttons.items():
            b.disabled = per[m] is not None
            b.tooltip = per[m] or f"write {self.tag_for(m) if m != 'focus' else '<focus …>'} "\
                                  "into the response from the engine's next token"
        self.chunk_picker.disabled = why is not None
        if why is not None:
            self.off.value = f"<span style='font-size:11px'>steering is off: {_escape(why)}</span>"
        else:
            lines = [f"{m.upper()} is off: {_escape(r)}" for m, r in per.items() if r]
            self.off.value = (f"<span style='font-size:11px'>{'<br>'.join(lines)}</span>"
                              if lines else "")

    def _why_none(self) -> str | None:
        """Why no button can work now (None: each button decides for itself)."""
        if self.lab is None:
            return REPLAY
        if self.req is None:
            return "no request yet: add one, then step once"
        if not self._at_end:
            return (f"you are looking at step {self._shown_step}, the engine is at step "
                    f"{self._latest_step}: a tag is written at the engine's next token, so "
                    "move the slider to the last step first")
        r = self.lab.requests.get(self.req)
        if r is None or r["finished"]:
            return (f"{self.req} has finished, and steering needs a running request: add "
                    "one (“new request” beside ▶, or lab.add_request) and keep playing")
        return None

    # ---- pressing a button -----------------------------------------------------------------
    def steer(self, mode: str) -> str | None:
        """Have the director write the tag for `mode` (focus: the picked chunks) into the
        request's output from the engine's next token. Returns the tag, or None if not."""
        why = self._why_none()
        if why is not None:
            self.status.value = f"could not steer: {why}"
            return None
        try:
            tag = self.tag_for(mode)
            at = self.lab.steer(self.req, tag)
        except (ValueError, KeyError) as e:
            self.status.value = f"could not steer: {e}"
            self.refresh()
            return None
        n = len(self.lab.encode(tag))
        self.status.value = (f"the director writes {tag} into {self.req}'s output at tokens "
                             f"{at}–{at + n - 1}; the hook traps it at '>' and the mode changes "
                             "the step after")
        self.refresh()
        return tag


def default_focus(added: dict, n_chunks: int) -> int:
    """The lowest chunk no scripted <focus> names: the FOCUS button's first press then writes a
    tag the request's script does not write anyway."""
    named: set[int] = set()
    for _at, text in added.get("tags") or ():
        d = parse_tag(str(text), n_chunks)
        if isinstance(d, Directive) and d.mode is Mode.FOCUS:
            named.update(d.chunks)
    return next((k for k in range(1, n_chunks + 1) if k not in named), 1)


_LEGEND = (
    '<span style="background:#ffe066;border-radius:3px">&lt;tag&gt;</span> trapped: the hook '
    "caught it at '&gt;', and the mode changes the step after · "
    '<span style="background:#ffd6d6;text-decoration:line-through">&lt;focus C6</span> '
    "malformed: it never closed (a second '&lt;' came first, e.g. the director's tag cut into "
    "one the model had begun), so it changed nothing · "
    '<span style="border-bottom:2px dotted #ff5400">&lt;loc</span> being written (in the '
    "hook's tag buffer)")


def stream_note(header: dict, added: dict, live: bool = True) -> str:
    """What the learner reads in the stream: the marks, and whose words the text is."""
    from da_lab.engine.models import MODEL_NAME, TRAINED_NAME

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
