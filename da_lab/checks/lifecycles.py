"""Request lifecycles that exercise every way a request can end, for the leak checks
(tests/test_reliability.py and da_lab/bench/reliability/reliability.py): per-request state must
return
to zero
however many of these rounds ran (engine/results.per_request_entries counts it)."""

from __future__ import annotations


def one_round(lab, prompt, short_tokens: int, size: int = 30) -> int:
    """`size` requests on `lab`: a third steered and aborted before they run, a third aborted
    after one step, a third run to their end (`short_tokens` each; the steered ones 12, room
    for the tag). Returns how many requests the round added."""
    batch = [lab.add_request(prompt, max_tokens=12 if k % 3 == 0 else short_tokens)
             for k in range(size)]
    for da_id in batch[::3]:
        lab.steer(da_id, "<local 1>")
        lab.abort(da_id)
    lab.step()
    for da_id in batch[1::3]:
        lab.abort(da_id)
    lab.run()
    return len(batch)
