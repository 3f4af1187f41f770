"""The sampled tokens' way from the sampler to the tag machines, shared by both runners.

Right after the sampler (`after_sampling`) the director overwrites the sampled token of rows
whose script says so, and the DA rows' tokens start their way to the host; before the next
decision (`drain`) they are handed to their requests. Kept apart from the metadata edit
(metadata.py): this is the read side of the tags, that is the read side of the KV cache.
"""

from __future__ import annotations

import torch

from da_lab.hook import faults
from da_lab.hook.request import Decision
from da_lab.hook.state import TRACKER


def after_sampling(sampled: torch.Tensor, d: Decision | None) -> None:
    """Right after the sampler, for both runners:
    1. the director overwrites the sampled token of rows whose script says so;
    2. the DA rows' tokens start their way to the tag machine. Neither runner keeps them on
       the host in time (v1 under async scheduling has -1 placeholders, V2 keeps them on the
       GPU), so the hook queues its own non-blocking copy and reads it once it has landed
       (`drain`): with async scheduling, always one step later — a fixed lag, never "whenever
       the copy has landed", so every tensor-parallel rank decides the same thing at the same
       step (a race here once gave the two ranks of a TP=2 engine different masks)."""
    if d is None:
        return
    try:
        _after_sampling(sampled, d)
    except Exception as e:   # noqa: BLE001 - only the step's DA requests pay
        TRACKER.hook_error("after sampling", e, d.reqs)


def _after_sampling(sampled: torch.Tensor, d: Decision) -> None:
    if d.log is not None:
        faults.check("sampling", (r.req for r in d.log.requests))
    if d.forced:
        rows = torch.tensor([r for r, _ in d.forced], dtype=torch.long)
        toks = torch.tensor([t for _, t in d.forced], dtype=sampled.dtype)
        if sampled.device.type != "cpu":
            rows, toks = rows.to(sampled.device), toks.to(sampled.device)
        sampled[rows, 0] = toks
    if d.sampling:
        if sampled.device.type == "cpu":
            TRACKER.pending_outputs.append((d.step, d.sampling, sampled[:, 0].clone(), None))
        else:
            host = sampled[:, 0].to("cpu", non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            TRACKER.pending_outputs.append((d.step, d.sampling, host, ev))


def drain(wait: bool = False) -> None:
    """Hand the sampled tokens the coming decision may read to their requests (in step order):
    those of every step up to `token_lag` steps before it (0 without async scheduling, 1 with
    it). Waiting on a copy that old costs nothing: its step finished before this one began.
    With `wait`, every queued token (a server settling requests that have ended)."""
    pending = TRACKER.pending_outputs
    newest = TRACKER.step_index - TRACKER.token_lag    # drain runs before begin_step
    while pending and (wait or pending[0][0] <= newest):
        _, rows, host, ev = pending.pop(0)
        if ev is not None:
            ev.synchronize()
        toks = host.tolist()
        for req_id, i in rows:
            st = TRACKER.requests.get(req_id)
            if st is not None:
                st.captured.append(int(toks[i]))
