"""plotly's front-end code, sent to the browser once per kernel and early.

plotly's FigureWidget is an anywidget whose `_esm` trait holds plotly's whole front-end bundle
(widgetbundle.js, 4.96 MB in plotly 7.1). Every figure sends its own copy when it is created and
the browser evaluates each copy: the tour's five figures were 25.4 MB of widget messages
(measured on the kernel's comm traffic), the DA-hook notebook's three 15 MB. On a loaded 2-core
laptop that is seconds of Run All, and an evaluation slower than anywidget's 2 s model start-up
limit leaves that figure without its data for good (anywidget rejects the model's `ready`, and
every later update to it is dropped): an empty plot.

Here the bundle travels once, in a small hidden widget (`preload_figures()`), which the notebooks'
first cell creates before the engine starts, so the browser evaluates it while the kernel
imports vLLM. Figures made with `figure.FigureWidget` carry a few lines instead that wait for
that one evaluation. (Measured in JupyterLab + headless Chromium on this 2-core machine, Run All
of 00_tour: the player and all five plots on screen 17 s after Run All with it, 34 s without,
one plot left empty.) A page opened later (a second tab, a reload) restores the hidden widget with
the others and loads the bundle the same way.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources

_carrier = None


def bundle_text() -> str:
    """plotly's widget bundle, read from the installed plotly (no plotly import needed)."""
    return (resources.files("plotly") / "package_data" / "widgetbundle.js").read_text()


def global_key(text: str) -> str:
    """Where the loaded bundle lives on the page: one slot per bundle content, so two kernels
    with different plotly versions in one JupyterLab page never share a module."""
    return "__daLabPlotly_" + hashlib.sha1(text.encode()).hexdigest()[:12]


_SLOT = """const g = (globalThis[{key}] ??= {{}});
g.ready ??= new Promise((resolve) => {{ g.resolve = resolve; }});
"""


def carrier_esm(text: str) -> str:
    """The hidden widget's module: start loading the bundle once per page, export a no-op
    widget (it is never displayed)."""
    return (_SLOT.format(key=json.dumps(global_key(text))) + f"""if (!g.loading) {{
  g.loading = true;
  const url = URL.createObjectURL(new Blob([{json.dumps(text)}], {{ type: "text/javascript" }}));
  import(url).then((m) => {{ URL.revokeObjectURL(url); g.resolve(m); }});
}}
export default {{ initialize() {{}}, render() {{}} }};
""")


def figure_esm(text: str) -> str:
    """A figure's module: plotly's own widget, once the page has loaded the bundle."""
    return _SLOT.format(key=json.dumps(global_key(text))) + """export default async () => {
  const m = await g.ready;
  return m.default();
};
"""


def preload_figures() -> None:
    """Send plotly's bundle to the front end now, once per kernel (idempotent). The notebooks'
    first cell calls it before the engine starts; `FigureWidget` calls it anyway."""
    global _carrier
    if _carrier is None:
        import anywidget
        import traitlets

        text = bundle_text()

        class PlotlyBundle(anywidget.AnyWidget):
            _esm = traitlets.Unicode(carrier_esm(text)).tag(sync=True)

        _carrier = PlotlyBundle()   # kept for the kernel's life: later pages restore it
