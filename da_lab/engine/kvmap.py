"""The physical KV cache as the scheduler sees it: which request owns each block, which blocks
are free, which hold a prefix-cache hash. Read from vLLM's KVCacheManager (scheduler side).

Only changes are kept per step, so a trace of a 100k-block cache stays small. `snapshot` +
`diff` read the whole pool (the reference, and what tests compare against); `KVTracker` gives
the same changes step by step while looking only at blocks that can have changed.

Every attribute read here on a vLLM object is declared in versions/needs.py (the "kvmap"
needs) and so checked against every release's manifest: vLLM's objects are held only in the
local names of `VLLM_NAMES`, and tests/test_vllm_manifests.py reads this module with `ast` and
fails on an attribute read of one of them that is not declared, or on a read of anything else
it can't place. No read has a silent default: a vLLM without one fails here, loudly, instead
of drawing an empty KV map.
"""

from __future__ import annotations

from collections import defaultdict

from da_lab.core.wire import EXTRA_ID
from da_lab.versions.needs import (
    BLOCK,
    COORDINATOR,
    CORE,
    KV_MANAGER,
    POOL,
    REQUEST,
    SAMPLING,
    SCHED,
    SINGLE_TYPE,
)

# The local names that hold vLLM's objects in this module, and their classes.
VLLM_NAMES = {"core": CORE, "sched": SCHED, "mgr": KV_MANAGER, "coord": COORDINATOR,
              "stm": SINGLE_TYPE, "pool": POOL, "b": BLOCK, "req": REQUEST, "sp": SAMPLING}


def _name(sched, req_id: str) -> str:
    """The caller's id of a request (the engine's own id if it carries none)."""
    req = sched.requests.get(req_id)
    if req is None:
        return req_id
    sp = req.sampling_params
    ex = sp.extra_args if sp is not None else None
    return str((ex or {}).get(EXTRA_ID, req_id))


def _parts(core):
    """(scheduler, its KV-cache manager's coordinator, block pool) of an EngineCore."""
    sched = core.scheduler
    mgr = sched.kv_cache_manager
    return sched, mgr.coordinator, mgr.block_pool


def snapshot(core) -> dict[int, tuple[tuple[str, ...], bool]]:
    """{physical block id: (owner request ids, prefix-cached)} for every block but the null one."""
    sched, coord, pool = _parts(core)
    names = {req_id: _name(sched, req_id) for req_id in sched.requests}
    owners: dict[int, list[str]] = defaultdict(list)
    for stm in coord.single_type_managers:
        for req_id, blocks in stm.req_to_blocks.items():
            for b in blocks:
                if not b.is_null:
                    owners[b.block_id].append(names.get(req_id, req_id))
    return {b.block_id: (tuple(sorted(owners.get(b.block_id, ()))), b.block_hash is not None)
            for b in pool.blocks if not b.is_null}


def _empty_diff() -> dict:
    return {"assign": {}, "free": [], "cached": [], "uncached": []}


def _note(out: dict, bid: int, own: tuple, c: bool, old_own: tuple, old_c: bool) -> None:
    """Add one block's change (owners, prefix-cached) to a diff in the trace's "kv" shape."""
    if own != old_own:
        if own:
            out["assign"][str(bid)] = list(own)
        else:
            out["free"].append(bid)
    if c != old_c:
        out["cached" if c else "uncached"].append(bid)


def diff(before: dict, after: dict) -> dict:
    """Changes from one snapshot to the next, in the trace's "kv" shape."""
    out = _empty_diff()
    for bid, (own, c) in after.items():
        _note(out, bid, own, c, *before.get(bid, ((), False)))
    return out


class _Held:
    """One request's block list as last seen. vLLM only appends to a live request's list
    (full attention; a prefix-hit copy-on-write happens before the list is first seen) and
    replaces the whole list when the request is freed, so (list object, length) tells what
    changed. The list object itself is kept: when the request is freed, it still names the
    blocks the request held, including any it got in its last step."""
    __slots__ = ("blocks", "n", "name", "unhashed")

    def __init__(self, blocks: list, name: str) -> None:
        self.blocks, self.n, self.name = blocks, 0, name
        self.unhashed = 0          # blocks[:unhashed] all carry a prefix-cache hash


