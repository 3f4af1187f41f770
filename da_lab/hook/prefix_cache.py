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

Resuming: the lookup side. A preempted request resumes on whatever the cache holds for its
tokens, and past its prompt that is never its own K/V (its response blocks are never offered)
but another request's, computed without its mask: a plain request whose prompt is this one's
prompt + output (the eval's A/B) hands over every position, the resume recomputes one token,
the hook sees no recompute and the tokens change without a flag (issue 57). So a DA request's
cache hits stop at its prompt's last full block: past it the resume recomputes, and the hook's
recompute check flags it (`recompute_under_mask`), truthfully.
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


def hit_cap(request) -> int | None:
    """The most tokens `request` may take from the prefix cache (None: no limit): a DA
    request's prompt (the cache holds no K/V written under its mask past it)."""
    sp = request.sampling_params
    ex = sp.extra_args if sp is not None else None
    return request.num_prompt_tokens if ex and EXTRA_LAYOUT in ex else None


def install() -> None:
    from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    orig = KVCacheCoordinator.cache_blocks
    if getattr(orig, "_da_wrapped", False):
        return

    @functools.wraps(orig)
    def cache_blocks(self, request, num_computed_tokens, *args, **kwargs):
        return orig(self, request, _cap(request, num_computed_tokens), *args, **kwargs)

    cache_blocks._da_wrapped = True
    KVCacheCoordinator.cache_blocks = cache_blocks

    lookup = KVCacheManager.get_computed_blocks

    @functools.wraps(lookup)
    def get_computed_blocks(self, request, *args, **kwargs):
        cap = hit_cap(request)
        if cap is None or request.num_tokens - 1 <= cap:     # a first prefill: no change
            return lookup(self, request, *args, **kwargs)
        coord = self.coordinator
        find = coord.find_longest_cache_hit

        def capped(block_hashes, max_cache_hit_length, *a, **k):
            return find(block_hashes, min(max_cache_hit_length, cap), *a, **k)

        # Shadowed on the instance for this one lookup (the scheduler is one thread).
        coord.find_longest_cache_hit = capped
        try:
            return lookup(self, request, *args, **kwargs)
        finally:
            del coord.find_longest_cache_hit

    KVCacheManager.get_computed_blocks = get_computed_blocks
