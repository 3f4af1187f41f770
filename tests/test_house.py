"""House rules that keep the code legible, checked on the tracked sources: module and function
sizes, the rooms' import boundaries (docs/architecture.md), no import cycles, and notebooks that
are exactly what tools/make_notebooks.py writes from notebooks/src/."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from da_lab.checks.manifest import import_source

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _tracked_py() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [ROOT / f for f in out if (ROOT / f).exists()]


def _module_name(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "widgets":
        parts = parts[1:]
    if parts[0] not in ("da_lab", "da_lab_widgets"):
        return None
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.AST, module: str, is_pkg: bool) -> list[str]:
    """Every module an import statement names (module level or inside functions)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = import_source(node, module, is_pkg)
            out.append(mod)
            out += [f"{mod}.{a.name}" for a in node.names]
    return out


def test_modules_and_functions_stay_small():
    too_long = []
    for path in _tracked_py():
        src = path.read_text()
        rel = path.relative_to(ROOT)
        n = len(src.splitlines())
        if n > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {n} lines (max {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.lineno} {node.name}(): {length} lines "
                                    f"(max {MAX_FUNCTION_LINES})")
    assert not too_long, "split these along their concepts:\n" + "\n".join(too_long)


def _graph() -> dict[str, set[str]]:
    mods = {}
    for path in _tracked_py():
        name = _module_name(path)
        if name:
            mods[name] = (path, ast.parse(path.read_text()))
    graph = {}
    for name, (path, tree) in mods.items():
        targets = _imports(tree, name, path.name == "__init__.py")
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def test_rooms_keep_their_boundaries():
    """core imports neither torch nor vLLM; only hook/ and engine/ reach into vLLM internals
    (`from vllm import LLM` is public API); widgets never import vLLM or torch."""
    bad = []
    for path in _tracked_py():
        name = _module_name(path) or str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        for mod in _imports(tree, name, path.name == "__init__.py"):
            top = mod.split(".")[0]
            if name.startswith("da_lab.core") and top in ("torch", "vllm", "transformers"):
                bad.append(f"{name} imports {mod} (core imports neither torch nor vLLM)")
            if name.startswith("da_lab_widgets") and top in ("torch", "vllm"):
                bad.append(f"{name} imports {mod} (a diagram draws; engines live in engine/)")
            internal = mod.startswith("vllm.") and not mod.startswith(
                ("vllm.sampling_params", "vllm.LLM", "vllm.SamplingParams"))
            if internal and not name.startswith(("da_lab.hook", "da_lab.engine")):
                bad.append(f"{name} imports vLLM internals ({mod}); only hook/ and engine/ may")
        # ... nor inside a string run as code (python -c "from vllm.x import ...")
        if not name.startswith(("da_lab.hook", "da_lab.engine")) and "tests" not in path.parts:
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                        re.search(r"\b(from|import) vllm\.", node.value):
                    bad.append(f"{name}:{node.lineno} imports vLLM internals in a string")
    assert not bad, "\n".join(sorted(set(bad)))


def test_no_import_cycles():
    graph = _graph()
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # A package importing its own submodule is how packages re-export: not a cycle.
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_committed_notebooks_equal_the_generator_output():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_notebooks.py"), "--check"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# The rooms, lowest first: a module imports only from its own room or rooms below it
# (docs/architecture.md). The client is the server's other side, so it shares its room. The
# models the lab builds need only the package's assets: they sit just above core, below all that
# runs attention (the engine asks them for a folder; they never start an engine).
ROOM_ORDER = [("da_lab.core", "da_lab.outputs"), ("da_lab.versions",), ("da_lab.models",),
              ("da_lab.trace",),
              ("da_lab.hook",), ("da_lab.engine",),
              ("da_lab.bench", "da_lab.training", "da_lab.checks", "da_lab.lesson",
               "da_lab_widgets"),
              ("da_lab.serve", "da_lab.client"), ("da_lab.cli",),
              # The bench's scripts drive the whole lab as a user does (servers, the CLI, a
              # browser), so they sit above everything; `da-lab bench` itself is tooling.
              ("da_lab.bench.browser", "da_lab.bench.models", "da_lab.bench.reliability",
               "da_lab.bench.timing")]
