"""The diagrams' FigureWidget: every view draws the figure as it is now.

plotly's FigureWidget (plotly 6-7, an anywidget) lost the diagrams' data in three ways:

- Each widget's browser copy imports its own copy of plotly's 5 MB widget bundle, and anywidget
  gives up on a widget whose module has not initialized within 2 s of its creation: from then
  on every message to it is dropped. Six figures created in one cell on a busy machine missed
  that limit; the last ones (diagram 4's row and chart) stayed empty axes for the whole run.
- A message sent before the browser copy listens (the traces added, the first step drawn, in
  the cell that creates the figure) was dropped. plotly re-sends the full figure when a
  FigureWidget is displayed on its own (`_repr_mimebundle_`), not inside a VBox, as here.
- A second browser tab on the same kernel builds its copy from the widget's state: the figure
  as it was built.

`LiveFigure` fixes all three. plotly's bundle reaches the page once (a carrier widget brings
it) and is evaluated once; a figure's front end initializes at once, so anywidget's limit is
never reached, and sets plotly up when a view first renders. Its state is always the current
figure, and until a view has reported that it drew (plotly's view sends trace deltas after
drawing), every message is followed by that state, so a copy that missed the message still
holds the figure. Once a view has drawn, the messages alone are enough and nothing more is
sent per step.
"""

from __future__ import annotations

import hashlib
import json

import anywidget
import comm
import plotly.graph_objects as go
from plotly.basewidget import BaseFigureWidget
from traitlets import Unicode, observe

_CURRENT = {"_widget_data": "_data", "_widget_layout": "_layout"}
_MESSAGES = ("_py2js_addTraces", "_py2js_restyle", "_py2js_relayout", "_py2js_update",
             "_py2js_animate", "_py2js_deleteTraces", "_py2js_moveTraces",
             "_py2js_removeLayoutProps", "_py2js_removeTraceProps")

# plotly's widget module reaches the page once, in the state of one carrier widget
# (`_PlotlyCarrier`), which evaluates it and leaves the module on globalThis under a key naming
# its content. A figure's own module is a few lines: initialize() returns at once (anywidget's
# 2 s limit), render() waits for the module and sets plotly up for its model.
_SLOT = """\
const KEY = %(key)s;
function slot() {
  if (!globalThis[KEY]) {
    let done;
    globalThis[KEY] = new Promise((resolve, reject) => { done = { resolve, reject }; });
    Object.assign(globalThis[KEY], done);
  }
  return globalThis[KEY];
}
"""
_CARRIER = _SLOT + """\
export default {
  initialize({ model }) {
    const s = slot();
    if (!s.loading) {
      s.loading = true;
      const src = new Blob([model.get("plotly_module")], { type: "text/javascript" });
      import(URL.createObjectURL(src)).then(s.resolve, s.reject);
    }
  },
};
"""
_FIGURE = _SLOT + """\
export default () => {
  let widget = null, ready = null;
  function setUp(model) {
    ready ??= slot().then(async (mod) => {
      const def = mod.default;
      widget = typeof def === "function" ? await def() : def;
      await widget.initialize?.({ model });
    });
    return ready;
  }
  return {
    initialize({ model }) { setUp(model); },
    async render({ model, el }) {
      await setUp(model);
      return widget.render({ model, el });
    },
  };
};
"""
_PLOTLY = str(BaseFigureWidget._esm)
_KEY = json.dumps("da_lab_plotly_" + hashlib.sha1(_PLOTLY.encode()).hexdigest()[:16])


class _PlotlyCarrier(anywidget.AnyWidget):
    """Never displayed: its front end loads plotly's widget module for every LiveFigure."""

    _esm = _CARRIER % {"key": _KEY}
    plotly_module = Unicode(_PLOTLY).tag(sync=True)     # the page gets it once, here


_carrier: _PlotlyCarrier | None = None


def _ensure_carrier() -> None:
    global _carrier
    if _carrier is None or _carrier.comm is None:     # none yet, or closed
        _carrier = _PlotlyCarrier()


class LiveFigure(go.FigureWidget):
    """A go.FigureWidget whose synced state is its current data and layout."""

    _esm = _FIGURE % {"key": _KEY}
    _view_drew = False

    def __init__(self, *args, **kwargs) -> None:
        _ensure_carrier()
        super().__init__(*args, **kwargs)

    def get_state(self, key=None, drop_defaults=False):
        state = super().get_state(key, drop_defaults=drop_defaults)
        for name, attr in _CURRENT.items():
            now = getattr(self, attr, None)      # None while the figure is being built
            if name in state and now is not None:
                to_json = self.trait_metadata(name, "to_json", self._trait_to_json)
                state[name] = to_json(now, self)  # plotly's to_json copies as it converts
        return state

    @observe(*_MESSAGES)
    def _state_after_message(self, change) -> None:
        if change["new"] is None or self._view_drew or isinstance(self.comm, comm.DummyComm):
            return      # the message reset; a view listens already; no front end at all
        self.send_state(key=list(_CURRENT))

    @observe("_js2py_traceDeltas")
    def _a_view_drew(self, change) -> None:
        if change["new"] is not None:
            self._view_drew = True


def preload_figures() -> None:
    """Send plotly's front-end module to the page now (the notebooks' first cell calls this
    before the engine starts, so the browser evaluates it while the kernel imports vLLM)."""
    _ensure_carrier()
