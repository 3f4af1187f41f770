"""What the vLLM read scan (checks/vllm_reads.py) reads a module as: its tree, its imports,
the module-level strings it runs as code (each scanned as a module of its own, named
`module.NAME`), every vLLM import in any of these forms, and the small ast helpers the scan
shares. Nothing here knows what is declared."""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

DERIVED = "<vLLM value>"      # a value read off a vLLM object, of undeclared class
ANY = "builtins:object"       # held as a Python object only (its type, its name)
PLAIN_T = "<plain>"           # declared PLAIN: nothing read off it is vLLM's
MISSING = object()
COPIES = {"type", "copy.copy", "copy.deepcopy", "copy"}    # calls that keep their argument's class
CONTAINER_METHODS = {m for t in (dict, list, set, tuple, str) for m in dir(t)
                     if not m.startswith("_")}            # .items(), .get(): the container's
OURS = re.compile(r"^(_da_|da_lab)")          # marks the hook sets on vLLM's objects
CODE = re.compile(r"\b(from|import) vllm\b")
BUILTIN_TYPE = re.compile(r"^(str|int|float|bool|dict|list|tuple|set)\b")
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (*FUNCS, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class Rules:
    """What the scan holds reads against (versions/: needs, reads; the manifests' fields)."""
    declared: dict[str, list]            # symbol -> its needs (not "call")
    fields: dict[str, set[str]]          # class symbol -> fields in every release listed
    reads: dict[str, dict]               # module -> {expression: class symbol(s) | PLAIN}
    returns: dict[str, object]           # "module:function" -> what it returns
    holds: dict[str, object]             # "module:Class.attr" -> what it holds
    keywords_to: dict[str, str]          # callable symbol -> the class its **kwargs reach
    keyword_sources: dict[str, tuple]    # "module:function" -> the keys of the dict it returns
    handles: frozenset[str]
    inherited: dict[str, tuple] = field(default_factory=dict)   # Python's base classes' attrs


@dataclass
class Module:
    name: str
    tree: ast.Module
    is_pkg: bool = False
    code: dict = field(default_factory=dict)         # NAME -> a module-level string run as code
    parents: dict = field(default_factory=dict)
    imports: dict = field(default_factory=dict)      # local -> (module, name | None)
    vllm_names: dict = field(default_factory=dict)   # local -> the import's symbol


def load(roots: dict[str, Path]) -> dict[str, Module]:
    """{module name: Module} of every .py under each root ({package: folder})."""
    out = {}
    for pkg, folder in roots.items():
        for p in sorted(Path(folder).rglob("*.py")):
            rel = p.relative_to(folder).with_suffix("").parts
            name = ".".join((pkg, *rel[:-1])) if rel[-1] == "__init__" else \
                ".".join((pkg, *rel))
            out.update(modules_of(name, p.read_text(), p.name == "__init__.py"))
    return out


def modules_of(name: str, source: str, is_pkg: bool = False) -> dict[str, Module]:
    """The module, and each module-level string it runs as code as a module of its own."""
    m = parse(name, source, is_pkg)
    return {name: m, **{f"{name}.{var}": parse(f"{name}.{var}", textwrap.dedent(node.value))
                        for var, node in m.code.items()}}


def parse(name: str, source: str, is_pkg: bool = False) -> Module:
    m = Module(name, ast.parse(source), is_pkg)
    for node in m.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) and CODE.search(node.value.value):
            try:
                ast.parse(textwrap.dedent(node.value.value))
                m.code[node.targets[0].id] = node.value
            except SyntaxError:
                pass
    for node in ast.walk(m.tree):
        for child in ast.iter_child_nodes(node):
            m.parents[child] = node
        if isinstance(node, ast.ImportFrom):
            src = import_source(node, name, is_pkg)
            for a in node.names:
                m.imports[a.asname or a.name] = (src, a.name)
                if src.split(".")[0] == "vllm":
                    m.vllm_names[a.asname or a.name] = f"{src}:{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                m.imports[a.asname or a.name.split(".")[0]] = (a.name if a.asname else
                                                                a.name.split(".")[0], None)
    return m


def import_source(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_pkg else module.split(".")[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def norm(e: ast.AST) -> str | None:
    """An expression's key in versions/reads.py: `a.b`, `f()`, `x[]`."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        v = norm(e.value)
        return v and f"{v}.{e.attr}"
    if isinstance(e, ast.Call):
        f = norm(e.func)
        return f and f"{f}()"
    if isinstance(e, ast.Subscript):
        v = norm(e.value)
        return v and f"{v}[]"
    if isinstance(e, ast.Await):
        return norm(e.value)
    return None


def classes(v) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)


def vllm_imports(m: Module) -> list[tuple[int, str, str]]:
    """(line, symbol, kind) of every vLLM import of `m`, in code, in strings run as code,
    `find_spec("vllm.x")` and `-m vllm.x`."""
    out = []
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, "module") for a in node.names
                    if a.name.split(".")[0] == "vllm"]
        elif isinstance(node, ast.ImportFrom):
            src = import_source(node, m.name, m.is_pkg)
            if src.split(".")[0] == "vllm":
                out += [(node.lineno, f"{src}:{a.name}", "name") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                CODE.search(node.value) and node not in m.code.values():
            try:
                inner = parse(m.name, textwrap.dedent(node.value), m.is_pkg)
            except SyntaxError:
                continue
            out += [(node.lineno, s, k) for _, s, k in vllm_imports(inner)]
        elif isinstance(node, ast.Call) and (norm(node.func) or "").endswith("find_spec") \
                and node.args and vllm_const(node.args[0]):
            out.append((node.lineno, node.args[0].value, "spec"))
        elif isinstance(node, (ast.List, ast.Tuple)):
            for a, b in zip(node.elts, node.elts[1:], strict=False):
                if isinstance(a, ast.Constant) and a.value == "-m" and vllm_const(b):
                    out.append((node.lineno, b.value, "run"))
    return out


def vllm_const(e) -> bool:
    return isinstance(e, ast.Constant) and isinstance(e.value, str) and \
        e.value.split(".")[0] == "vllm"


def union(a, b):
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (a if isinstance(a, tuple) else ()) + (b if isinstance(b, tuple) else ())
    return DERIVED if DERIVED in (a, b) else None


def is_vllm(t) -> bool:
    return isinstance(t, tuple) or t == DERIVED


def targets(t: ast.AST) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in targets(e)]
    if isinstance(t, ast.Starred):
        return targets(t.value)
    return []


def unpacked(pairs, unpack: bool):
    """`a, b = x, y` as (a, x), (b, y)."""
    for target, value in pairs:
        if unpack and isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and \
                len(target.elts) == len(value.elts):
            yield from zip(target.elts, value.elts, strict=True)
        else:
            yield target, value


def bindings(node: ast.AST):
    """(target, value) pairs a statement or comprehension binds."""
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return [(node.target, node.iter)]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, node.context_expr)]
    return []


def param_names(fn, drop_self: bool = False, kwonly: bool = True) -> list[str]:
    if fn is None:
        return []
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args)]
    names = names[1:] if drop_self and names else names
    return names + ([x.arg for x in a.kwonlyargs] if kwonly else [])


def short(e: ast.AST) -> str:
    s = ast.unparse(e)
    return s if len(s) <= 70 else s[:67] + "..."


def instance_class(m: Module | None, name: str) -> str | None:
    """The class of module-level `name = Class(...)` in `m` (SESSION -> Session)."""
    for node in m.tree.body if m else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets) and \
                isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            return node.value.func.id
    return None
