"""▶ / ⏸ for the player: a Play whose ticks keep time and never queue.

ipywidgets' Play schedules its next tick `interval` ms after the last one ran, so every tick
comes late by however long the page was busy when it was due: at 50 ms a step, on a page that
draws two diagrams per step, Play ran at 55-75 ms a step even when the page kept up on average.
`StepClock` counts ticks from when ▶ was pressed (tick k is due at k * interval), and a tick
that comes late moves the value to the step due now instead of the next one: a page or kernel
still busy with one step skips the steps it had no time for, it never queues them. ipywidgets'
own message throttle already holds a value back while the kernel is busy with the last and
sends only the latest, so a busy kernel skips the same way. When the kernel moves the value
itself (the slider, a live run that has fewer steps than ticks) the clock counts on from there.

The traits and behaviour are Play's where the player relies on them: value, min, max, step,
interval, playing; ▶ at max starts over at min; reaching max pauses.
"""

from __future__ import annotations

import anywidget
from traitlets import Bool, Int, Unicode

_ESM = """\
function clock(model) {
  let timer = null, base = 0, t0 = 0, mine = null;
  const stop = () => { if (timer !== null) clearTimeout(timer); timer = null; };
  // Count from the value now: the first tick is due at once (as Play's), the next an interval on
  function anchor(now) { base = model.get("value"); t0 = now - model.get("interval"); }
  function tick() {
    timer = null;
    if (!model.get("playing")) return;
    const iv = Math.max(1, model.get("interval")), now = performance.now();
    const k = Math.floor((now - t0) / iv);            // ticks due since the anchor
    const max = model.get("max");
    let v = Math.min(base + k * model.get("step"), max);
    if (v !== model.get("value")) { mine = v; model.set("value", v); }
    if (v >= max) model.set("playing", false);
    model.save_changes();
    if (v < max) timer = setTimeout(tick, Math.max(0, t0 + (k + 1) * iv - performance.now()));
  }
  model.on("change:playing", () => {
    stop();
    if (!model.get("playing")) return;
    if (model.get("value") >= model.get("max")) {     // at the end: start over
      mine = model.get("min");
      model.set("value", mine);
      model.save_changes();
    }
    anchor(performance.now());
    tick();
  });
  model.on("change:value", () => {
    // the kernel moved it (not one of our ticks): count on from where it is
    if (model.get("value") !== mine && timer !== null) {
      stop();
      anchor(performance.now() + model.get("interval"));
      timer = setTimeout(tick, model.get("interval"));
    }
    mine = null;
  });
  model.on("change:interval", () => {
    if (timer !== null) { stop(); anchor(performance.now() + model.get("interval")); tick(); }
  });
}

export default {
  initialize({ model }) { clock(model); },
  render({ model, el }) {
    el.classList.add("widget-inline-hbox", "widget-play");
    const button = (icon, title, click) => {
      const b = document.createElement("button");
      b.className = "jupyter-button";
      b.title = title;
      b.innerHTML = `<i class="fa ${icon}"></i>`;
      b.onclick = click;
      el.appendChild(b);
      return b;
    };
    const toggle = button("fa-play", "play / pause", () => {
      model.set("playing", !model.get("playing"));
      model.save_changes();
    });
    const reset = button("fa-stop", "stop: back to the first step", () => {
      model.set("playing", false);
      model.set("value", model.get("min"));
      model.save_changes();
    });
    const show = () => {
      toggle.firstChild.className = model.get("playing") ? "fa fa-pause" : "fa fa-play";
      toggle.disabled = reset.disabled = model.get("disabled");
    };
    model.on("change:playing", show);
    model.on("change:disabled", show);
    show();
  },
};
"""


class StepClock(anywidget.AnyWidget):
    """Play's traits, ticking on time (see the module's docstring)."""

    _esm = _ESM
    value = Int(0).tag(sync=True)
    min = Int(0).tag(sync=True)
    max = Int(100).tag(sync=True)
    step = Int(1).tag(sync=True)
    interval = Int(100).tag(sync=True)
    playing = Bool(False).tag(sync=True)
    disabled = Bool(False).tag(sync=True)
    description = Unicode("").tag(sync=True)
