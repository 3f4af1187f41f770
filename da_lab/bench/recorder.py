"""Lab-style recording inside a bench child (mode global_recording), to time what recording
costs the engine's thread."""

from __future__ import annotations

import time
from pathlib import Path


class Recorder:
    """What `Lab.step()` does per step when recording (da_lab/engine/lab.py), with the one
    record builder (`EngineStep.record`): update the physical KV map (kvmap.KVTracker), build
    the StepRecord (staged rows: the worker runs with record_rows) and hand it to the trace
    writer, which encodes and compresses in a child process
    (da_lab.trace.process.ProcessTraceWriter)."""

    def __init__(self, path: Path, core, runner, provenance: dict) -> None:
        from da_lab.engine import kvmap
        from da_lab.trace.format import header
        from da_lab.trace.process import ProcessTraceWriter

        self.path = path
        self.kv = kvmap.KVTracker(core)
        try:
            from da_lab.engine.introspect import skeleton

            skel = skeleton(runner)
        except Exception as e:   # noqa: BLE001 - the header's diagram data is not timed
            skel = {"error": f"{type(e).__name__}: {e}"}
        self.writer = ProcessTraceWriter(path, header(provenance, skel,
                                                      self.kv.changes_from_empty()))
        self.added: list[dict] = []
        self.seconds = 0.0

    def on_step(self, es) -> None:
        """Record one engine step (hook/driver.EngineStep) as the Lab does."""
        t0 = time.perf_counter()
        self.writer.write(es.record(self.added, kv=self.kv.update()))
        self.added = []
        self.seconds += time.perf_counter() - t0

    def skipped_steps(self) -> None:
        """Engine steps ran that on_step did not see."""
        self.kv.invalidate()

    def close(self) -> int:
        self.writer.close()
        return self.path.stat().st_size if self.path.exists() else 0


def open_recorder(doc: dict, spec: dict, core, runner, block_size: int, num_blocks: int):
    """A Recorder writing to a temporary trace (parquet when pyarrow is here, else jsonl.gz,
    unless the spec names one); returns (recorder, its folder)."""
    import tempfile

    trace_dir = Path(tempfile.mkdtemp(prefix="da-bench-trace-"))
    prov = {"vllm": doc["vllm"], "device": doc["device"], "model": spec["model_path"],
            "model_name": spec["model"], "runner": doc["runner"], "backend": doc["backend"],
            "block_size": block_size, "num_blocks": num_blocks}
    fmt = spec.get("trace_format", "auto")
    if fmt == "auto":
        try:
            import pyarrow  # noqa: F401
            fmt = "parquet"
        except ImportError:
            fmt = "jsonl.gz"
    doc["trace_format"] = fmt
    return Recorder(trace_dir / f"trace.{fmt}", core, runner, prov), trace_dir
