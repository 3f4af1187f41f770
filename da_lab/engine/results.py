"""What the Lab keeps per request for the user: tokens, text, and flags that change what the
tokens mean. Finished requests are kept as a bounded history (`Lab.keep_finished`)."""

from __future__ import annotations

# Warnings that change what a request's tokens mean: copied into its `flags`.
#   recompute_under_mask: vLLM preempted the request while it was masked and recomputed it
#     under its current mask, so its later tokens may differ from an uninterrupted run.
#   da_refused: its layout or director script was unusable: it ran as plain attention.
FLAG_KINDS = ("recompute_under_mask", "da_refused")


def flag_requests(requests: dict, warnings: list[dict]) -> None:
    """Copy the flag-worthy warnings of a step into their requests' `flags` (once per kind)."""
    for w in warnings:
        r = requests.get(w.get("req"))
        if r is not None and w["kind"] in FLAG_KINDS and \
                all(f["kind"] != w["kind"] for f in r["flags"]):
            r["flags"].append({"kind": w["kind"], "step": w.get("step"),
                               "message": w.get("detail", "")})


def prune_finished(requests: dict, keep: int) -> None:
    """Drop the oldest finished requests beyond `keep` (dicts keep insertion order)."""
    done = [da_id for da_id, r in requests.items() if r["finished"]]
    for da_id in done[: max(0, len(done) - keep)]:
        del requests[da_id]


def request_result(requests: dict, da_id: str) -> dict:
    r = requests.get(da_id)
    if r is None:
        raise ValueError(f"no request {da_id!r} (finished ones are kept only as a bounded "
                         "history)")
    kinds = {f["kind"] for f in r["flags"]}
    return {"request_id": da_id, "token_ids": list(r["token_ids"]), "text": r["text"],
            "finished": r["finished"], "flags": [dict(f) for f in r["flags"]],
            "recomputed_under_mask": "recompute_under_mask" in kinds,
            "da_refused": "da_refused" in kinds}


def per_request_entries(lab) -> dict[str, int]:
    """Entries that must be 0 whenever no request runs: live per-request state anywhere, and
    finished histories beyond their bounds (tests and da_lab/bench/reliability/reliability.py count
    these)."""
    return {**lab.session.entries(),
            "lab.running": sum(not r["finished"] for r in lab.requests.values()),
            "lab.requests_over_bound": max(0, len(lab.requests) - lab.keep_finished)}
