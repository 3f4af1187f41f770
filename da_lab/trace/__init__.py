"""Traces: a recorded run on disk (`io`: format, writer, reader) and the child process that
encodes and writes records off the engine's thread (`process`). Needs neither vLLM nor torch,
so a laptop replays a GPU run."""

from da_lab.trace.io import (SCHEMA, Trace, TraceError, TraceWriter, apply_kv_changes, load,
                             save)

__all__ = ["SCHEMA", "Trace", "TraceError", "TraceWriter", "apply_kv_changes", "load", "save"]
