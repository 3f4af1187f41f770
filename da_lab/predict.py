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
