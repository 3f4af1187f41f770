"""The vLLM read scan: every place the package touches vLLM, read with `ast` (never imported)
and held against what versions/ declares. Run by tests/test_vllm_reads.py over da_lab/ and
da_lab_widgets/; every need it relies on is checked against every release's manifest by
tests/test_vllm_manifests.py, so a read vLLM drops fails a test instead of turning DA off.

versions/reads.py says where vLLM's objects are held (READS: per module, the local names or
expressions and the class each holds) and what their attributes hold (HOLDS), so that a chain
`llm.llm_engine.vllm_config.model_config.dtype` is read link by link. The rules, each broken
one a finding (module:line: what, and where to declare it):

  import    every import of vLLM, a module or a name from one (in functions too, in strings
            run as code, `find_spec("vllm.x")`, `-m vllm.x`), names a declared need (a class:
            any need on it; a module: any need inside it);
  read      every attribute read or write, constant getattr/hasattr/setattr and method on a
            value of a declared class is a declared need "Class.attr" (or a field its
            "fields" need covers, or Python's own: INHERITED); an optional read (getattr with
            a default, hasattr) needs it on one of the classes named, any other on each;
  keyword   a method's keywords are in its need's first/accepts; a class's are its fields or
            its __init__'s; what a callable passes on (KEYWORDS_TO: LLM -> EngineArgs, Lab ->
            LLM) is the target's; a **splat's keys are read from dict(...), {...}, x["k"] =,
            x.update(...), x.setdefault("k", ...), module constants, KEYWORD_SOURCES, or
            declared in READS as "**name";
  unplaced  an attribute read on a vLLM value whose class is not declared (a HOLDS link
            missing, or a local bound from such a value) names the expression to declare;
  handle    a name the package gives vLLM objects (HANDLES: llm, engine, runner, cm, ...) is
            declared wherever it is not read off a declared value;
  receives  an object of a declared class passed to a function of the package (imported, a
            module's, a module-level instance's such as SESSION's, the module's own, a
            method of self) lands in a parameter its module declares;
  module    a module that imports vLLM, calls an accessor of engine/access.py (RETURNS) or
            breaks any rule above without an entry in READS is named; no entry names a module
            that is gone or a key its module never looks up, and no HOLDS key goes unused.

What it can't see (so keep vLLM objects in declared names): values that travel in containers,
*args, callbacks or attributes of objects it does not type, and ids read off vLLM values and
passed on (only objects of a declared class are followed into other functions).
"""

from __future__ import annotations

import ast

from da_lab.checks.vllm_source import (
    ANY,
    CONTAINER_METHODS,
    DERIVED,
    MISSING,
    OURS,
    Module,
    Rules,
    bindings,
    is_vllm,
    load,
    norm,
    param_names,
    short,
    targets,
    vllm_imports,
)
from da_lab.checks.vllm_types import Typing

__all__ = ["Rules", "load", "rules", "scan"]


