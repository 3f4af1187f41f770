"""Every read of vLLM anywhere in the package is declared: the scan (checks/vllm_reads.py) over
every module of da_lab/ and da_lab_widgets/ finds no import, attribute read, keyword or
module holding vLLM objects that versions/ does not declare; and every need it relies on is
checked against every release's manifest (tests/test_vllm_manifests.py). The scan itself is
tested on small sources: each rule catches what it is for."""

from pathlib import Path

import pytest

from da_lab.checks import vllm_reads
from da_lab.checks.vllm_source import modules_of
from da_lab.engine import kvmap
from da_lab.versions import reads
from da_lab.versions.needs import NEEDS, Need

ROOT = Path(__file__).resolve().parents[1]
LLM, ARGS = "vllm.entrypoints.llm:LLM", "vllm.engine.arg_utils:EngineArgs"
ENGINE, CFG = "vllm.v1.engine.llm_engine:LLMEngine", "vllm.config.vllm:VllmConfig"


@pytest.fixture(scope="module")
def package():
    return vllm_reads.load({"da_lab": ROOT / "da_lab",
                            "da_lab_widgets": ROOT / "widgets" / "da_lab_widgets"})


def test_every_vllm_read_in_the_package_is_declared(package):
    found = vllm_reads.scan(package, vllm_reads.rules())
    assert not found, "undeclared vLLM reads (declare them: versions/reads.py, " \
        "needs_engine.py):\n" + "\n".join(found)


def test_the_scan_covers_every_module_that_reads_vllm(package):
    """The modules named in issue 54's review are scanned, and hold declared names."""
    for mod in ("da_lab.training.eval.eval_engine", "da_lab.bench.worker",
                "da_lab.bench.measure", "da_lab.checks.tp_check", "da_lab.serve.endpoint",
                "da_lab.serve.gate", "da_lab.hook.driver", "da_lab.engine.kvmap",
                "da_lab.checks.selfcheck.STOCK"):
        assert mod in package and reads.READS.get(mod), mod
    # engine/kvmap.py's own map (tests/test_vllm_manifests.py) says the same as reads.py
    assert kvmap.VLLM_NAMES.items() <= reads.READS["da_lab.engine.kvmap"].items()


def test_every_need_the_scan_accepts_is_checked_against_the_manifests():
    """What the scan accepts is a Need (so test_vllm_manifests checks it in every release
    it applies to), a field of a "fields" need, or Python's own attribute of a declared
    class (INHERITED)."""
    symbols = {n.symbol for n in NEEDS}
    held = {c for v in reads.HOLDS.values() if v for c in ((v,) if isinstance(v, str) else v)}
    for cls in {*reads.INHERITED, *held}:      # a class: itself or a member is a need
        assert cls in symbols or any(s.startswith(cls + ".") for s in symbols), cls


# ---- the scan on small sources ---------------------------------------------------------------
def _rules(needs=(), reads_=None, holds=None, **kw) -> vllm_reads.Rules:
    declared = {}
    for n in needs:
        declared.setdefault(n.symbol, []).append(n)
    return vllm_reads.Rules(declared, kw.get("fields", {}), reads_ or {}, kw.get("returns", {}),
                            holds or {}, kw.get("keywords_to", {}), {},
                            frozenset(kw.get("handles", ("llm", "engine"))))


def _scan(sources: dict[str, str], rules) -> list[str]:
    """The findings, sorted, without "module:line: " (and without HOLDS links no snippet
    reads: the sources here are small)."""
    mods = {k: v for name, src in sources.items() for k, v in modules_of(name, src).items()}
    return sorted(f.split(": ", 1)[1] if f.startswith(tuple(mods)) else f
                  for f in vllm_reads.scan(mods, rules) if "which no read reaches" not in f)


NEEDS_ = (Need(LLM, "class"), Need(f"{LLM}.llm_engine", "attribute"),
          Need(f"{ENGINE}.vllm_config", "attribute"), Need(f"{ENGINE}.step"),
          Need(f"{LLM}.generate", first=("prompts",), accepts=("use_tqdm",)),
          Need(f"{ARGS}.seed", "attribute"), Need(f"{CFG}.model_config", "attribute"),
          Need(f"{CFG}.speculative_config", "attribute"))
HOLDS_ = {f"{LLM}.llm_engine": ENGINE}


def test_an_undeclared_import_is_found_in_code_and_in_code_strings():
    src = ("import vllm.v1.nothing\n"
           "def f():\n    from vllm.entrypoints.llm import LLM, Other\n"
           "S = 'import os\\nfrom vllm.x import y'\n"
           "CMD = ['python', '-m', 'vllm.gone.api_server']\n")
    found = _scan({"m": src}, _rules(NEEDS_, {"m": {}, "m.S": {}}))
    assert found == sorted(f"imports {s}: not a declared need (versions/needs_engine.py)"
                           for s in ("vllm.v1.nothing", "vllm.entrypoints.llm:Other",
                                     "vllm.x:y", "vllm.gone.api_server"))


