"""Predict, then run: a lesson asks for a guess (a number, a mode, a tag) before a cell shows
what the engine or the trace did, and this says, in one line, whether the guess was right.
The answer is always the engine's or the trace's value, passed in by the cell; nothing here
knows it."""

from __future__ import annotations


def _same(guess, actual) -> bool:
    if isinstance(actual, str):
        return str(guess).strip().lower() == actual.strip().lower()
    try:
        return float(guess) == float(actual)
    except (TypeError, ValueError):
        return False


def check(guess, actual, what: str, why: str = "") -> bool:
    """Print whether `guess` (None: not made yet) matches `actual` (what the run gave);
    `why` is said either way once there is a guess. Returns whether it matched."""
    if guess is None or guess == "":
        print(f"predict first: set PREDICT to {what}, then run this cell again")
        return False
    ok = _same(guess, actual)
    head = (f"✓ right: {what} is {actual}" if ok
            else f"✗ you said {guess!r}; {what} is {actual}")
    print(head + (f" ({why})" if why else ""))
    return ok


def guessed(guess, what: str) -> bool:
    """Has the reader guessed? If not, say what to guess and show nothing: the cell that asks
    must not move the player or print the engine's answer before the guess (Run All runs it)."""
    if guess is None or guess == "":
        print(f"predict first: set PREDICT to {what}, then run this cell again (nothing has "
              "run yet: the player is still where you left it)")
        return False
    return True


def request_steps(records: list, req: str) -> list[int]:
    """The indices of the records in which `req` was in the batch: its own steps, counted from
    0 (engine step numbers keep counting across requests and Run Alls; these do not)."""
    return [i for i, rec in enumerate(records) if any(q.req == req for q in rec.requests)]


def step_to(player, k: int, req: str | None = None):
    """Move `player` to step k of request `req` (0: its first; default: the first request
    added in the player's run), running the engine one step at a time as needed. Returns
    (k reached, the request's RequestStep there); fewer steps when the request ended first."""
    records = player.source.records
    if req is None:
        req = next((a["req"] for rec in records for a in rec.added), None)
    while True:
        idx = request_steps(records, req)
        if len(idx) > k or not player.goto(len(records)):     # goto: at most one engine step
            break
    if not idx:
        raise ValueError(f"{req} has no step in this run")
    k = min(k, len(idx) - 1)
    player.goto(idx[k])
    return k, next(q for q in records[idx[k]].requests if q.req == req)
