"""The incremental physical KV map (kvmap.KVTracker) against full snapshots of a real engine:
at every step its changes equal diff(snapshot before, snapshot after), through prefix-cache
hits, requests finishing, aborts, preemption, evictions of cached blocks and a cache reset."""

import numpy as np

from da_lab.engine import kvmap


def run_checked(lab, prev, *, abort_at: dict | None = None, seen: set | None = None):
    """Step `lab` until idle; check every step's KV changes against two full snapshots.
    `seen` collects what happened: "shared" (a block with two owners), "preempted" (a
    running request lost its blocks), "cached"/"uncached" (hashes set / dropped)."""
    steps = 0
    while lab.has_unfinished():
        for da_id in (abort_at or {}).pop(steps, ()):
            lab.abort(da_id)
        rec = lab.step()
        snap = kvmap.snapshot(lab._core)
        kv = kvmap.diff(prev, snap)
        assert rec.kv == kv, f"step {rec.step}"
        assert lab._kv.map == {b: v for b, v in snap.items() if v != ((), False)}
        if seen is not None:
            seen.update(k for k in ("cached", "uncached") if kv[k])
            if any(len(own) > 1 for own, _ in snap.values()):
                seen.add("shared")
            live = {r for r, st in lab.requests.items() if not st["finished"]}
            if any(live & set(prev[b][0]) for b in kv["free"]):
                seen.add("preempted")
        prev = snap
        steps += 1
    return prev, steps


def ids(seed: int, n: int) -> list[int]:
    return np.random.default_rng(seed).integers(10, 500, size=n).tolist()


def test_incremental_kv_map_equals_full_snapshots(lab):
    prev = kvmap.snapshot(lab._core)
    assert lab._kv.map == {b: v for b, v in prev.items() if v != ((), False)}
    reads = lab._kv.full_reads

    # DA requests on one prompt (prefix-shared prompt blocks), plain requests (their response
    # blocks get hashed too), one aborted mid-run.
    seed = lab.seed_prompt()
    lab.add_request(seed, tags=[(1, "<focus C2>")], max_tokens=40)
    lab.add_request(seed, max_tokens=12)
    plain = ids(1, 200)
    lab.add_request(plain, max_tokens=70)
    gone = lab.add_request(ids(2, 100), max_tokens=60)
    seen = set()
    prev, n = run_checked(lab, prev, abort_at={5: [gone]}, seen=seen)
    assert n > 40 and {"shared", "cached"} <= seen
    assert lab._kv.full_reads == reads          # all of it read incrementally

    # Prefix-cache hits on blocks that are free but still cached; more distinct prompts than
    # the pool holds, so cached free blocks are evicted (reallocated, "uncached").
    lab.add_request(plain, max_tokens=8)
    prev, _ = run_checked(lab, prev)
    seen = set()
    for k in range(6):
        lab.add_request(ids(10 + k, 300), max_tokens=20)
        prev, _ = run_checked(lab, prev, seen=seen)
    assert "uncached" in seen
    assert lab._kv.full_reads == reads

    # Preemption: three long requests do not fit the 63-block pool together.
    for k in range(3):
        lab.add_request(ids(20 + k, 600), max_tokens=500)
    seen = set()
    prev, _ = run_checked(lab, prev, seen=seen)
    assert "preempted" in seen
    assert lab._kv.full_reads == reads


def test_unseen_requests_and_cache_reset_fall_back_to_a_full_read(lab):
    prev, _ = run_checked(lab, kvmap.snapshot(lab._core))
    reads = lab._kv.full_reads
    # A request that gets blocks and finishes within one step is never seen holding them.
    lab.add_request(ids(30, 100), max_tokens=1)
    prev, _ = run_checked(lab, prev)
    assert lab._kv.full_reads == reads + 1
    assert lab.llm.reset_prefix_cache()
    lab.add_request(ids(31, 100), max_tokens=3)
    seen = set()
    prev, _ = run_checked(lab, prev, seen=seen)
    assert lab._kv.full_reads == reads + 2
    assert "uncached" in seen                             # the reset dropped every hash


def test_block_got_in_a_requests_last_step(lab):
    """A request that gets a new block in the step it finishes in: the block was never seen
    owned, but reallocating it dropped its hash."""
    prev, _ = run_checked(lab, kvmap.snapshot(lab._core))
    # Requests whose blocks all end full, so all are cached when freed: afterwards every
    # free block holds a hash, and any new block evicts one.
    for wave in range(2):
        for k in range(10):
            lab.add_request(ids(40 + 10 * wave + k, 96), max_tokens=33)
        prev, _ = run_checked(lab, prev)
    assert all(c for own, c in prev.values() if not own)
    reads = lab._kv.full_reads
    # 100 prompt tokens + 29 computed output tokens: its last step computes position 128,
    # the first of a new block.
    lab.add_request(ids(70, 100), max_tokens=30)
    seen = set()
    prev, _ = run_checked(lab, prev, seen=seen)
    assert "uncached" in seen and lab._kv.full_reads == reads
