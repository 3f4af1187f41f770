"""The typing half of the vLLM read scan (checks/vllm_reads.py): what an expression holds (a
declared vLLM class, a plain value, a vLLM value of undeclared class, or nothing of vLLM's),
from versions/reads.py (READS per module, HOLDS per attribute, RETURNS per accessor), the
names a module binds from vLLM values, and which of the package's functions a call reaches."""

from __future__ import annotations

import ast

from da_lab.checks.vllm_source import (
    BUILTIN_TYPE,
    COPIES,
    DERIVED,
    FUNCS,
    MISSING,
    PLAIN_T,
    SCOPES,
    Module,
    Rules,
    bindings,
    classes,
    instance_class,
    is_vllm,
    norm,
    targets,
    union,
    unpacked,
)


class Typing:
    """One module's view of what its expressions hold; `used` collects the declarations it
    looked up (for the scan's stale-entry check)."""

    def __init__(self, m: Module, rules: Rules, modules: dict[str, Module], used: set) -> None:
        self.m, self.rules, self.modules, self.used = m, rules, modules, used
        self.entry = rules.reads.get(m.name)
        self.derived: dict[ast.AST | None, set[str]] = {}
        self.typed: dict[ast.AST | None, dict[str, tuple]] = {}
        self.found: list[str] = []

    def scopes(self, node: ast.AST) -> list[ast.AST]:
        """The functions and comprehensions around `node`, innermost first."""
        out, p = [], self.m.parents.get(node)
        while p is not None:
            if isinstance(p, SCOPES):
                out.append(p)
            p = self.m.parents.get(p)
        return out

    def lookup(self, key: str, node: ast.AST):
        entry = self.entry or {}
        for fn in self.scopes(node):
            if isinstance(fn, FUNCS) and f"{fn.name}:{key}" in entry:
                self.used.add((self.m.name, f"{fn.name}:{key}"))
                return entry[f"{fn.name}:{key}"]
        if key in entry:
            self.used.add((self.m.name, key))
            return entry[key]
        return MISSING

    def type_of(self, e: ast.AST):
        """The declared class(es) of `e`, PLAIN_T, DERIVED (read off a vLLM value) or None."""
        k = norm(e)
        if k is not None:
            v = self.lookup(k, e)
            if v is not MISSING:
                return PLAIN_T if v is None else classes(v)
        if isinstance(e, ast.Name):
            for fn in [*self.scopes(e), None]:
                if e.id in self.typed.get(fn, {}):
                    return self.typed[fn][e.id]
                if e.id in self.derived.get(fn, ()):
                    return DERIVED
            return (self.m.vllm_names[e.id],) if e.id in self.m.vllm_names else None
        if isinstance(e, (ast.Attribute, ast.Subscript)):
            return self.held(e)
        if isinstance(e, ast.Call):
            target = self.resolve(e.func)
            if target in self.rules.returns:
                r = self.rules.returns[target]
                return PLAIN_T if r is None else classes(r)
            if norm(e.func) == "getattr" and e.args:
                return DERIVED if is_vllm(self.type_of(e.args[0])) else None
            if self.canonical(e.func) in COPIES and e.args:
                return self.type_of(e.args[0])
            if isinstance(e.func, ast.Attribute):
                return self.held(e)
            t = self.type_of(e.func)
            if isinstance(t, tuple) and isinstance(e.func, ast.Name) and all(
                    any(n.kind == "class" for n in self.rules.declared.get(c, ())) for c in t):
                return t                                  # a vLLM class, called: an instance
            return DERIVED if is_vllm(t) else None
        if isinstance(e, ast.IfExp):
            return union(self.type_of(e.body), self.type_of(e.orelse))
        if isinstance(e, ast.BoolOp):
            t = None
            for v in e.values:
                t = union(t, self.type_of(v))
            return t
        if isinstance(e, (ast.Await, ast.NamedExpr)):
            return self.type_of(e.value)
        return None

    def held(self, e: ast.AST):
        """What a read off a vLLM value holds: HOLDS["Class.attr"] ("Class.attr()" for a
        method's result, "Class.attr[]" or "Class[]" for an item, "Class.*" for every
        attribute), else DERIVED (None where the base is no vLLM value)."""
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute):
            got = self._holds(self.type_of(e.value.value), lambda c: [f"{c}.{e.value.attr}[]"])
            if isinstance(got, tuple) or got == PLAIN_T:
                return got
        if isinstance(e, ast.Subscript):
            return self._holds(self.type_of(e.value), lambda c: [f"{c}[]"])
        if isinstance(e, ast.Call):
            return self._holds(self.type_of(e.func.value), lambda c: [f"{c}.{e.func.attr}()"])
        return self._holds(self.type_of(e.value), lambda c: [f"{c}.{e.attr}", f"{c}.*"])

    def canonical(self, f: ast.AST) -> str:
        """A callable's dotted name with module aliases undone (`_copy.copy` -> copy.copy)."""
        name = norm(f) or ""
        head, dot, tail = name.partition(".")
        imp = self.m.imports.get(head)
        return f"{imp[0]}{dot}{tail}" if imp and imp[1] is None else name

    def _holds(self, base, keys):
        if not isinstance(base, tuple):
            return DERIVED if base == DERIVED else None
        out = []
        for c in base:
            key = next((k for k in keys(c) if k in self.rules.holds), None)
            if key is None:
                return DERIVED
            self.used.add(("HOLDS", key))
            out.append(self.rules.holds[key])
        if all(v is None for v in out):
            return PLAIN_T
        return DERIVED if any(v is None for v in out) else \
            tuple(dict.fromkeys(c for v in out for c in classes(v)))

    def bind(self) -> None:
        """Locals bound from a vLLM value and declared nowhere: of its class where one name
        is assigned a value of a declared class, else DERIVED (to a fixpoint)."""
        for _ in range(6):
            changed = False
            for node in ast.walk(self.m.tree):
                for target, value in unpacked(bindings(node), isinstance(node, ast.Assign)):
                    t = self.type_of(value)
                    if not is_vllm(t):
                        continue
                    scope = next(iter(self.scopes(target)), None)
                    one = isinstance(target, ast.Name) and isinstance(t, tuple) and \
                        not isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension))
                    for name in targets(target):
                        if self.lookup(name, target) is not MISSING:
                            continue
                        if one and self.typed.setdefault(scope, {}).get(name) != t:
                            self.typed[scope][name] = t
                            changed = True
                        elif not one and name not in self.derived.setdefault(scope, set()):
                            self.derived[scope].add(name)
                            changed = True
            if not changed:
                return

    def resolve(self, f: ast.AST) -> str | None:
        """"module:qualname" of a call's target in the package, or None."""
        imports, mods = self.m.imports, self.modules
        if isinstance(f, ast.Name):
            if f.id in imports and imports[f.id][1] is not None:
                mod, name = imports[f.id]
                if mod.startswith("da_lab") and f"{mod}.{name}" not in mods:
                    return f"{mod}:{name}"
            elif any(isinstance(n, (*FUNCS, ast.ClassDef)) and n.name == f.id
                     for n in self.m.tree.body):
                return f"{self.m.name}:{f.id}"
            return None
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
            return None
        x = f.value.id
        if x == "self":
            cls = next((p for p in self._parents(f) if isinstance(p, ast.ClassDef)), None)
            if cls is None or not any(isinstance(n, FUNCS) and n.name == f.attr
                                      for n in cls.body):
                return None
            return f"{self.m.name}:{cls.name}.{f.attr}"
        if x not in imports or not imports[x][0].startswith("da_lab"):
            return None
        mod, name = imports[x]
        if name is None or f"{mod}.{name}" in mods:
            return f"{mod if name is None else f'{mod}.{name}'}:{f.attr}"
        inst = instance_class(mods.get(mod), name)
        return inst and f"{mod}:{inst}.{f.attr}"

    def _parents(self, node):
        p = self.m.parents.get(node)
        while p is not None:
            yield p
            p = self.m.parents.get(p)

    def definition(self, target: str | None):
        """The FunctionDef a "module:qualname" names (a class: its __init__)."""
        if not target or ":" not in target:
            return None
        mod, _, qual = target.partition(":")
        m = self.modules.get(mod)
        if m is None:
            return None
        body, node = m.tree.body, None
        for part in qual.split("."):
            node = next((n for n in body if isinstance(n, (*FUNCS, ast.ClassDef))
                         and n.name == part), None)
            if node is None:
                return None
            body = node.body
        if isinstance(node, ast.ClassDef):
            node = next((n for n in node.body if isinstance(n, FUNCS)
                         and n.name == "__init__"), None)
        return node

    def plain(self, node, name: str) -> bool:
        """Whether `name` is annotated with a builtin type where it is bound (`runner: str`)."""
        if isinstance(node, ast.Attribute):
            return False
        for scope in [*self.scopes(node), self.m.tree]:
            args = scope.args if isinstance(scope, FUNCS) else None
            anns = [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
                    if a.arg == name] if args else []
            anns += [n.annotation for n in ast.walk(scope) if isinstance(n, ast.AnnAssign)
                     and isinstance(n.target, ast.Name) and n.target.id == name]
            if anns:
                return all(a is not None and BUILTIN_TYPE.match(ast.unparse(a)) for a in anns)
        return False

    def constants(self, e: ast.AST) -> list[str]:
        """The strings a loop variable takes (`for name in ("a", "b")`), else []."""
        if not isinstance(e, ast.Name):
            return []
        for node in ast.walk(self.m.tree):
            for target, value in bindings(node):
                if isinstance(target, ast.Name) and target.id == e.id and \
                        isinstance(node, (ast.For, ast.comprehension)) and \
                        isinstance(value, (ast.Tuple, ast.List)) and value.elts and \
                        all(isinstance(x, ast.Constant) and isinstance(x.value, str)
                            for x in value.elts):
                    return [x.value for x in value.elts]
        return []

    def note(self, node: ast.AST, text: str) -> None:
        self.found.append(f"{self.m.name}:{getattr(node, 'lineno', 0)}: {text}")
