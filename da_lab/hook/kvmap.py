"""The physical KV cache as the scheduler sees it: which request owns each block, which blocks
are free, which hold a prefix-cache hash. Read from vLLM's KVCacheManager (scheduler side).

Only changes are kept per step, so a trace of a 100k-block cache stays small.
"""

from __future__ import annotations

from collections import defaultdict

from .state import EXTRA_ID


def snapshot(engine_core) -> dict[int, tuple[tuple[str, ...], bool]]:
    """{physical block id: (owner request ids, prefix-cached)} for every block but the null one."""
    sched = engine_core.scheduler
    mgr = sched.kv_cache_manager
    pool = mgr.block_pool
    names = {}
    for rid, req in sched.requests.items():
        ex = req.sampling_params.extra_args if req.sampling_params is not None else None
        names[rid] = str((ex or {}).get(EXTRA_ID, rid))
    owners: dict[int, list[str]] = defaultdict(list)
    for stm in mgr.coordinator.single_type_managers:
        for rid, blocks in stm.req_to_blocks.items():
            for b in blocks:
                if not b.is_null:
                    owners[b.block_id].append(names.get(rid, rid))
    return {b.block_id: (tuple(sorted(owners.get(b.block_id, ()))), b.block_hash is not None)
            for b in pool.blocks if not b.is_null}


def diff(before: dict, after: dict) -> dict:
    """Changes from one snapshot to the next, in the trace's "kv" shape."""
    assign, free, cached, uncached = {}, [], [], []
    for bid, (own, c) in after.items():
        old_own, old_c = before.get(bid, ((), False))
        if own != old_own:
            if own:
                assign[str(bid)] = list(own)
            else:
                free.append(bid)
        if c != old_c:
            (cached if c else uncached).append(bid)
    return {"assign": assign, "free": free, "cached": cached, "uncached": uncached}