def test_reads_on_declared_names_and_chains_are_held_against_the_needs():
    src = ("def f(llm):\n"
           "    e = llm.llm_engine\n"          # a HOLDS link: e is an LLMEngine
           "    e.step()\n"
           "    llm.llm_engine.vllm_config.model_config\n"   # no HOLDS for vllm_config
           "    e.abort_all()\n"
           "    getattr(e, 'vllm_config', None)\n"
           "    getattr(e, 'gone', None)\n")
    found = _scan({"m": src}, _rules(NEEDS_, {"m": {"llm": LLM}}, HOLDS_))
    assert found == sorted([
        f"e.abort_all reads {ENGINE}.abort_all: not a declared need (versions/needs_engine.py)",
        f"getattr(e, 'gone', None) reads {ENGINE}.gone: not a declared need "
        "(versions/needs_engine.py)",
        "llm.llm_engine.vllm_config.model_config reads a vLLM value of undeclared class: "
        "declare llm.llm_engine.vllm_config in versions/reads.py"])


def test_keywords_are_held_against_the_needs_and_what_a_call_passes_on():
    src = ("def f(llm, n):\n"
           "    llm.generate(['x'], use_tqdm=False, priority=1)\n"
           "    kw = dict(seed=0)\n"
           "    kw['max_loras'] = n\n"
           "    LLM(model='m', **kw)\n"
           "    LLM(model='m', **n)\n")
    rules = _rules((*NEEDS_, Need(f"{LLM}.__init__", first=("model",))),
                   {"m": {"llm": LLM, "LLM": LLM}}, HOLDS_, keywords_to={LLM: ARGS})
    found = _scan({"m": src}, rules)
    assert found == sorted([
        f"{LLM}.generate is called with priority=: not in its need's first/accepts "
        "(versions/needs_engine.py)",
        f"{LLM}(max_loras=...): neither {LLM}.__init__ nor {ARGS}.max_loras is a declared need",
        "the keywords of **n can't be read (a parameter)"])


def test_a_module_holding_vllm_objects_without_an_entry_is_named():
    """(c): a handle (`llm`), a vLLM import, an accessor's result, or a vLLM object passed
    in from a declared module: each makes the module one that must declare its names."""
    sources = {"a": "def f(llm):\n    return llm.llm_engine\n",
               "b": "from vllm import LLM\n",
               "c": "from da_lab.engine.access import vllm_config\n"
                    "def g(x):\n    return vllm_config(x).model_config\n",
               "d": "from da_lab.helper import use\ndef h(llm):\n    use(llm)\n",
               "da_lab.helper": "def use(obj):\n    return obj.llm_engine\n"}
    rules = _rules(NEEDS_, {"d": {"llm": LLM}}, HOLDS_,
                   returns={"da_lab.engine.access:vllm_config": CFG})
    found = _scan(sources, rules)
    assert [f for f in found if "no entry" in f] == sorted([
        "holds vLLM objects (llm holds a vLLM object (a handle): declare it in "
        "versions/reads.py) but versions/reads.py has no entry for it",
        "holds vLLM objects (imports vLLM) but versions/reads.py has no entry for it",
        "holds vLLM objects (calls da_lab.engine.access:vllm_config) but versions/reads.py "
        "has no entry for it"])
    assert "passes a vLLM value (llm) to da_lab.helper:use, whose parameter obj is not " \
        "declared in versions/reads.py['da_lab.helper']" in found


def test_a_stale_declaration_is_named():
    rules = _rules(NEEDS_, {"m": {"llm": LLM, "runner": LLM}, "gone": {}}, HOLDS_)
    found = _scan({"m": "def f(llm):\n    return llm.llm_engine\n"}, rules)
    assert found == ["versions/reads.py names gone, which is not a module",
                     "versions/reads.py['m'] declares 'runner', which the module never uses"]


def test_scoped_names_and_optional_reads_on_several_classes():
    """`fn:name` holds in `fn` only; an optional read (a getattr with a default) needs one of
    the classes a name may hold, a plain read each of them."""
    a, b = "vllm.x:A", "vllm.x:B"
    needs = (Need(f"{a}.p", "attribute"), Need(f"{b}.q", "attribute"), Need(f"{a}.q", "attribute"))
    src = ("def f(o):\n    return o.p\n"
           "def g(o):\n    return getattr(o, 'p', None), o.q, o.p\n")
    found = _scan({"m": src}, _rules(needs, {"m": {"f:o": a, "g:o": (a, b)}}))
    assert found == [f"o.p reads {b}.p: not a declared need (versions/needs_engine.py)"]
