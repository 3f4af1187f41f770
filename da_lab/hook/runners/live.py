"""The runtime half of needs.py: check the adapters' declared needs on the live vLLM classes
when the plugin installs its wrappers, so a vLLM that differs raises (DAUnsupported) instead of
leaving DA off silently. What Python can see without reading sources is checked here: modules,
classes, method signatures, dataclass fields. Instance attributes (set in __init__) and the
calls inside vLLM's methods are checked statically only (da_lab/checks/manifest.py)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect

from da_lab.hook.errors import DAUnsupported
from da_lab.versions.needs import Need


def _resolve(need: Need):
    """(owner, member name, value) of a need's symbol; raises LookupError naming what is
    missing."""
    try:
        obj = importlib.import_module(need.module)
    except ImportError as e:
        raise LookupError(f"module {need.module} does not import ({e})") from e
    parts = need.qualname.split(".") if need.qualname else []
    owner, name = None, need.module
    for p in parts:
        owner, name = obj, p
        if not hasattr(obj, p):
            raise LookupError(f"{need.module}:{'.'.join(parts[:parts.index(p) + 1])} is missing")
        obj = getattr(obj, p)
    return owner, name, obj


def signature_problem(fn, need: Need) -> str | None:
    """Why `fn` does not take what `need` says, or None."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None                     # a builtin: nothing to compare
    if params and params[0].name == "self":
        params = params[1:]
    names = [p.name for p in params]
    if tuple(names[: len(need.first)]) != need.first:
        return f"takes ({', '.join(names)}), not ({', '.join(need.first)}, ...) first"
    keyword = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [a for a in need.accepts if a not in keyword]
    return f"takes no {', '.join(missing)}" if missing else None


def problem(need: Need) -> str | None:
    """What is wrong with one need on the installed vLLM, or None (also None for the kinds
    only the static checker can see)."""
    if need.kind in ("call",):
        return None
    if need.kind == "module":
        return None if importlib.util.find_spec(need.module) is not None else \
            f"module {need.module} is missing"
    try:
        owner, name, obj = _resolve(need) if need.kind != "attribute" else _owner_of(need)
    except LookupError as e:
        return str(e)
    if need.kind == "function":
        if not callable(obj):
            return f"{need.symbol} is not callable"
        why = signature_problem(obj, need)
        return f"{need.qualname} {why}" if why else None
    if need.kind == "fields" and not dataclasses.is_dataclass(obj):
        return f"{need.symbol} is no longer a dataclass"
    return None


def _owner_of(need: Need):
    """An attribute need: only its class is resolved here (instance attributes are set in
    __init__); class-level attributes and dataclass fields are checked."""
    cls_need = dataclasses.replace(need, symbol=need.symbol.rsplit(".", 1)[0])
    _, _, cls = _resolve(cls_need)
    attr = need.symbol.rsplit(".", 1)[1]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    if dataclasses.is_dataclass(cls) and attr not in fields and not hasattr(cls, attr):
        raise LookupError(f"{need.symbol} is missing (not a field of the dataclass)")
    return cls, attr, None


def check(needs: list[Need], what: str) -> None:
    """Raise DAUnsupported listing every need that fails, naming the adapter `what`."""
    bad = [p for p in (problem(n) for n in needs) if p]
    if bad:
        from da_lab.versions.releases import supported_range

        raise DAUnsupported(
            f"the DA hook's {what} adapter does not match this vLLM ({'; '.join(bad)}); it was "
            f"checked against vLLM {supported_range()} and would otherwise leave DA off "
            f"silently")


def check_cm_fields(cls, expected: dict[str, str]) -> None:
    """The installed CommonAttentionMetadata has exactly the fields cm_fields.py classifies."""
    have = {f.name for f in dataclasses.fields(cls)}
    new, gone = sorted(have - set(expected)), sorted(set(expected) - have)
    if new or gone:
        raise DAUnsupported(
            "CommonAttentionMetadata differs from the fields the DA edit was written for "
            f"(new: {', '.join(new) or '-'}; gone: {', '.join(gone) or '-'}); see "
            "da_lab/versions/cm_fields.py")
