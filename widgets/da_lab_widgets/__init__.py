"""The DA lab's four diagrams and their player, drawn in the browser (static/*.js), fed live by a
Lab or by a recorded trace."""

from importlib import import_module

# Imported on first use: a caller that only reads a trace (TraceSource) needs no
# widget machinery.
_EXPORTS = {
    "Highlight": "highlight",
    "TraceSource": "source",
    "LiveSource": "source",
    "Player": "player",
    "BlocksDiagram": "blocks",
    "DAHookDiagram": "dahook",
    "SkeletonDiagram": "skeleton",
    "MetadataPathDiagram": "metadata_path",
    "export_trace": "export",
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
