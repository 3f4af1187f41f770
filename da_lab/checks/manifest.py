"""The static checker: what a vLLM release offers the DA hook, read from its Python sources with
`ast` (never imported), for every need the adapters declare (da_lab/versions/needs.py).

    python -m da_lab.checks.manifest WHEEL_OR_DIR... [--out da_lab/versions/manifests]
    python -m da_lab.checks.manifest --installed          # this environment's vLLM, unimported

A manifest (vllm-<version>.json) lists per symbol what was found: the module, the class (and
where it is defined, bases followed), a function's parameters, how an attribute is set (class
field, `self.x =` in a method, property), the calls a method makes to another, a dataclass's
fields; and the sha256 of every source file read. `problems()` compares needs with a manifest:
tests/test_vllm_manifests.py runs it over the committed manifests, `da-lab selfcheck` over the
installed sources.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

from da_lab.versions.needs import DIFFERENCES, NEEDS, Need

MANIFESTS = Path(__file__).resolve().parents[1] / "versions" / "manifests"


def key(n: Need) -> str:
    return f"{n.kind} {n.symbol}" + (f" -> {n.callee}" if n.kind == "call" else "")


class Sources:
    """vllm/**.py of a wheel or a folder (the one holding `vllm/`), parsed on demand."""

    def __init__(self, path: Path) -> None:
        self.path, self.files, self._trees = Path(path), {}, {}
        if self.path.is_file():
            self._zip = zipfile.ZipFile(self.path)
            self._names = {n for n in self._zip.namelist() if n.startswith("vllm/")}
        else:
            self._zip = None
            root = self.path
            self._names = {str(p.relative_to(root)) for p in (root / "vllm").rglob("*.py")}

    def _read(self, rel: str) -> str:
        data = self._zip.read(rel) if self._zip else (self.path / rel).read_bytes()
        self.files[rel] = hashlib.sha256(data).hexdigest()
        return data.decode()

    def file_of(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            if rel in self._names:
                return rel
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            rel = self.file_of(module)
            self._trees[module] = ast.parse(self._read(rel)) if rel else None
        return self._trees[module]

    def version(self) -> str:
        m = re.search(r"""(?:__version__|version)\s*(?::[^=]*)?=\s*['"]([^'"]+)['"]""",
                      self._read("vllm/_version.py"))
        return m.group(1).split("+")[0] if m else "unknown"


def import_source(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    """The absolute module a `from X import Y` in `module` reads (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_pkg else module.split(".")[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(tree: ast.Module, module: str, is_pkg: bool) -> dict[str, tuple[str, str]]:
    """name -> (module, name) for the module-level `from X import Y` statements."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            src = import_source(node, module, is_pkg)
            for a in node.names:
                out[a.asname or a.name] = (src, a.name)
    return out


def _lazy_export(tree: ast.Module, module: str, is_pkg: bool, name: str):
    """(module, name) of a lazy export: `MODULE_ATTRS = {"LLM": ".entrypoints.llm:LLM"}`, which
    vllm/__init__.py's `__getattr__` imports on first use (`from vllm import LLM`)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and \
                any(isinstance(t, ast.Name) and t.id == "MODULE_ATTRS" for t in node.targets):
            for k, v in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == name and \
                        isinstance(v, ast.Constant) and isinstance(v.value, str):
                    target, _, attr = v.value.partition(":")
                    rel = target.lstrip(".")
                    imp = ast.ImportFrom(module=rel or None, names=[],
                                         level=len(target) - len(rel))
                    return import_source(imp, module, is_pkg), attr
    return None


def find_class(src: Sources, module: str, name: str, depth: int = 0):
    """(defining module, ClassDef) of `name` as seen from `module` (re-exports followed, and
    lazy ones: `_lazy_export`)."""
    tree = src.tree(module)
    if tree is None or depth > 5:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    is_pkg = (src.file_of(module) or "").endswith("__init__.py")
    imp = _imports(tree, module, is_pkg).get(name) or _lazy_export(tree, module, is_pkg, name)
    return find_class(src, imp[0], imp[1], depth + 1) if imp else None


def _bases(src: Sources, module: str, cls: ast.ClassDef):
    tree = src.tree(module)
    imports = _imports(tree, module, (src.file_of(module) or "").endswith("__init__.py"))
    for b in cls.bases:
        name = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) \
            else None
        if name is None:
            continue
        found = find_class(src, module, name) if name not in imports else \
            find_class(src, *imports[name])
        if found:
            yield found


def _member(src: Sources, module: str, cls: ast.ClassDef, attr: str, depth: int = 0):
    """(how, 'module:Class', node) for `attr` on `cls` or its vLLM bases."""
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            props = {getattr(d, "id", None) or getattr(d, "attr", None)
                     for d in node.decorator_list}
            how = "property" if props & {"property", "cached_property"} else "method"
            return how, f"{module}:{cls.name}", node
        targets = [node.target] if isinstance(node, ast.AnnAssign) else \
            node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
            return "field", f"{module}:{cls.name}", node
    for node in ast.walk(cls):
        targets = [node.target] if isinstance(node, ast.AnnAssign) else \
            node.targets if isinstance(node, ast.Assign) else []
        targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if any(isinstance(t, ast.Attribute) and t.attr == attr and
               isinstance(t.value, ast.Name) and t.value.id == "self" for t in targets):
            return "assigned", f"{module}:{cls.name}", node
    if depth < 6:
        for bmod, base in _bases(src, module, cls):
            got = _member(src, bmod, base, attr, depth + 1)
            if got:
                return got
    return None


def _params(fn: ast.FunctionDef) -> dict:
    a = fn.args
    return {"params": [x.arg for x in a.posonlyargs + a.args],
            "kwonly": [x.arg for x in a.kwonlyargs],
            "varargs": a.vararg is not None, "varkw": a.kwarg is not None}


def _owner(src: Sources, n: Need):
    """(module, ClassDef or None, member name or None) of a need's symbol, or None."""
    parts = n.qualname.split(".")
    if len(parts) == 2:
        found = find_class(src, n.module, parts[0])
        return (found[0], found[1], parts[1]) if found else None
    found = find_class(src, n.module, parts[0])
    return (found[0], found[1], None) if found else (n.module, None, parts[0])


def _function(src: Sources, module: str, name: str):
    tree = src.tree(module)
    return next((f for f in (tree.body if tree else []) if isinstance(f, ast.FunctionDef)
                 and f.name == name), None)


def _calls(scope: ast.AST, callee: str) -> list[dict]:
    out = []
    funcs = [f for f in ast.walk(scope) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for f in funcs or [scope]:
        for c in ast.walk(f):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and \
                    c.func.attr == callee:
                out.append({"in": getattr(f, "name", ""), "args": len(c.args),
                            "keywords": sorted(k.arg for k in c.keywords if k.arg)})
    unique = {json.dumps(d, sort_keys=True) for d in out}
    return [json.loads(d) for d in sorted(unique)]


def find(src: Sources, n: Need) -> dict:
    """What `src` offers for need `n` (the manifest entry)."""
    if n.kind == "module":
        return {"found": src.file_of(n.module) is not None}
    if n.kind in ("class", "fields"):
        got = find_class(src, n.module, n.qualname)
        if got is None:
            return {"found": False}
        out = {"found": True, "defined_in": f"{got[0]}:{got[1].name}"}
        if n.kind == "fields":
            out["fields"] = [s.target.id for s in got[1].body if isinstance(s, ast.AnnAssign)
                             and isinstance(s.target, ast.Name)
                             and "ClassVar" not in ast.unparse(s.annotation)]
        return out
    owner = _owner(src, n)
    if owner is None:
        return {"found": False}
    module, cls, name = owner
    if n.kind == "call":
        if cls is None:
            scope = _function(src, module, name)
        elif name is None:
            scope = cls
        else:
            got = _member(src, module, cls, name)
            scope = got[2] if got else None
        calls = _calls(scope, n.callee) if scope is not None else []
        return {"found": bool(calls), "calls": calls}
    if cls is None:     # a module-level function
        fn = _function(src, module, name)
        return {"found": True, "how": "function", **_params(fn)} if fn else {"found": False}
    got = _member(src, module, cls, name)
    if got is None:
        return {"found": False}
    how, where, node = got
    out = {"found": True, "how": how, "defined_in": where}
    if n.kind == "function" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        out.update(_params(node))
    return out


def all_needs() -> list[Need]:
    """Every need of every release, and every difference's evidence (one entry per key)."""
    seen = {}
    for n in [*NEEDS, *(d.evidence for d in DIFFERENCES)]:
        seen.setdefault(key(n), n)
    return list(seen.values())


def build(path: Path) -> dict:
    src = Sources(path)
    version = src.version()
    symbols = {key(n): find(src, n) for n in all_needs()}
    # _version.py is the one file that differs between the CPU and CUDA builds' hook modules.
    files = {k: v for k, v in sorted(src.files.items()) if k != "vllm/_version.py"}
    return {"vllm": version, "sources": [Path(path).name], "symbols": symbols, "files": files}


def write(m: dict, out: Path) -> Path:
    """Write manifest `m` as out/vllm-<version>.json; a second build of the same release (the
    CPU and the CUDA wheel) must read the same, and is added to `sources`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"vllm-{m['vllm']}.json"
    if path.exists():
        old = json.loads(path.read_text())
        if [old["symbols"], old["files"]] != json.loads(json.dumps([m["symbols"], m["files"]])):
            raise SystemExit(f"{path}: {m['sources'][0]} differs from {old['sources']} in the "
                             "hook's modules; give them separate manifests")
        m = dict(m, sources=sorted(set(old["sources"]) | set(m["sources"])))
    path.write_text(json.dumps(m, indent=1) + "\n")
    return path


def problem(n: Need, found: dict | None) -> str | None:
    """Why a release (its manifest entry `found`) does not satisfy need `n`, or None."""
    if found is None:
        return f"{key(n)}: not in the manifest (regenerate it)"
    if not found.get("found"):
        return f"{key(n)}: missing"
    if n.kind == "function":
        names = found.get("params", [])
        names = names[1:] if names[:1] == ["self"] else names
        if tuple(names[: len(n.first)]) != n.first:
            return f"{key(n)}: takes ({', '.join(names)}), not ({', '.join(n.first)}, ...)"
        missing = [a for a in n.accepts if a not in names + found.get("kwonly", [])]
        if missing:
            return f"{key(n)}: takes no {', '.join(missing)}"
    if n.kind == "call" and n.accepts:
        bad = [c for c in found["calls"] if c["in"] not in n.outside
               and not set(n.accepts) <= set(c["keywords"])]
        if bad:
            return f"{key(n)}: called in {bad[0]['in']} without {', '.join(n.accepts)}"
    return None


def problems(manifest: dict, needs: list[Need]) -> list[str]:
    return [p for p in (problem(n, manifest["symbols"].get(key(n))) for n in needs) if p]


def installed_root() -> Path | None:
    """The folder holding this environment's `vllm/` package, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    locs = list(spec.submodule_search_locations or []) if spec else []
    return Path(locs[0]).parent if locs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="*", type=Path, help="vLLM wheels or folders holding vllm/")
    ap.add_argument("--installed", action="store_true", help="this environment's vLLM")
    ap.add_argument("--out", type=Path, help="write vllm-<version>.json here")
    args = ap.parse_args(argv)
    paths = list(args.sources) + ([installed_root()] if args.installed else [])
    if not paths or None in paths:
        ap.error("name a wheel or folder (or --installed, with vLLM installed)")
    from da_lab.versions.needs import RELEASES, needs_for

    status = 0
    for p in paths:
        m = build(p)
        v = m["vllm"]
        bad = problems(m, needs_for(v)) if v in RELEASES else [f"{v}: no adapter declares it"]
        print(f"{p.name}: vLLM {v}, {len(m['symbols'])} symbols, {len(m['files'])} files; "
              + ("every need met" if not bad else f"{len(bad)} problems: " + "; ".join(bad)))
        status |= bool(bad)
        if args.out:
            write(m, args.out)
    return status


if __name__ == "__main__":
    sys.exit(main())