class Scan(Typing):
    """One module's findings (`run`)."""

    def run(self) -> list[str]:
        for line, sym, kind in vllm_imports(self.m):
            # a class is declared by any need on it (its members' needs fail where it is gone)
            ok = sym in self.rules.declared or any(s.startswith(sym + ".") for s in
                                                   self.rules.declared)
            if kind != "name" and not ok:        # a module: any need inside it
                ok = any(s.startswith((sym + ".", sym + ":")) for s in self.rules.declared)
            if kind == "name" and not ok:
                ok = sym.replace(":", ".") in self.rules.declared      # a submodule
            if not ok:
                self.found.append(f"{self.m.name}:{line}: imports {sym}: not a declared need "
                                  "(versions/needs_engine.py)")
        if self.entry is None:
            self.entry, before = {}, len(self.found)
            self.check()
            why = self.signal() or (self.found[before].split(": ", 1)[1]
                                    if len(self.found) > before else "")
            del self.found[before:]
            if why:
                self.note(self.m.tree, f"holds vLLM objects ({why}) but versions/reads.py has "
                                       "no entry for it")
            return self.found
        self.check()
        return self.found

    def check(self) -> None:
        self.bind()
        for node in ast.walk(self.m.tree):
            if isinstance(node, ast.Attribute):
                self.attribute(node)
            elif isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.Name):
                self.name(node, node.id)
            elif isinstance(node, ast.arg):
                self.name(node, node.arg)

    def signal(self) -> str:
        """Why this module holds vLLM objects besides what its reads show, or ""."""
        if any(k in ("module", "name") for _, _, k in vllm_imports(self.m)):
            return "imports vLLM"
        for node in ast.walk(self.m.tree):
            if isinstance(node, ast.Call) and self.resolve(node.func) in self.rules.returns:
                return f"calls {self.resolve(node.func)}"
        return ""

    def member(self, classes, attr: str, node, optional: bool = False) -> None:
        ok = [f"{c}.{attr}" in self.rules.declared or attr in self.rules.fields.get(c, ())
              or attr in self.rules.inherited.get(c, ()) for c in classes]
        if (any(ok) if optional else all(ok)):
            return
        missing = [f"{c}.{attr}" for c, good in zip(classes, ok, strict=True) if not good]
        self.note(node, f"{short(node)} reads {', '.join(missing)}: not a declared need "
                        "(versions/needs_engine.py)")

    def attribute(self, e: ast.Attribute) -> None:
        if e.attr.startswith("__") or OURS.match(e.attr):
            return
        t = self.type_of(e.value)
        if isinstance(t, tuple):
            self.member(t, e.attr, e)
        elif t == DERIVED and e.attr not in CONTAINER_METHODS:
            self.note(e, f"{short(e)} reads a vLLM value of undeclared class: declare "
                         f"{norm(e.value) or short(e.value)} in versions/reads.py")
        elif e.attr in self.rules.handles and t is None and not self.resolve(e) and \
                self.lookup(norm(e) or "", e) is MISSING:
            self.note(e, f"{short(e)} holds a vLLM object (a handle): declare "
                         f"{norm(e) or short(e)} in versions/reads.py")

    def name(self, node, name: str) -> None:
        if name not in self.rules.handles or self.lookup(name, node) is not MISSING or \
                name in self.m.vllm_names or self.plain(node, name) or \
                (isinstance(node, ast.Name) and self.resolve(node)):     # a function's name
            return
        derived = any(name in self.derived.get(fn, ()) for fn in [*self.scopes(node), None])
        what = "is read off a vLLM value" if derived else "holds a vLLM object (a handle)"
        self.note(node, f"{name} {what}: declare it in versions/reads.py")

    def call(self, c: ast.Call) -> None:
        f = c.func
        if isinstance(f, ast.Name) and f.id in ("getattr", "hasattr", "setattr") and \
                len(c.args) >= 2:
            t = self.type_of(c.args[0])
            const = isinstance(c.args[1], ast.Constant) and isinstance(c.args[1].value, str)
            if const and (OURS.match(c.args[1].value) or c.args[1].value.startswith("__")):
                pass
            elif isinstance(t, tuple) and const:
                self.member(t, c.args[1].value, c, optional=f.id == "hasattr" or
                            (f.id == "getattr" and len(c.args) > 2))
            elif isinstance(t, tuple) and all(k in self.rules.fields or k == ANY for k in t):
                pass              # a class whose every field is classified, or a bare object
            elif isinstance(t, tuple) and self.constants(c.args[1]):
                for name in self.constants(c.args[1]):
                    self.member(t, name, c, optional=f.id == "hasattr" or
                                (f.id == "getattr" and len(c.args) > 2))
            elif is_vllm(t) and not const:
                self.note(c, f"{short(c)}: a computed attribute of a vLLM value can't be "
                             "checked; read a declared one")
            elif t == DERIVED:
                self.note(c, f"{short(c)} reads a vLLM value of undeclared class: declare "
                             f"{norm(c.args[0]) or short(c.args[0])} in versions/reads.py")
        self.keywords(c)
        self.receives(c)

    def keywords(self, c: ast.Call) -> None:
        f, kws = c.func, self.call_keywords(c)
        if not kws:
            return
        if isinstance(f, ast.Attribute) and isinstance(self.type_of(f.value), tuple):
            for cls in self.type_of(f.value):
                needs = self.rules.declared.get(f"{cls}.{f.attr}", [])
                allowed = {a for n in needs for a in (*n.first, *n.accepts)}
                for k, node in kws:
                    if needs and k not in allowed:
                        self.note(node, f"{cls}.{f.attr} is called with {k}=: not in its "
                                        "need's first/accepts (versions/needs_engine.py)")
            return
        t = self.type_of(f) if isinstance(f, ast.Name) else None
        if isinstance(t, tuple):
            for cls in t:
                for k, node in kws:
                    if not self.accepts(cls, k):
                        dest = self.rules.keywords_to.get(cls, cls)
                        self.note(node, f"{cls}({k}=...): neither {cls}.__init__ nor {dest}.{k} "
                                        "is a declared need")
            return
        target = self.resolve(f)
        if target in self.rules.keywords_to:
            own = set(param_names(self.definition(target)))
            dest = self.rules.keywords_to[target]
            for k, node in kws:
                if k not in own and not self.accepts(dest, k):
                    self.note(node, f"{target}({k}=...) goes on to vLLM: {dest}.{k} is not a "
                                    "declared need")

    def accepts(self, cls: str, k: str) -> bool:
        init = self.rules.declared.get(f"{cls}.__init__", [])
        if any(k in (*n.first, *n.accepts) for n in init):
            return True
        if f"{cls}.{k}" in self.rules.declared or k in self.rules.fields.get(cls, ()):
            return True
        dest = self.rules.keywords_to.get(cls)
        return dest is not None and self.accepts(dest, k)

    def call_keywords(self, c: ast.Call) -> list[tuple[str, ast.AST]]:
        """(keyword, node) of a call, `**splat`s read where they can be; an unreadable splat
        into a vLLM callable is a finding."""
        out = [(k.arg, k) for k in c.keywords if k.arg]
        vllm_call = is_vllm(self.type_of(c.func)) or \
            self.resolve(c.func) in self.rules.keywords_to
        for k in c.keywords:
            if k.arg is None and vllm_call:
                keys, opaque = self.splat(k.value)
                out += [(key, k) for key in keys]
                if opaque:
                    self.note(k, f"the keywords of **{short(k.value)} can't be read ({opaque})")
        return out

    def splat(self, v: ast.AST) -> tuple[list[str], str]:
        """(the keys `**v` carries, why some can't be read or "")."""
        if isinstance(v, ast.Dict):
            return self.dict_keys(v)
        if isinstance(v, ast.Call):
            src = self.rules.keyword_sources.get(self.resolve(v.func))
            return (list(src), "") if src is not None else ([], f"{short(v)} makes them")
        if isinstance(v, ast.IfExp):
            (a, why_a), (b, why_b) = self.splat(v.body), self.splat(v.orelse)
            return a + b, why_a or why_b
        if not isinstance(v, ast.Name):
            return [], "an expression"
        declared = self.lookup(f"**{v.id}", v)
        if declared is not MISSING:
            return list(declared), ""
        scope = next(iter(self.scopes(v)), None)
        const = next((n.value for n in self.m.tree.body if isinstance(n, ast.Assign) and
                      isinstance(n.value, ast.Dict) and
                      any(isinstance(t, ast.Name) and t.id == v.id for t in n.targets)), None)
        if const is not None and scope is not None and v.id not in param_names(scope) and \
                not any(v.id in targets(t) for n in ast.walk(scope)
                        for t, _ in bindings(n)):
            return self.dict_keys(const)
        keys, opaque = [], ""
        if scope is not None and v.id in param_names(scope, drop_self=False):
            opaque = "a parameter"
        for node in ast.walk(scope or self.m.tree):
            got, why = self._splat_op(node, v.id)
            keys += got
            opaque = opaque or why
        forwarded = v.id in self.forwarded()
        return keys, "" if forwarded else opaque

    def _splat_op(self, node: ast.AST, name: str) -> tuple[list[str], str]:
        for target, value in bindings(node):
            if isinstance(target, ast.Name) and target.id == name:
                if isinstance(value, ast.Dict):
                    return self.dict_keys(value)
                if isinstance(value, ast.Call) and norm(value.func) == "dict":
                    return [k.arg for k in value.keywords if k.arg], \
                        "" if all(k.arg for k in value.keywords) and not value.args else "dict(...)"
                return self.splat(value) if isinstance(value, ast.Call) else ([], "bound")
            if isinstance(target, ast.Subscript) and norm(target.value) == name:
                s = target.slice
                return ([s.value], "") if isinstance(s, ast.Constant) else ([], "x[key] =")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                norm(node.func.value) == name and node.func.attr in ("update", "setdefault"):
            keys = [k.arg for k in node.keywords if k.arg]
            for a in node.args[:1]:
                if node.func.attr == "setdefault":
                    ok = isinstance(a, ast.Constant)
                    return (keys + [a.value], "") if ok else (keys, "setdefault(key)")
                got, why = self.splat(a)
                return keys + got, why
            return keys, ""
        return [], ""

    def dict_keys(self, d: ast.Dict) -> tuple[list[str], str]:
        keys, opaque = [], ""
        for k, v in zip(d.keys, d.values, strict=True):
            got, why = ([k.value], "") if isinstance(k, ast.Constant) else \
                self.splat(v) if k is None else ([], "a computed key")
            keys, opaque = keys + got, opaque or why
        return keys, opaque

    def forwarded(self) -> set[str]:
        """The `**kwargs` names of this module's callables whose keywords go on to vLLM."""
        out = set()
        for target in self.rules.keywords_to:
            fn = self.definition(target) if target.startswith(self.m.name + ":") else None
            if fn is not None and fn.args.kwarg is not None:
                out.add(fn.args.kwarg.arg)
        return out

    def receives(self, c: ast.Call) -> None:
        target = self.resolve(c.func)
        fn = self.definition(target)
        if fn is None:
            return
        mod = target.split(":")[0]
        method = "." in target.split(":")[1] or fn.name == "__init__"
        params = param_names(fn, drop_self=method)
        positional = param_names(fn, drop_self=method, kwonly=False)
        pairs = [(p, a) for p, a in zip(positional, c.args, strict=False)
                 if not isinstance(a, ast.Starred)]
        pairs += [(k.arg, k.value) for k in c.keywords if k.arg in params]
        entry = self.rules.reads.get(mod) or {}
        for p, a in pairs:
            t = self.type_of(a)
            if not isinstance(t, tuple):       # of a declared class: a vLLM object, not an id
                continue
            key = f"{fn.name}:{p}" if f"{fn.name}:{p}" in entry else p
            if key not in entry:
                self.note(a, f"passes a vLLM value ({short(a)}) to {target}, whose parameter "
                             f"{p} is not declared in versions/reads.py[{mod!r}]")
                continue
            self.used.add((mod, key))
            if entry[key] is None:
                self.note(a, f"passes a {t[0]} to {target}, which declares {p} PLAIN")


