"""What a serving engine's DA hook counts: cumulative totals for Prometheus (read by the API
server through `service.rpc("counters")`) and one request's DA stats.

The totals live here, in the worker process that runs the hook; the API server process only
holds the last copy it fetched (da_lab/serve/metrics.py), so they are plain numbers that cross
a process boundary as one small dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from da_lab.core.cost import cost, decode_positions, step_positions
from da_lab.core.tags import Mode

# Upper bounds (seconds) of the hook-time-per-step histogram: tens of microseconds unmasked,
# a few hundred masked (docs/benchmarks.md), milliseconds only when something is wrong.
HOOK_BUCKETS_S = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1)
MALFORMED_KINDS = ("malformed_tag", "unknown_chunk")
WARNING_KINDS = ("da_refused", "aborted_mid_tag", "recompute_under_mask")


@dataclass
class Counters:
    requests: int = 0             # DA requests the hook took on
    steps: int = 0                # engine steps with at least one DA request
    blocks_read: int = 0          # per DA request per step: blocks the kernel read ...
    blocks_total: int = 0         # ... and blocks in the request's row
    # The paper's decoding attention cost, over decode steps (one query token per request):
    decode_kv_read: int = 0       # KV positions the kernel read ...
    decode_kv_full: int = 0       # ... and the positions full attention would have read
    mode_switches: dict = field(default_factory=lambda: {m.value: 0 for m in Mode})
    malformed: dict = field(default_factory=lambda: dict.fromkeys(MALFORMED_KINDS, 0))
    warnings: dict = field(default_factory=lambda: dict.fromkeys(WARNING_KINDS, 0))
    hook_seconds_sum: float = 0.0
    hook_buckets: list = field(default_factory=lambda: [0] * len(HOOK_BUCKETS_S))

    def add_step(self, log) -> None:
        """One hook `Step` (hook/step.py: one metadata build with DA requests)."""
        self.steps += 1
        s = log.hook_us * 1e-6
        self.hook_seconds_sum += s
        for i, ub in enumerate(HOOK_BUCKETS_S):
            if s <= ub:
                self.hook_buckets[i] += 1
        for rec in log.requests:
            self.blocks_read += rec.blocks_read or 0
            self.blocks_total += rec.blocks_total or 0
            self.add_events(rec.events)
        read, full = step_positions(log.requests)
        self.decode_kv_read, self.decode_kv_full = self.decode_kv_read + read, \
            self.decode_kv_full + full

    def add_events(self, events) -> None:
        for ev in events:
            kind = ev.get("kind")
            if kind == "mode_changed" and ev.get("directive"):
                mode = ev["directive"].get("mode", "global")
                self.mode_switches[mode] = self.mode_switches.get(mode, 0) + 1
            elif kind in self.malformed:
                self.malformed[kind] += 1

    def add_warnings(self, warnings) -> None:
        for w in warnings:
            if w.get("kind") in self.warnings:
                self.warnings[w["kind"]] += 1

    def snapshot(self) -> dict:
        return dict(asdict(self), hook_buckets_le=list(HOOK_BUCKETS_S))


def request_stats(st, *, live: bool) -> dict:
    """One request's DA stats (a `state.RequestState`), as the client receives them: blocks
    read vs blocks in its row summed over its steps, the tags it wrote, its mode changes."""
    bs = st.layout.block_size
    read = total = masked = 0
    for _q0, seq_len, kept in st.mask_history:
        n = -(-seq_len // bs)
        total += n
        read += n if kept is None else len(kept)
        masked += kept is not None
    ev = st.events
    kv_read, kv_full = decode_positions(st.mask_history, bs, st.layout.prompt_len)
    return {
        "id": st.da_id, "live": live, "blocks_read": read, "blocks_total": total,
        "read_fraction": round(read / total, 4) if total else None,
        "steps": len(st.mask_history), "masked_steps": masked,
        "decode_kv_read": kv_read, "decode_kv_full": kv_full,
        "decoding_attention_cost": cost(kv_read, kv_full),
        "tags": [e["text"] for e in ev if e["kind"] == "tag_trapped"],
        "mode": st.stream.mode.value,
        "mode_switches": [e["directive"]["mode"] for e in ev
                          if e["kind"] == "mode_changed" and e.get("directive")],
        "malformed_tags": [{"text": e["text"], "detail": e["detail"]} for e in ev
                           if e["kind"] in MALFORMED_KINDS],
        "flags": sorted({e["kind"] for e in ev if e["kind"] in WARNING_KINDS}),
        "tokens_seen": st.n_seen, "prompt_len": st.layout.prompt_len,
        "n_chunks": st.layout.n_chunks,
    }
