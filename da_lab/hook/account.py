"""The hook's account of its requests, for the checks that read it: the per-request entries
that must be empty when nothing runs (the leak checks), and a worker's whole log (the
tensor-parallel check compares ranks). Read-only: it reports the session, never changes it."""

from __future__ import annotations


def entries(b) -> dict[str, int]:
    """Per-request entries that must be 0 whenever no request runs, and the bounded
    histories' overflow (the leak checks count these)."""
    return {"tracker.requests": len(b.requests), "tracker.refused": len(b.refused),
            "tracker.pending_outputs": len(b.pending),
            "tracker.scripts": len(b.scripts),
            "tracker.finished_over_bound": max(0, len(b.finished) - b.keep_finished),
            "tracker.warnings_over_bound": max(0, len(b.warnings) - b.keep_warnings)}


def rank_log(session) -> dict:
    """This worker's whole account, left as it is (the tensor-parallel check compares
    ranks): who runs, the steps not yet reported, every DA request's events, mask history
    and sampled tokens (also those still on their way to the tag machine), the warnings."""
    b = session.book
    for s in session.steps:     # step records whose host copies were in flight (CUDA)
        s.settle()
    pending: dict[str, list[int]] = {}
    for _, rows, host, ev in b.pending:
        if ev is not None:
            ev.synchronize()
        toks = host.tolist()
        for req_id, i in rows:
            pending.setdefault(req_id, []).append(int(toks[i]))
    reqs = {st.da_id: {
        "events": st.events,
        "mask_history": [[int(a), int(c), None if k is None else [int(x) for x in k]]
                         for a, c, k in st.mask_history],
        # an ended request took its queued tokens already (book._take_pending)
        "captured": [int(x) for x in st.captured] + (pending.get(st.req_id, [])
                                                     if st.req_id in b.requests else []),
        "text": st.text} for st in list(b.finished.values()) + list(b.requests.values())}
    f = session.facts
    return {"hook_installed": session.installed, "runner_class": f.runner_class,
            "backend": f.backend, "device": f.device,
            "steps": [s.to_json() for s in session.steps], "requests": reqs,
            "warnings": b.warnings}
