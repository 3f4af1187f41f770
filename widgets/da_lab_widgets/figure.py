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

import copy
import hashlib
import json
import re

import anywidget
import comm
import plotly.graph_objects as go
from plotly.basedatatypes import Undefined
from plotly.basewidget import BaseFigureWidget
from plotly.serializers import _py_to_js
from traitlets import Dict, Unicode, observe

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
      // plotly.js leaves itself on window.Plotly as the module runs: keep that one (a later
      // bundle on the page may replace the global)
      import(URL.createObjectURL(src)).then(
        (mod) => s.resolve({ mod, Plotly: globalThis.Plotly }), s.reject);
    }
  },
};
"""
# plotly's widget view, changed where a step cost the page a whole redraw. plotly's view adds a
# marker key (_doNotReportToPy) to every edit the kernel sends, so that plotly.js's event for
# it is not reported back; plotly.js takes an attribute it does not know for a full recalc, so
# every message, even one annotation's text, recalculated and redrew the whole figure. Here an
# edit from the kernel goes to plotly.js as sent (its own edit types pick the cheapest redraw)
# and the view ignores plotly.js's events while such edits are in flight. After each edit
# plotly's view also diffed the page's whole figure against the model and sent the defaults
# back (the kernel echoes them): the kernel reads no defaults, so after the first draw (which
# tells LiveFigure that a view drew) none are sent.
_VIEW = """\
function cheapUpdates(M, V, Plotly) {
  if (V.__daCheap) return;
  V.__daCheap = true;
  // One update may leave some of its traces alone: plotly.py sends Undefined for them, as
  // "_undefined_". The view reads it back as undefined (plotly.js then skips that trace); the
  // model's copy of the figure (what a view re-rendered from it draws) took the string itself
  // for the value. It reads it as undefined here too.
  const alone = (d) => {
    const out = {};
    for (const k in d || {}) {
      out[k] = Array.isArray(d[k]) ? d[k].map((v) => (v === "_undefined_" ? undefined : v))
        : d[k];
    }
    return out;
  };
  for (const [name, key] of [["do_update", "style_data"], ["do_restyle", "restyle_data"]]) {
    const apply = M[name], msg = "_py2js_" + name.slice(3);
    M[name] = function () {
      const raw = this.model, m = raw.get(msg);
      this.model = { get: (k) => (k === msg && m ? { ...m, [key]: alone(m[key]) } : raw.get(k)) };
      try { apply.call(this); } finally { this.model = raw; }
    };
  }
  // The kernel's edits are drawn in a task of their own, after the messages already in:
  // the kernel's "idle" for this step is read first, so the player's next tick reaches the
  // kernel while the page draws this one (the kernel and the page work side by side).
  const queue = [];
  function fromKernel(view, run) {
    queue.push([view, run]);
    if (queue.length === 1) setTimeout(drawQueued, 0);
  }
  function drawQueued() {
    for (const [view, run] of queue.splice(0)) {
      view._daFromKernel = (view._daFromKernel || 0) + 1;
      let done;
      try { done = run(); } finally {
        Promise.resolve(done).catch(() => {}).then(() => { view._daFromKernel -= 1; });
      }
    }
  }
  // plotly.py names an item of a layout array "shapes.3.label.text" (fig.layout.shapes[3]
  // assigned in batch_update); plotly.js draws an edit of one item alone only when it is named
  // "shapes[3].label.text": the other spelling redraws the whole figure.
  function items(layout) {
    const out = {};
    for (const k in layout) out[k.replace(/[.]([0-9]+)(?=[.]|$)/g, "[$1]")] = layout[k];
    return out;
  }
  for (const name of ["handle_plotly_restyle", "handle_plotly_relayout",
                      "handle_plotly_update"]) {
    const report = V[name];
    V[name] = function (ev) { if (!this._daFromKernel) report.call(this, ev); };
  }
  V.do_restyle = function () {
    const m = this.model.get("_py2js_restyle");
    if (m === null) return;
    const traces = this.model._normalize_trace_indexes(m.restyle_traces);
    fromKernel(this, () => Plotly.restyle(this.el, m.restyle_data, traces));
  };
  V.do_relayout = function () {
    const m = this.model.get("_py2js_relayout");
    if (m === null || m.source_view_id === this.viewID) return;
    fromKernel(this, () => Plotly.relayout(this.el, items(m.relayout_data)));
  };
  // Plotly.update recomputes the whole figure's defaults even for a layout edit that
  // relayout draws alone (a shape's colour or label: the changed shape is redrawn, nothing
  // else), so an update with one side empty goes to relayout or restyle.
  V.do_update = function () {
    const m = this.model.get("_py2js_update");
    if (m === null) return;
    const style = m.style_data || {}, layout = items(m.layout_data || {});
    const traces = this.model._normalize_trace_indexes(m.style_traces);
    const some = (o) => Object.keys(o).length > 0;
    fromKernel(this, () => (!some(style) ? Plotly.relayout(this.el, layout)
      : !some(layout) ? Plotly.restyle(this.el, style, traces)
      : Plotly.update(this.el, style, layout, traces)));
  };
}
"""
_FIGURE = _SLOT + _VIEW + """\
export default () => {
  let widget = null, ready = null;
  function setUp(model) {
    ready ??= slot().then(async ({ mod, Plotly }) => {
      cheapUpdates(mod.FigureModel.prototype, mod.FigureView.prototype, Plotly);
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
# The key names plotly's module and how the carrier hands it over: a page that still holds an
# older carrier's promise under another key never mixes the two.
_KEY = json.dumps("da_lab_plotly_" + hashlib.sha1(
    (_PLOTLY + _CARRIER + _VIEW).encode()).hexdigest()[:16])


class _PlotlyCarrier(anywidget.AnyWidget):
    """Never displayed: its front end loads plotly's widget module for every LiveFigure."""

    _esm = _CARRIER % {"key": _KEY}
    plotly_module = Unicode(_PLOTLY).tag(sync=True)     # the page gets it once, here


_carrier: _PlotlyCarrier | None = None


def _ensure_carrier() -> None:
    global _carrier
    if _carrier is None or _carrier.comm is None:     # none yet, or closed
        _carrier = _PlotlyCarrier()


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _to_js(v, manager=None):
    """plotly's serializer (numpy arrays, Undefined), without visiting every element of a list
    that holds plain values only: a row of 2,000 hover texts was 2,000 Python calls a step."""
    if isinstance(v, dict):
        return {k: _to_js(x, manager) for k, x in v.items()}
    if isinstance(v, list | tuple):
        if set(map(type, v)) <= _PLAIN:
            return v
        return [_to_js(x, manager) for x in v]
    return _py_to_js(v, manager)


_FAST = {"to_json": _to_js, "from_json": BaseFigureWidget._py2js_update.metadata["from_json"]}
_PATH = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _own(v):
    """The figure's own copy of a list of shapes (or any dict): its leaves are edited in place
    later, and one item of the list given may stand at several places (shapes.HEADROOM)."""
    if isinstance(v, dict):
        return copy.deepcopy(v)
    if isinstance(v, list | tuple) and any(isinstance(x, dict | list) for x in v):
        return [copy.deepcopy(x) for x in v]
    return v


def _set_path(d: dict, path: str, value) -> None:
    """d at "a.b[3].c" = value (None: the key removed, plotly's default again)."""
    keys = [k if i == "" else int(i) for k, i in _PATH.findall(path)]
    for k, nxt in zip(keys, keys[1:], strict=False):
        if isinstance(d, list):
            d.extend({} for _ in range(k + 1 - len(d)))
        elif k not in d or d[k] is None:
            d[k] = [] if isinstance(nxt, int) else {}
        d = d[k]
    last = keys[-1]
    if value is None and isinstance(d, dict):
        d.pop(last, None)
    else:
        d[last] = value


class LiveFigure(go.FigureWidget):
    """A go.FigureWidget whose synced state is its current data and layout."""

    _esm = _FIGURE % {"key": _KEY}
    _view_drew = False
    _py2js_update = Dict(allow_none=True).tag(sync=True, **_FAST)

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
        if key is None:         # a new copy (a second tab) starts from the figure, no message
            state.update((m, None) for m in _MESSAGES if m in state)
        return state

    # plotly.py syncs an edit as four comm messages: each edit id, the message, then the
    # message reset to None. Here it is one: the ids with the message, which is not reset
    # (the next one differs from it by its ids, so the page still sees every edit).
    def _send_once(self, name: str, msg: dict, traces: bool) -> None:
        with self.hold_sync():
            self._last_layout_edit_id += 1
            msg["layout_edit_id"] = self._last_layout_edit_id
            if traces:
                self._last_trace_edit_id += 1
                msg["trace_edit_id"] = self._last_trace_edit_id
            setattr(self, name, msg)

    def _send_update_msg(self, restyle_data, relayout_data, trace_indexes=None,
                         source_view_id=None):
        self._send_once("_py2js_update", {
            "style_data": restyle_data, "layout_data": relayout_data,
            "style_traces": self._normalize_trace_indexes(trace_indexes),
            "source_view_id": source_view_id}, traces=True)

    def _send_restyle_msg(self, restyle_data, trace_indexes=None, source_view_id=None):
        self._send_once("_py2js_restyle", {
            "restyle_data": restyle_data,
            "restyle_traces": self._normalize_trace_indexes(trace_indexes),
            "source_view_id": source_view_id}, traces=True)

    def _send_relayout_msg(self, layout_data, source_view_id=None):
        self._send_once("_py2js_relayout", {"relayout_data": layout_data,
                                            "source_view_id": source_view_id}, traces=False)

    def push_update(self, restyle: dict, relayout: dict, traces: list[int]) -> None:
        """plotly_update for a caller that already knows what changed and whose values are
        plain lists and numbers it built itself (rows.Pusher): the figure's data and layout
        are set as given and the edit is sent, without plotly.py's validation and its
        element-by-element comparison with the old values (2,000-long rows: 10-40 ms)."""
        for key, per_trace in restyle.items():
            for i, v in zip(traces, per_trace, strict=True):
                if v is not Undefined:
                    _set_path(self._data[i], key, v)
        for key, v in relayout.items():
            _set_path(self._layout, key, _own(v))
            if "." not in key and "[" not in key:
                # plotly.py keeps serving the old objects of a replaced list (shapes)
                self.layout._compound_array_props.pop(key, None)
        self._send_update_msg(restyle, relayout, traces)

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