# What the code that drives an engine may import of the hook: its front door and the small
# shared parts; the request book, the step, the metadata edit and the runners are the hook's
# own.
HOOK_DOORS = ("da_lab.hook", "da_lab.hook.session", "da_lab.hook.driver",
              "da_lab.hook.errors", "da_lab.hook.counters")


def _room(mod: str) -> int | None:
    if mod == "da_lab" or mod.startswith("da_lab.__"):
        return 0
    # The longest prefix names the room (da_lab.bench.timing is not da_lab.bench's room).
    best = None
    for rank, prefixes in enumerate(ROOM_ORDER):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (rank, len(p))
    return None if best is None else best[0]


def test_imports_run_down_the_room_order():
    graph, bad = _graph(), []
    for mod, targets in graph.items():
        here = _room(mod)
        for t in targets:
            there = _room(t)
            if here is not None and there is not None and there > here:
                bad.append(f"{mod} imports {t} (up the room order: "
                           f"{ROOM_ORDER[here][0]} < {ROOM_ORDER[there][0]})")
            if mod.startswith("da_lab.serve") and t.startswith(("da_lab.training",
                                                               "da_lab.bench")):
                bad.append(f"{mod} imports {t} (a server needs no training or bench code)")
    assert not bad, "\n".join(sorted(bad))


def test_only_the_hook_reaches_into_the_hook():
    """Outside hook/ the hook is its front door (hook/session.py) and the parts named in
    HOOK_DOORS; the tests may look inside."""
    graph, bad = _graph(), []
    for mod, targets in graph.items():
        if mod.startswith("da_lab.hook"):
            continue
        for t in targets:
            if t.startswith("da_lab.hook") and t not in HOOK_DOORS:
                bad.append(f"{mod} imports {t}; use da_lab.hook.session")
    assert not bad, "\n".join(sorted(bad))


def test_every_test_module_is_in_one_tier():
    """`make test-fast` and the tier markers (tests/conftest.py) see every module: a new test
    file must say which tier it is in."""
    import importlib.util

    # By its path: notebooks/ has a conftest.py too, and the two share the module name.
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    tiers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiers)
    TIERS = tiers.TIERS

    listed = [m for mods in TIERS.values() for m in mods]
    assert len(listed) == len(set(listed)), "a module is in two tiers"
    files = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    assert files - set(listed) == set(), "not in a tier (tests/conftest.py TIERS)"
    assert set(listed) - files == set(), "listed but no such file"


# Names the glossary (docs/architecture.md) retired, each with the name that replaced it. The
# results under bench/results/ are records of their day and keep the words they had.
RETIRED = {
    r"staging rows?": "staged row",
    r"host rows?": "staged row",
    r"device rows?": "committed row",
    r"full rows?": "committed row (or staged row, for what a record keeps)",
    r"persistent block table": "block table",
    r"compacted": "kernel row / attention seq_len",
    r"builder rows?": "kernel row",
    r"kernel's row": "kernel row",
    r"kernel_seq_len": "attn_seq_len",
    r"built_row →|row the attention builder got": "kernel row",
    r"\brids?\b": "da_id (the caller's) or req_id (vLLM's)",
    r"sink \+ scaffold|scaffold \+ sink": "scaffold head",
    r"\bHookStep\b|\bStepContext\b": "Step (hook/step.py: one hook step, decision to record)",
}
GLOSSARY_SCOPE = ("README.md", "docs/", "da_lab/", "widgets/", "notebooks/src/", "bench/", "tools/",
                  "tests/")


def test_retired_names_stay_retired():
    out = subprocess.run(["git", "ls-files", *GLOSSARY_SCOPE], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    skip = ("bench/results/", "da_lab/versions/manifests/")
    files = [f for f in out if not f.startswith(skip) and f != "tests/test_house.py"
             and f.endswith((".py", ".md", ".js", ".css"))]
    assert len(files) > 100, files
    found = []
    for f in files:
        text = (ROOT / f).read_text(errors="replace")
        for pat, use in RETIRED.items():
            for m in re.finditer(pat, text, flags=re.IGNORECASE):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{f}:{line}: {m.group(0)!r} -> {use}")
    assert not found, "retired names (docs/architecture.md's glossary):\n" + "\n".join(found)
