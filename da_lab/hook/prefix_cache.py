"""Keep KV written under a DA mask out of vLLM's prefix cache.

Prefix caching hashes full blocks by their token ids. A response block of a DA request may hold
K/V computed while blocks were hidden; served to another request with the same tokens it would
pass for unmasked K/V. So for DA requests only the prompt's full blocks (written by an unmasked
prefill) are offered to the cache; their response blocks never are. Requests without a DA layout
are untouched.

Preemption: vLLM recomputes a preempted request as one prefill of prompt + outputs, and the hook
can only apply its *current* mask to it, so even prompt positions past the cached prefix get
masked K/V. A DA request that has been preempted therefore offers no new blocks at all (what
it cached before, from its first unmasked prefill, stays). This is decided here, on the
scheduler's side, from vLLM's own `Request.num_preemptions`, so it holds when the engine core
runs in another process.
"""

from __future__ import annotations

import functools

from da_lab.core.wire import EXTRA_LAYOUT


def _cap(request, num_tokens: int) -> int:
    """What `request` (a vLLM Request: its attributes read here are needs.py's, no defaults)
    may offer the prefix cache of its first `num_tokens` tokens."""
    sp = request.sampling_params
    ex = sp.extra_args if sp is not None else None
    if ex and EXTRA_LAYOUT in ex:
        if request.num_preemptions > 0:
            return 0     # below what is cached already: cache_blocks adds nothing
        return min(num_tokens, request.num_prompt_tokens)
    return num_tokens


def install() -> None:
    from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator

    orig = KVCacheCoordinator.cache_blocks
    if getattr(orig, "_da_wrapped", False):
        return

    @functools.wraps(orig)
    def cache_blocks(self, request, num_computed_tokens, *args, **kwargs):
        return orig(self, request, _cap(request, num_computed_tokens), *args, **kwargs)

    cache_blocks._da_wrapped = True
    KVCacheCoordinator.cache_blocks = cache_blocks
