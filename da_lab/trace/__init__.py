"""Traces: a recorded run on disk (`format`: the file layout; `writer`; `reader`) and the child
process that encodes and writes records off the engine's thread (`process`). Needs neither vLLM
nor torch, so a laptop replays a GPU run."""

from da_lab.trace.format import SCHEMA, TraceError
from da_lab.trace.reader import Trace, apply_kv_changes, load
from da_lab.trace.writer import TraceWriter, save

__all__ = ["SCHEMA", "Trace", "TraceError", "TraceWriter", "apply_kv_changes", "load", "save"]
