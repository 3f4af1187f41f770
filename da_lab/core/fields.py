"""Checked reads of a record's JSON fields: each problem is one `RecordError` line naming the
step and the field (core/record.py reads every trace field through these)."""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np


class RecordError(ValueError):
    """A record's content is malformed; the message names the step and the field."""


# ---- validation helpers (one-line messages) --------------------------------------------------
def where(step: Any, name: str) -> str:
    return f"step {step}: {name}"


def int_field(d: dict, key: str, step: Any, ctx: str = "", default: Any = ...) -> Any:
    v = d.get(key, default)
    if v is ...:
        raise RecordError(f"{where(step, ctx + key)} is missing")
    if v is None and default is None:
        return None
    if not isinstance(v, Integral) or isinstance(v, bool):
        raise RecordError(f"{where(step, ctx + key)} is {type(v).__name__} {v!r:.40}, "
                          "not an int")
    return int(v)


def typed_field(d: dict, key: str, types: tuple, step: Any, ctx: str = "", default: Any = ...):
    v = d.get(key, default)
    if v is ...:
        raise RecordError(f"{where(step, ctx + key)} is missing")
    if v is not None and not isinstance(v, types):
        want = " or ".join(t.__name__ for t in types)
        raise RecordError(f"{where(step, ctx + key)} is {type(v).__name__}, not {want}")
    return v


def array_field(d: dict, key: str, dtype, step: Any, ctx: str = "") -> np.ndarray | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        return v
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in v):
        raise RecordError(f"{where(step, ctx + key)} is not a list of ints")
    try:
        return np.asarray(v, dtype=dtype)
    except OverflowError:
        raise RecordError(f"{where(step, ctx + key)} holds an int outside "
                          f"{np.dtype(dtype).name}'s range") from None


def objects_field(d: dict, key: str, step: Any, ctx: str = "") -> list[dict]:
    """A list of objects (events, warnings, added requests), each checked to be one."""
    v = typed_field(d, key, (list,), step, ctx, None) or []
    for i, x in enumerate(v):
        if not isinstance(x, dict):
            raise RecordError(f"{where(step, f'{ctx}{key}[{i}]')} is {type(x).__name__}, "
                              "not an object")
        if key == "added":
            typed_field(x, "req", (str,), step, f"added[{i}].")
        elif not isinstance(x.get("kind", ""), str):
            raise RecordError(f"{where(step, f'{ctx}{key}[{i}].kind')} is not a string")
    return v