class KVTracker:
    """`diff(previous snapshot, snapshot now)`, one engine step at a time, without reading the
    whole pool: call `update()` after every engine step (or `invalidate()` when steps went by
    unrecorded). What can change between two steps, and where it is looked for:

      owners   only through requests' block lists: appended blocks, freed lists
      cached   a hash is set on blocks of a request's list past its hashed prefix; it is
               dropped when a free block is reallocated (the block shows up in a list as a new
               block) or when the whole prefix cache is reset (a new hash map: full re-read)

    A request that got blocks and finished within one step is never seen with its list, so its
    blocks' hashes could have changed unseen: such a step (a finished request id this tracker
    never saw) is read in full, as is any step after `invalidate()`.
    """

    def __init__(self, core) -> None:
        self.core = core
        # Only blocks that are owned or cached are kept: absent means ((), False).
        self.map: dict[int, tuple[tuple[str, ...], bool]] = {}
        self._owners: dict[int, list[str]] = {}        # block id -> owner names, unsorted
        self._held: dict[tuple[int, str], _Held] = {}  # (manager index, request id) -> list
        self._req_ids: set[str] = set()
        self._hash_map = None
        self._full = True
        self.full_reads = 0          # updates that had to read the whole pool
        self.update()

    def invalidate(self) -> None:
        """Steps ran that `update()` did not see: the next update reads the whole pool."""
        self._full = True

    def changes_from_empty(self) -> dict:
        """The whole map now, written as changes from an empty cache."""
        return diff({}, dict(sorted(self.map.items())))

    def update(self) -> dict:
        """The changes since the last update, exactly as `diff` of two snapshots gives them."""
        sched, coord, pool = _parts(self.core)
        hash_map = pool.cached_block_hash_to_block
        finished = sched.finished_req_ids
        full = (self._full or hash_map is not self._hash_map
                or any(req_id not in self._req_ids for req_id in finished))
        touched: dict[int, object] = {}     # block id -> block whose state may have changed
        if full:
            self.full_reads += 1
            self._owners, self._held = {}, {}
            touched = {b.block_id: b for b in pool.blocks if not b.is_null}
        caching = pool.enable_caching
        owners = self._owners
        held: dict[tuple[int, str], _Held] = {}
        for g, stm in enumerate(coord.single_type_managers):
            for req_id, blocks in stm.req_to_blocks.items():
                key = (g, req_id)
                h = self._held.pop(key, None)
                if h is None or h.blocks is not blocks:
                    if h is not None:
                        self._release(h, touched)
                    h = _Held(blocks, _name(sched, req_id))
                held[key] = h
                n = len(blocks)
                for b in blocks[h.n:n]:                # appended since the last update
                    if not b.is_null:
                        owners.setdefault(b.block_id, []).append(h.name)
                        touched[b.block_id] = b
                h.n = n
                if caching:
                    # Hashes are set past the hashed prefix only; a held block keeps its hash.
                    k = h.unhashed
                    for b in blocks[k:n]:
                        if b.block_hash is None:
                            break
                        k += 1
                    for b in blocks[h.unhashed:n]:
                        if b.block_hash is not None and not b.is_null:
                            touched[b.block_id] = b
                    h.unhashed = k
        for h in self._held.values():                  # freed (finished, aborted, preempted)
            self._release(h, touched)
        self._held, self._full, self._hash_map = held, False, hash_map
        self._req_ids = {req_id for _, req_id in held}
        return self._changes(touched if full else dict(sorted(touched.items())))

    def _release(self, h: _Held, touched: dict) -> None:
        owners = self._owners
        for b in h.blocks[:h.n]:
            if not b.is_null:
                names = owners[b.block_id]
                names.remove(h.name)
                if not names:
                    del owners[b.block_id]
        for b in h.blocks:          # blocks got after the last update: their hash may differ
            if not b.is_null:
                touched[b.block_id] = b

    def _changes(self, touched: dict) -> dict:
        out = _empty_diff()
        for bid, b in touched.items():
            names = self._owners.get(bid)
            own = tuple(sorted(names)) if names else ()
            c = b.block_hash is not None
            old_own, old_c = self.map.get(bid, ((), False))
            if own == old_own and c == old_c:
                continue
            _note(out, bid, own, c, old_own, old_c)
            if own or c:
                self.map[bid] = (own, c)
            else:
                del self.map[bid]
        return out
