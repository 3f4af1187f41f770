"""The diagrams' figures: plotly's FigureWidget without a copy of plotly's 5 MB front-end bundle
in each one (bundle.py sends it once per kernel)."""

from __future__ import annotations

import plotly.graph_objects as go

from .bundle import bundle_text, figure_esm, preload_figures


class FigureWidget(go.FigureWidget):
    """A `plotly.graph_objects.FigureWidget` whose front-end module waits for the bundle that
    `bundle.preload_figures()` sent, instead of carrying its own copy."""

    _esm = figure_esm(bundle_text())

    def __init__(self, *args, **kwargs) -> None:
        preload_figures()  # the bundle's widget opens before this figure's, in every page
        super().__init__(*args, **kwargs)