def scan(modules: dict[str, Module], rules: Rules) -> list[str]:
    """Every finding over `modules`, and the declarations nothing uses."""
    used: set = set()
    found = [f for m in modules.values() for f in Scan(m, rules, modules, used).run()]
    for mod, entry in rules.reads.items():
        if mod not in modules:
            found.append(f"versions/reads.py names {mod}, which is not a module")
            continue
        found += [f"versions/reads.py[{mod!r}] declares {k!r}, which the module never uses"
                  for k in entry if (mod, k) not in used]
    found += [f"versions/reads.py HOLDS {k!r}, which no read reaches" for k in rules.holds
              if ("HOLDS", k) not in used]
    return list(dict.fromkeys(found))


def rules() -> Rules:
    """The rules of this package: versions/ (needs, reads) and the committed manifests."""
    import json

    from da_lab.checks.manifest import MANIFESTS
    from da_lab.versions import reads
    from da_lab.versions.needs import NEEDS, RELEASES, in_range

    declared: dict[str, list] = {}
    for n in NEEDS:
        if n.kind != "call":
            declared.setdefault(n.symbol, []).append(n)
    fields = {}
    docs = {v: json.loads(p.read_text()) for v in RELEASES
            if (p := MANIFESTS / f"vllm-{v}.json").exists()}
    for n in NEEDS:
        if n.kind == "fields":
            sets = [set(d["symbols"].get(f"fields {n.symbol}", {}).get("fields", ()))
                    for v, d in docs.items() if in_range(v, n.versions)]
            fields[n.symbol] = set.intersection(*sets) if sets else set()
    return Rules(declared, fields, reads.READS, reads.RETURNS, reads.HOLDS, reads.KEYWORDS_TO,
                 reads.KEYWORD_SOURCES, reads.HANDLES, reads.INHERITED)
