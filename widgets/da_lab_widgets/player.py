"""The player shared by every diagram: Play / Pause (Play's own), Step, a step slider, a speed.

Replay: the slider scrubs through recorded steps. Live: each tick past the last record asks the
source for exactly one more engine step, and playing stops when the engine has nothing left.
Play and the slider are linked in Python, not with jslink, because every value has to reach the
kernel anyway: that is where the engine steps and the diagrams are redrawn.

At the end (the engine idle, or the recording's last step) ▶ says so instead of starting over at
step 0: Play's max is kept one past the last record, so its next tick asks for a step that does
not exist and the player answers with a note. A live source made with `new_request=` adds a
"new request" button: the request joins the running engine, every diagram follows it, and
playing goes on.
"""

from __future__ import annotations

import html
import time

import ipywidgets as widgets

from .clock import StepClock

# Live Play's max: never reached; the engine running out of work is what stops a live run.
# (Play pauses itself at max, and the kernel can't raise max fast enough under a fast tick.)
LIVE_PLAY_MAX = 2**31 - 1


class Player:
    def __init__(self, source, diagrams, *, interval_ms: int = 400) -> None:
        self.source = source
        self.diagrams = list(diagrams)
        self.update_ms: list[float] = []   # one entry per redraw of all diagrams
        self.step_ms: list[float] = []     # one entry per engine step a live tick ran
        self.i: int | None = None          # record on screen
        self._syncing = False
        self._ended = False                # the note says "finished"

        n = len(source.records)
        # ▶ / ⏸: Play's traits, ticking on time and skipping what a busy page can't show
        self.play = StepClock(value=0, min=0, max=self._play_max(), step=1,
                              interval=interval_ms, description="play")
        self.play.add_class("da-play")
        self.step_button = widgets.Button(description="Step", icon="step-forward",
                                          tooltip="one engine step" if source.live
                                          else "next recorded step")
        self.step_button.add_class("da-step")
        self.slider = widgets.IntSlider(value=0, min=0, max=max(0, n - 1), description="step",
                                        continuous_update=True, readout=False)
        self.slider.add_class("da-step-slider")
        self.counter = widgets.Label("step –", layout=widgets.Layout(min_width="7em"))
        self.counter.add_class("da-step-counter")
        self.speed = widgets.IntSlider(value=interval_ms, min=50, max=2000, step=50,
                                       description="ms / step", continuous_update=False)
        self.speed.add_class("da-speed")
        widgets.link((self.speed, "value"), (self.play, "interval"))
        self.note = widgets.HTML()          # "finished", or what a new request is
        self.note.add_class("da-player-note")
        extra = []
        if source.live and getattr(source, "can_add", False):
            self.new_button = widgets.Button(description="new request", icon="plus",
                                             tooltip="add a fresh request to the running "
                                                     "engine and keep playing")
            self.new_button.add_class("da-new-request")
            self.new_button.on_click(lambda _b: self.new_request())
            extra.append(self.new_button)

        self.play.observe(self._on_play, "value")
        self.play.observe(self._on_playing, "playing")
        self.slider.observe(self._on_slider, "value")
        self.step_button.on_click(lambda _b: self.step())
        self.controls = widgets.HBox([self.play, self.step_button, self.slider, self.counter,
                                      self.speed, *extra])
        self.controls.add_class("da-player")
        self.widget = widgets.VBox([self.controls, self.note,
                                    *[d.widget for d in self.diagrams]])
        # Open on the first step. A live run that has not stepped yet runs that step now (one
        # engine step, usually the prefill) so there is something real to draw.
        if n or (source.live and source.ensure(0)):
            self.goto(0)
        else:
            self.counter.value = "step – (nothing to show yet: add a request, then Step)"

    def _play_max(self) -> int:
        # One past the last record when nothing more can come: Play at its max would start
        # over at step 0 when pressed; one tick short of it, ▶ reaches goto(n) and says "end".
        if self.source.live and self._engine_has_work():
            return LIVE_PLAY_MAX
        return len(self.source.records)

    def _engine_has_work(self) -> bool:
        lab = getattr(self.source, "lab", None)
        return bool(lab is not None and lab.has_unfinished())

    # ---- moving ----------------------------------------------------------------------------
    def step(self) -> bool:
        """One step forward (a live source runs the engine once if needed)."""
        return self.goto(0 if self.i is None else self.i + 1)

    def goto(self, i: int) -> bool:
        """Show record i, making it exist first in a live run (one engine step at most: a tick
        that arrives late must not make the engine jump ahead). False when there is none."""
        recs = self.source.records
        i = max(0, min(i, len(recs)))       # at most one past the end
        if i >= len(recs):
            t0 = time.perf_counter()
            ok = self.source.live and self.source.ensure(i)
            if self.source.live:
                self.step_ms.append((time.perf_counter() - t0) * 1e3)
            if not ok:
                last = len(recs) - 1
                if recs and self.i != last:
                    # A busy page sends Play's latest value only: a tick can jump past the last
                    # record. Show it before saying "end".
                    self.i = last
                    self._sync(last)
                    self.show(last)
                self._stop()
                self._say_end()
                return False
        if self._ended:
            self.note.value, self._ended = "", False
        self.i = i
        self._sync(i)
        self.show(i)
        return True

    def show(self, i: int) -> None:
        rec = self.source.records[i]
        t0 = time.perf_counter()
        for d in self.diagrams:
            d.show(self.source.records, i)
        self.update_ms.append((time.perf_counter() - t0) * 1e3)
        self.counter.value = f"step {rec.step}"

    def _sync(self, i: int) -> None:
        """Move the slider and Play to i without their observers moving us again."""
        self._syncing = True
        try:
            self.slider.max = max(0, len(self.source.records) - 1)
            self.slider.value = i
            self.play.max = self._play_max()
            if self.play.value != i:
                self.play.value = i
        finally:
            self._syncing = False

    def _stop(self) -> None:
        self._syncing = True
        try:
            self.play.playing = False
            self.play.max = len(self.source.records)
            if self.i is not None:
                self.play.value = self.i
        finally:
            self._syncing = False

    def _say_end(self) -> None:
        recs = self.source.records
        last = f"step {recs[-1].step}" if recs else "its start"
        if not self.source.live:
            msg = (f"end of the recording ({len(recs)} steps): drag the slider back to watch "
                   "it again")
        else:
            msg = f"finished: no request is running any more (the last ended at {last}). "
            msg += ("Press “new request” to add one and keep playing, or drag the slider back "
                    "to watch again." if getattr(self.source, "can_add", False)
                    else "Add a request to the Lab, then ▶; or drag the slider back.")
        self.note.value = f"<b>{html.escape(msg)}</b>"
        self._ended = True

    # ---- new requests ----------------------------------------------------------------------
    def new_request(self) -> str | None:
        """Add a request (the source's factory), follow it in every diagram and keep playing.
        Returns its id, or None (the reason is shown) when none could be added."""
        try:
            made = self.source.new_request()
        except (ValueError, RuntimeError) as e:
            self.note.value = f"could not add a request: {html.escape(str(e))}"
            return None
        rid = getattr(made, "rid", made)
        recs = self.source.records
        if recs and self.i != len(recs) - 1:
            self.goto(len(recs) - 1)     # back to the engine's present before it moves on
        self.follow(rid)
        self.goto(len(recs))             # one engine step: the request is scheduled and drawn
        self.note.value = html.escape(str(made))
        self.play.playing = True
        return rid

    def follow(self, req: str) -> None:
        """Every diagram that follows one request follows `req` from its next drawing on."""
        for d in self.diagrams:
            if hasattr(d, "req"):
                d.req = req

    # ---- observers -------------------------------------------------------------------------
    def _on_play(self, change) -> None:
        if not self._syncing:
            self.goto(change["new"])

    def _on_playing(self, change) -> None:
        # A live run that went idle and got new work: let Play run past the end again.
        if change["new"] and self.source.live and not self._syncing:
            self.play.max = self._play_max()

    def _on_slider(self, change) -> None:
        if not self._syncing:
            self.goto(change["new"])
