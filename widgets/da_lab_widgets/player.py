"""The player shared by every diagram, and the one widget that carries a run to the browser.

The browser draws and plays (static/*.js): it keeps every step it was sent, so ▶, step −1/+1,
the slider and the speed are local and instant. The kernel sends each step once, compactly
(packets.py), never a figure: at creation the steps there are (a whole recording, or a live
run's first step), then each new one as the engine makes it. In a live run, ▶ at the last step
asks for the next one and the engine runs exactly that one step ("follow the engine"); the step
on screen comes back to the kernel as `player.i`.

`player.step()`, `player.goto(i)` and `player.new_request()` work from Python as before (and
headless, with no browser at all). A new page view (a second tab, a reload) says which steps it
has and gets the rest.
"""

from __future__ import annotations

import time
import uuid

import anywidget
from traitlets import Bytes, Dict, Unicode

from .bundle import css, esm
from .packets import RunEncoder
from .source import add_hint

# What a saved notebook shows where a player was when its widget state is gone (a kernel
# restarted and the notebook saved since: JupyterLab then keeps no state for it, and `make lab`'s
# save hook, da_lab_widgets/saved_state.py, drops the widget view so this shows instead of
# JupyterLab's "model not found").
PLACEHOLDER = ('<div class="da-player-placeholder" style="padding:8px 12px;border:1px dashed #999;'
               'color:#333;font-size:13px">▶ The player was here: run this cell (or Run All) '
               'to start it again. The kernel that drew it is gone, and so are its steps.</div>')


class PlayerWidget(anywidget.AnyWidget):
    """What the notebook displays: the player and its diagrams, drawn in the browser."""

    _esm = esm()
    _css = css()
    _uid = Unicode("").tag(sync=True)
    config = Dict().tag(sync=True)
    _base = Bytes(b"").tag(sync=True)       # the steps known when the widget was made

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)     # anywidget's: (data, metadata)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if data:        # JupyterLab draws the widget view; the placeholder is the fallback
            data["text/html"] = PLACEHOLDER
        return bundle


