"""The DA hook: the only part of da_lab that imports vLLM internals.

Registered as the `vllm.general_plugins` entry point `da_lab`, so vLLM loads it in the driver and
in every worker process. Runner differences live in the adapters (`runners/v1.py` for the v1
model runner, which the CPU build uses; `runners/v2.py` for the V2 GPU runner), what they rely
on in `runners/needs.py`, which releases are served and how each was verified in
`runners/releases.py`; the edit itself is in `metadata.py`, the per-step state the wrappers
share in `context.py`. `register()` refuses releases outside the manifests and warns once on
one that was only checked statically.
"""

from __future__ import annotations

from da_lab.hook.runners.needs import RELEASES
from da_lab.hook.runners.releases import serve_args

# `vllm serve` options a DA server needs per release (`da-lab serve` adds them); derived from
# runners/releases.py, where the version differences live.
SERVE_ARGS = {v: serve_args(v) for v in RELEASES if serve_args(v)}

_installed = False


def check_version(version: str, distribution: str | None = None) -> None:
    """Raise (a one-line message naming the supported range) for a release the hook refuses."""
    from da_lab.hook.runners import releases

    action, msg = releases.load_decision(version, distribution or releases.GPU)
    if action == "refuse":
        raise RuntimeError(msg)


def register() -> None:
    """Entry point: patch the runner and the prefix cache once per process."""
    global _installed
    if _installed:
        return
    import vllm

    from da_lab.hook.runners import releases

    releases.apply_decision(vllm.__version__, releases.installed_distribution())
    version = releases.base_version(vllm.__version__)
    from da_lab.hook import prefix_cache, service
    from da_lab.hook.runners import common, v1, v2
    from da_lab.hook.state import TRACKER

    common.install(version)
    v1.install(version)
    # v2.install() raises where the V2 runner exists but can't be patched; False means this
    # build has none (the CPU build), so the v1 runner serves every engine.
    TRACKER.v2_installed = v2.install(version)
    prefix_cache.install()
    service.install()          # the worker method the API server calls; serve mode
    _installed = True
