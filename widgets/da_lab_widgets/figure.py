"""The diagrams' FigureWidget: a view opened late draws the figure as it is now.

plotly's FigureWidget syncs its data and layout (`_widget_data`, `_widget_layout`) to the browser
once, when it is built; every later change travels as a one-off message (restyle, relayout,
update) that only the views open at that moment apply. A view opened afterwards, e.g. a second
browser tab on the same kernel, asks the kernel for the widget's state and got the figure as it
was built: empty rows and charts. `LiveFigure` answers that request with the current data and
layout instead. Nothing more is sent per step: the one-off messages stay as they are.
"""

from __future__ import annotations

from copy import deepcopy

import plotly.graph_objects as go

_CURRENT = {"_widget_data": "_data", "_widget_layout": "_layout"}


class LiveFigure(go.FigureWidget):
    """A go.FigureWidget whose full state (what a new view is built from) is its current one."""

    def get_state(self, key=None, drop_defaults=False):
        state = super().get_state(key, drop_defaults=drop_defaults)
        for name, attr in _CURRENT.items():
            now = getattr(self, attr, None)      # None while the figure is being built
            if name in state and now is not None:
                to_json = self.trait_metadata(name, "to_json", self._trait_to_json)
                state[name] = to_json(deepcopy(now), self)
        return state
