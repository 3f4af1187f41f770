"""ipywidgets + plotly diagrams of the DA lab, driven live by a Lab or by a recorded trace."""

from importlib import import_module

# Imported on first use: plotly's FigureWidget costs seconds to import, and a caller that only
# reads a trace (kv_state, TraceSource) should not pay for it.
_EXPORTS = {
    "Highlight": "highlight",
    "TraceSource": "source",
    "LiveSource": "source",
    "kv_state": "source",
    "Player": "player",
    "BlocksDiagram": "blocks",
    "DAHookDiagram": "dahook",
    "SkeletonDiagram": "skeleton",
    "MetadataPathDiagram": "metadata_path",
    "export_trace": "export",
    "preload_figures": "figure",
    "LiveFigure": "figure",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
