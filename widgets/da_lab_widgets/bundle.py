"""The browser side as the page gets it: the ES modules under static/ (plain files, no build
step), the stylesheet, and the one module anywidget loads (static/loader.js with the others
inside: it links them in the page). An exported page (page.py) embeds the same modules."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
_IMPORT = re.compile(r"""from\s*["']\./([\w.-]+\.js)["']""")
ENTRY = "app.js"


@cache
def sources() -> dict[str, str]:
    """{file name: source} of every module app.js imports, directly or not."""
    out: dict[str, str] = {}

    def visit(name: str) -> None:
        if name not in out:
            out[name] = (STATIC / name).read_text()
            for dep in _IMPORT.findall(out[name]):
                visit(dep)

    visit(ENTRY)
    return out


@cache
def order() -> list[str]:
    """The modules, each after the ones it imports (a module's imports must have URLs first)."""
    src, done, out = sources(), set(), []

    def visit(name: str, path: tuple) -> None:
        if name in path:
            raise RuntimeError(f"static/: import cycle {' -> '.join(path + (name,))}")
        if name in done:
            return
        for dep in _IMPORT.findall(src[name]):
            visit(dep, path + (name,))
        done.add(name)
        out.append(name)

    visit(ENTRY, ())
    return out


def _json(obj) -> str:
    # inside a <script> element too: "</script>" must not end it
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")


@cache
def esm() -> str:
    """The module anywidget loads: the loader with every module's source in it."""
    src = sources()
    key = "da_lab_modules_" + hashlib.sha1(
        "".join(src[n] for n in order()).encode()).hexdigest()[:12]
    text = (STATIC / "loader.js").read_text()
    return (text.replace("/*SOURCES*/ {}", _json(src)).replace("/*ORDER*/ []", _json(order()))
            .replace('/*KEY*/ "da_lab_modules"', json.dumps(key)))


@cache
def css() -> str:
    return (STATIC / "style.css").read_text()