class Player:
    def __init__(self, source, diagrams, *, speed: int | None = None,
                 interval_ms: int | None = None) -> None:
        """`speed` in steps per second (1-60); `interval_ms`, the older spelling, is ms a step."""
        self.source = source
        self.diagrams = list(diagrams)
        self.step_ms: list[float] = []     # one entry per engine step a live player ran
        self.send_ms: list[float] = []     # one entry per message to the browser (encode + send)
        self.sent_bytes: list[int] = []    # the packet bytes of each message
        self.i: int | None = None          # the step on screen
        self.note = ""
        self.ended = ""                     # why a followed source grows no more
        self.followed: str | None = None    # the request every diagram follows (new_request)
        if speed is None:
            speed = round(1000 / interval_ms) if interval_ms else 3
        self.speed = max(1, min(60, int(speed)))
        self.encoder = RunEncoder(source.header)
        self.uid = uuid.uuid4().hex
        # Open on the first step. A live run that has not stepped yet runs that step now (one
        # engine step, usually the prefill) so there is something real to draw.
        if not source.records and source.live:
            self._engine_step(0)
        for d in self.diagrams:
            if hasattr(d, "bind"):
                d.bind(self)
        self.encoder.extend(source.records)
        self._sent = len(self.encoder)
        self.widget = PlayerWidget(_uid=self.uid, config=self.config(kernel=True),
                                   _base=self.encoder.packet())
        self.widget.add_class("da-player-widget")
        self.widget.on_msg(self._on_msg)
        if source.records:
            self.i = 0
        else:
            self.note = "nothing to show yet: add a request, then step"

    # ---- what the browser is told --------------------------------------------------------
    def config(self, *, kernel: bool) -> dict:
        """Everything the page needs besides the steps (an exported page: kernel=False)."""
        src, recs = self.source, self.source.records
        link = next((d.highlight.key for d in self.diagrams
                     if getattr(d, "highlight", None) is not None), self.uid)
        return {"uid": self.uid, "kernel": kernel, "live": bool(src.live and kernel),
                "can_add": bool(kernel and getattr(src, "can_add", False)),
                "add_hint": add_hint(src),
                "has_lab": getattr(src, "lab", None) is not None,
                "speed": self.speed, "link": link,
                "header": {"provenance": src.header.get("provenance") or {}},
                "diagrams": [d.config(src.header, recs) for d in self.diagrams],
                "state": self.live_state() if kernel else {"done": True}}

    def live_state(self, full: bool = False) -> dict:
        state: dict = {"done": not self._engine_has_work()}
        if full and self.followed:      # a new view (a reload) follows what the others follow
            state["follow"] = self.followed
        for d in self.diagrams:
            if hasattr(d, "live_state"):
                state.update(d.live_state(self.source.records, full))
        return state

    def _engine_has_work(self) -> bool:
        if not self.source.live:
            return False
        lab = getattr(self.source, "lab", None)
        return bool(lab.has_unfinished()) if lab is not None else True   # a followed trace

    def send(self, start: int | None = None, *, full: bool = False, **state) -> None:
        """The steps from `start` (default: those not sent yet) and `state` to every view
        (`full`: all of the live state, for a view that has none)."""
        t0 = time.perf_counter()
        self.encoder.extend(self.source.records)
        n = len(self.encoder)
        start = self._sent if start is None else start
        buffers = [self.encoder.packet(start, n)] if start < n else []
        if self.source.live:
            state = {**self.live_state(full), **state}
        elif self.ended:            # a view made after the source ended learns it too
            state = {"done": True, "ended": self.ended, **state}
        self.widget.send({"type": "steps" if buffers else "state", **state}, buffers=buffers)
        self._sent = max(self._sent, n)
        self.send_ms.append((time.perf_counter() - t0) * 1e3)
        self.sent_bytes.append(len(buffers[0]) if buffers else 0)

    # ---- moving (from Python) ----------------------------------------------------------------
    def step(self) -> bool:
        """One step forward (a live source runs the engine once if needed)."""
        return self.goto(0 if self.i is None else self.i + 1)

    def goto(self, i: int) -> bool:
        """Show step i in every view, making it exist first in a live run (one engine step at
        most). False when there is none (at the end: the views say so)."""
        recs = self.source.records
        i = max(0, min(i, len(recs)))       # at most one past the end
        if i >= len(recs) and not (self.source.live and self._engine_step(i)):
            self.i = len(recs) - 1 if recs else None
            self.note = self._end_note()
            self.send(go=self.i, note=self.note)
            return False
        self.i = i
        self.note = ""
        self.send(go=i, note="")
        return True

    def _engine_step(self, i: int) -> bool:
        t0 = time.perf_counter()
        ok = self.source.ensure(i)
        if getattr(self.source, "lab", None) is not None:
            self.step_ms.append((time.perf_counter() - t0) * 1e3)
        return ok

    def source_ended(self, why: str) -> None:
        """The followed source will grow no more (a server's trace once the server stopped):
        read its last records, and let ▶ at the end say `why` and that the run is complete,
        instead of waiting for steps that will never come."""
        if hasattr(self.source, "close"):
            self.source.close()
        self.ended = (f"{why}: the run is complete ({len(self.source.records)} steps); drag "
                      "the slider back, or ▶ to watch it again")
        self.send(done=True, ended=self.ended)

    def _end_note(self) -> str:
        recs = self.source.records
        if self.ended:
            return self.ended
        if not self.source.live:
            return (f"end of the recording ({len(recs)} steps): drag the slider back to watch "
                    "it again")
        if getattr(self.source, "lab", None) is None:
            return "no new steps in the trace yet: step again when the server has run more"
        last = f"step {recs[-1].step}" if recs else "its start"
        add = ("Press “new request” to add one and keep playing, or drag the slider back."
               if getattr(self.source, "can_add", False)
               else f"{add_hint(self.source)}, then ▶; or drag the slider back.")
        return f"finished: no request is running any more (the last ended at {last}). {add}"

    # ---- new requests --------------------------------------------------------------------
    def new_request(self) -> str | None:
        """Add a request (the source's factory), follow it in every diagram and keep playing.
        Returns its id, or None (the reason is shown) when none could be added."""
        try:
            made = self.source.new_request()
        except (ValueError, RuntimeError) as e:
            self.note = f"could not add a request: {e}"
            self.send(note=self.note)
            return None
        da_id = getattr(made, "da_id", made)
        recs = self.source.records
        self.follow(da_id)
        self.goto(len(recs))             # one engine step: the request is scheduled and drawn
        self.note = str(made)
        self.send(note=self.note, play=True)
        return da_id

    def follow(self, req: str) -> None:
        """Every diagram that follows one request follows `req` from its next drawing on."""
        self.followed = req
        for d in self.diagrams:
            if hasattr(d, "req"):
                d.req = req
        self.send(follow=req)

    # ---- messages from the page ----------------------------------------------------------
    def _on_msg(self, _widget, content: dict, _buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        try:
            if kind == "hello":      # a new view: the steps it lacks, and where we are
                self.send(int(content.get("have", 0)), full=True, go=self.i, hello=True)
            elif kind == "need":     # ▶ at the last step of a live run
                have = int(content.get("have", 0))
                if have == len(self.source.records) and self.source.live:
                    self._engine_step(have)
                self.send(have, none=have >= len(self.source.records))
            elif kind == "at":
                self.i = max(0, min(int(content.get("i", 0)), len(self.source.records) - 1))
            elif kind == "new_request":
                self.new_request()
            else:
                for d in self.diagrams:
                    if hasattr(d, "on_message") and d.on_message(kind, content):
                        break
        except Exception as e:  # noqa: BLE001 - shown on the page, one line, not a traceback
            self.send(note=f"{kind}: {type(e).__name__}: {e}")
