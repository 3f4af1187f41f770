"""The DA hook: what runs inside vLLM's worker (with engine/access.py, introspect.py and
kvmap.py on the driver's side, the only importers of vLLM internals).

Registered as the `vllm.general_plugins` entry point `da_lab`, so vLLM loads it in the driver and
in every worker process. Runner differences live in the adapters (`runners/v1.py` for the v1
model runner, which the CPU build uses; `runners/v2.py` for the V2 GPU runner), what they rely
on in `versions/needs.py`, which releases are served and how each was verified in
`versions/releases.py`. One step's data flows through `step.Step` (decision, edit in
`metadata.py`, what the builder got, the sampled tokens), the requests' lifecycle is
`book.RequestBook`, and `session.SESSION` is the hook's one module-level state. `register()`
refuses releases outside the manifests and warns once on one that was only checked statically.
"""

from __future__ import annotations

from da_lab.versions.needs import RELEASES
from da_lab.versions.releases import serve_args

# `vllm serve` options a DA server needs per release (`da-lab serve` adds them); derived from
# versions/releases.py, where the version differences live.
SERVE_ARGS = {v: serve_args(v) for v in RELEASES if serve_args(v)}

def check_version(version: str, distribution: str | None = None) -> None:
    """Raise (a one-line message naming the supported range) for a release the hook refuses."""
    from da_lab.versions import releases

    action, msg = releases.load_decision(version, distribution or releases.GPU)
    if action == "refuse":
        raise RuntimeError(msg)


def installed() -> bool:
    """Whether register() patched vLLM in this process (without importing the hook's state,
    torch with it, when it did not)."""
    import sys

    session = sys.modules.get("da_lab.hook.session")
    return bool(session is not None and session.SESSION.installed)


def register() -> None:
    """Entry point: patch the runner and the prefix cache once per process."""
    from da_lab.hook.session import SESSION

    if SESSION.installed:
        return
    import vllm

    from da_lab.versions import releases

    releases.apply_decision(vllm.__version__, releases.installed_distribution())
    version = releases.base_version(vllm.__version__)
    from da_lab.hook import prefix_cache, service
    from da_lab.hook.runners import common, v1, v2

    common.install(version)
    if "v1" in releases.model_runners(version):    # 0.34+: the V2 runner is the only one
        v1.install(version)
    # v2.install() raises where the V2 runner exists but can't be patched; where this build
    # has none (the CPU build) the v1 runner serves every engine.
    v2.install(version)
    prefix_cache.install()
    service.install(SESSION.service)   # the worker method the API server calls; serve mode
    SESSION.note_installed()
