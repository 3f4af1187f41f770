"""Issue 54: module-level mutable state is the hook's session (`SESSION`) alone, and the step's
values are values.

Every module of the package is imported and its globals enumerated: a lowercase global that
holds a container or an object (not a module, class, function, logger, compiled pattern or an
immutable value) is state, and only `da_lab.hook.session.SESSION` may be one. ALL_CAPS globals
are constant tables by convention; no module rebinds a global (`global` statements). The step's
plan, its records and the engine step are frozen: assigning a field raises."""

from __future__ import annotations
import __future__

import ast
import dataclasses
import importlib
import logging
import re
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {("da_lab.hook.session", "SESSION")}
# Modules that run something when imported (scripts driven by `python -m`), or need the GPU
# build: imported nowhere in the lab, so they hold no state of a running lab.
SKIP = ("da_lab.bench.browser", "da_lab.bench.timing", "da_lab.bench.models",
        "da_lab.bench.reliability", "da_lab.__main__")
IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), tuple, frozenset, range,
             type(Ellipsis), np.dtype, np.generic, re.Pattern, logging.Logger, property,
             __future__._Feature)


def _modules() -> list[str]:
    out = subprocess.run(["git", "ls-files", "da_lab/*.py", "widgets/*.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    mods = []
    for f in out:
        parts = list(Path(f).with_suffix("").parts)
        if parts[0] == "widgets":
            parts = parts[1:]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if not name.startswith(SKIP):
            mods.append(name)
    return mods


def _is_state(value) -> bool:
    if isinstance(value, IMMUTABLE) or callable(value) and not hasattr(value, "__dict__"):
        return False
    if isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                          types.MethodType, staticmethod, classmethod)):
        return False
    if callable(value):                       # a decorated function (lru_cache, wraps, ...)
        return False
    if dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen:
        return False
    return True


def test_no_module_holds_state_but_the_session():
    found = []
    for name in _modules():
        mod = importlib.import_module(name)
        for key, value in vars(mod).items():
            if key.startswith("__") or key.isupper() or (name, key) in ALLOWED:
                continue
            if key.lstrip("_").isupper():     # _CONSTANT: a private constant table
                continue
            if getattr(value, "__module__", name) not in (name, None) and \
                    isinstance(value, (types.ModuleType, type)):
                continue
            if _is_state(value):
                found.append(f"{name}.{key} = {type(value).__name__}")
    assert not found, "module-level state besides SESSION:\n" + "\n".join(sorted(found))


def test_no_module_rebinds_a_global():
    bad = []
    for f in subprocess.run(["git", "ls-files", "da_lab/*.py", "widgets/*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split():
        for node in ast.walk(ast.parse((ROOT / f).read_text())):
            if isinstance(node, ast.Global):
                bad.append(f"{f}:{node.lineno} global {', '.join(node.names)}")
    assert not bad, "\n".join(bad)


def test_the_step_values_are_frozen():
    from da_lab.core.engine_step import EngineOutput, EngineStep
    from da_lab.core.record import Metadata, RequestStep, StepRecord
    from da_lab.hook.plan import Batch, RequestPlan, StepPlan

    for cls in (RequestStep, StepRecord, Metadata, EngineStep, EngineOutput, Batch,
                RequestPlan, StepPlan):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
    r = RequestStep("a", 0, 32, 64, 1, {"mode": "global"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.built_seq_len = 64
    rec = StepRecord.build(0, 0.0, outputs=[("a", [1], "x", False)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.requests = []


# ---- the page's modules (widgets/da_lab_widgets/static/*.js) ----------------------------------
STATIC = ROOT / "widgets" / "da_lab_widgets" / "static"
# The bootstrap is the one exception: anywidget evaluates loader.js once per widget model, and it
# links the lab's modules once per page (globalThis[KEY]), adds one rejection listener
# (__daLabQuiet) and patches anywidget's model class once (__daLabPatched).
BOOTSTRAP = "loader.js"
_TOP_STATE = re.compile(r"^(let|var)\s|^const\s+\w+\s*=\s*(new\s+(Map|Set|WeakMap|WeakSet|Array)"
                        r"\b|\[\s*\]|\{\s*\})|^\w+(\.\w+)*\s*(\?\?=|=|\+\+|--)|^globalThis\b",
                        re.M)


def test_no_page_module_keeps_state_of_its_own():
    """The page's mutable state is one object per document (pagestate.js): no module declares
    a top-level `let`/`var`, a container or an assignment, and only pagestate.js names the
    document's state."""
    found = []
    for f in sorted(STATIC.glob("*.js")):
        if f.name == BOOTSTRAP:
            continue
        text = f.read_text()
        found += [f"{f.name}: {m.group(0).strip()}" for m in _TOP_STATE.finditer(text)]
        found += [f"{f.name}: globalThis" for _ in re.finditer(r"\bglobalThis\b", text)]
        if f.name != "pagestate.js" and "__daLabPage" in text:
            found.append(f"{f.name}: names the page state directly (use pageState())")
    assert not found, found
    # and the check sees what it looks for
    assert _TOP_STATE.search("let tip = null;") and _TOP_STATE.search("const X = new Map();")
    assert not _TOP_STATE.search("const KINDS = { 1: A };")
