"""Every vLLM release the hook claims, checked offline: the adapters' declared needs
(versions/needs.py) against each release's committed manifest (read from its wheel's
sources by da_lab/checks/manifest.py), every CommonAttentionMetadata field classified, every
difference's evidence holding in exactly the releases it names; the load/warn/refuse decision
as a pure function of version strings; and the checker itself on a small source tree."""

import ast
import json
import logging
import textwrap
from pathlib import Path

import pytest

from da_lab.checks import manifest
from da_lab.engine import kvmap
from da_lab.versions import cm_fields, needs, releases
from da_lab.versions.needs import (
    CM,
    DIFFERENCES,
    NEEDS,
    RELEASES,
    V1,
    in_range,
    need,
    needs_for,
)

ROOT = Path(__file__).resolve().parents[1]


def _manifest(v: str) -> dict:
    return json.loads((manifest.MANIFESTS / f"vllm-{v}.json").read_text())


def test_every_release_has_a_manifest_and_no_other():
    names = sorted(p.name for p in manifest.MANIFESTS.glob("vllm-*.json"))
    assert names == sorted(f"vllm-{v}.json" for v in RELEASES)
    for v in RELEASES:
        m = _manifest(v)
        assert m["vllm"] == v and m["files"] and m["sources"]


@pytest.mark.parametrize("v", RELEASES)
def test_adapters_needs_match_the_release(v):
    assert manifest.problems(_manifest(v), needs_for(v)) == []


@pytest.mark.parametrize("v", RELEASES)
def test_every_common_attention_metadata_field_is_classified(v):
    found = _manifest(v)["symbols"][f"fields {CM}"]["fields"]
    assert sorted(found) == sorted(cm_fields.fields_for(v))


def test_every_manifest_records_every_need_and_evidence():
    """Each manifest was read for every need and every difference's evidence, whatever
    releases they apply to: a release that lacks a difference's evidence lacks it in its
    sources, not because its manifest predates the difference (regenerate them all)."""
    want = {manifest.key(n) for n in manifest.all_needs()}
    for v in RELEASES:
        missing = want - set(_manifest(v)["symbols"])
        assert not missing, (v, sorted(missing))


def test_no_need_of_the_v1_runner_outlives_it():
    """Where a release has no v1 model runner (0.34: V2 only), no need names its modules:
    the adapters' v1 needs and diagram 1's reads of it end with the runner."""
    v1_modules = {"vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu_input_batch",
                  "vllm.v1.worker.block_table", "vllm.v1.worker.cpu_model_runner"}
    assert releases.model_runners("0.33.0") == ("v1", "v2")
    assert releases.model_runners("0.34.0") == releases.model_runners("0.34.0+cu130") == ("v2",)
    assert releases.model_runners("0.35.0") == ()
    for v in RELEASES:
        has_v1 = "v1" in releases.model_runners(v)
        bad = [n.symbol for n in needs_for(v) if n.module in v1_modules or n.who == "v1"]
        assert has_v1 or not bad, (v, bad)
        assert not has_v1 or len(bad) > 20, (v, len(bad))


def test_each_difference_holds_in_exactly_its_releases():
    wrong = []
    for d in DIFFERENCES:
        for v in RELEASES:
            entry = _manifest(v)["symbols"].get(manifest.key(d.evidence))
            holds = manifest.problem(d.evidence, entry) is None
            if holds != in_range(v, d.versions):
                wrong.append(f"{d.name}: {v} {'has' if holds else 'lacks'} it")
    assert not wrong, "\n".join(wrong)


# ---- what the driver side reads of vLLM's scheduler ------------------------------------------
_CONTAINER_METHODS = {m for t in (dict, list, set, tuple, str) for m in dir(t)
                      if not m.startswith("_")}


def vllm_reads(source: str, vllm_names: dict[str, str], own: tuple[str, ...] = ("self",)):
    """(declared, undeclared, unplaced) attribute reads of `source`: a read on a local name of
    `vllm_names` is `Class.attr` of that name's class and must be a declared need; a read on
    `own` names or a container method (get, items, ...) is the module's own; anything else is
    unplaced (a vLLM object reached some other way: bind it to one of the names first)."""
    declared = {n.symbol for n in NEEDS if n.kind in ("attribute", "function")}
    ok, bad, unplaced = set(), set(), set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in vllm_names:
            sym = f"{vllm_names[v.id]}.{node.attr}"
            (ok if sym in declared else bad).add(sym)
        elif not (isinstance(v, ast.Name) and v.id in own) and node.attr not in _CONTAINER_METHODS:
            unplaced.add(f"line {node.lineno}: {ast.unparse(node)}")
    return ok, bad, unplaced


def test_the_kv_map_reads_only_declared_vllm_attributes():
    """engine/kvmap.py (diagram 2's physical KV map) reads vLLM's scheduler only through
    attributes declared in needs.py, which every release's manifest is checked against above:
    a vLLM that drops one fails that test instead of emptying the map."""
    src = (ROOT / "da_lab" / "engine" / "kvmap.py").read_text()
    ok, bad, unplaced = vllm_reads(src, kvmap.VLLM_NAMES, own=("self", "h"))
    assert not bad, f"declare these in versions/needs.py: {sorted(bad)}"
    assert not unplaced, f"reads kvmap.VLLM_NAMES can't place: {sorted(unplaced)}"
    assert len(ok) >= 14 and f"{needs.POOL}.blocks" in ok
    assert "getattr(" not in src, "a vLLM attribute read with a silent default"


def test_the_kv_map_scan_catches_an_undeclared_read():
    names = {"pool": needs.POOL, "b": needs.BLOCK}
    ok, bad, unplaced = vllm_reads("pool.blocks\npool.free_block_queue\nb.ref_cnt\n"
                                   "x = pool.blocks[0].ref_cnt\nd.items()\n", names)
    assert ok == {f"{needs.POOL}.blocks"}
    assert bad == {f"{needs.POOL}.free_block_queue", f"{needs.BLOCK}.ref_cnt"}
    assert unplaced == {"line 4: pool.blocks[0].ref_cnt"}


# ---- the decision at plugin load -------------------------------------------------------------
def test_load_decision_over_version_strings():
    cpu, gpu = releases.CPU, releases.GPU
    assert releases.load_decision("0.32.0", cpu) == ("load", "")
    assert releases.load_decision("0.28.0", cpu)[0] == "load"
    assert releases.load_decision("0.26.0", gpu)[0] == "load"
    assert releases.load_decision("0.32.0+cpu", cpu)[0] == "load"
    for v, dist in (("0.34.0", gpu), ("0.33.0", gpu), ("0.26.0", cpu), ("0.30.0", gpu)):
        action, msg = releases.load_decision(v, dist)
        assert action == "warn" and "da-lab selfcheck" in msg and v in msg and "\n" not in msg
    for v in ("0.35.0", "0.34.1", "0.25.1", "0.31.1", "1.0.0"):
        action, msg = releases.load_decision(v, gpu)
        assert action == "refuse" and "0.26.0 ... 0.34.0" in msg and f"found vllm {v}" in msg


def test_a_statically_checked_release_warns(caplog):
    """One warning line per load decision; hook.register() makes it once per process (it
    returns at once when the session says the hook is installed)."""
    with caplog.at_level(logging.WARNING, logger="da_lab.hook"):
        releases.apply_decision("0.34.0", releases.GPU)
        releases.apply_decision("0.32.0", releases.CPU)         # run-verified: silent
    assert [r.getMessage().count("da-lab selfcheck") for r in caplog.records] == [1]
    with pytest.raises(RuntimeError, match="supports vLLM 0.26.0 ... 0.34.0"):
        releases.apply_decision("0.35.0", releases.GPU)


def test_cascade_attention_settings_follow_the_release():
    assert releases.engine_kwargs("0.26.0") == {"disable_cascade_attn": True}
    assert releases.serve_args("0.31.0") == ("--disable-cascade-attn",)
    assert releases.engine_kwargs("0.32.0") == {} and releases.serve_args("0.33.0") == ()
    assert releases.engine_kwargs(None) == {} and releases.serve_args("0.99.0") == ()


def test_run_verified_releases_passed_the_committed_range_run():
    """A CPU release the plugin loads quietly on ran here: `da-lab selfcheck` (the oracle and
    plain = stock) passed in its venv, or the engine and oracle groups did; no group failed on
    a release it calls verified unless docs/compatibility.md names that failure."""
    runs = sorted((ROOT / "bench" / "results").glob("vllm-versions-*.json"))
    assert runs, "no bench/results/vllm-versions-<date>.json (make test-vllm)"
    doc = json.loads(runs[-1].read_text())
    compat = (ROOT / "docs" / "compatibility.md").read_text()
    for dist, v in releases.RUN_VERIFIED:
        if dist != releases.CPU:
            continue
        entry = doc["versions"][v]
        groups = entry.get("groups", {})
        oracle = entry.get("selfcheck", {}).get("passed") or all(
            groups.get(g, {}).get("result") == "passed" for g in ("engine", "oracle"))
        assert oracle, (v, entry)
        for g, res in groups.items():
            for name in res.get("failures", []) if res["result"] != "passed" else []:
                assert name.split("::")[-1] in compat, (v, g, name)


# ---- the checker itself, on a small source tree ----------------------------------------------
_SRC = {
    "vllm/_version.py": "__version__ = version = '0.32.0'\n",
    "vllm/v1/worker/base.py": """
        class Base:
            def __init__(self):
                self.requests, self.input_batch = {}, None
            def _sample(self, logits): ...
    """,
    "vllm/v1/worker/gpu_model_runner.py": """
        from .base import Base
        class GPUModelRunner(Base):
            device: str = "cpu"
            def _build_attention_metadata(self, num_tokens, num_reqs, *, other=None): ...
            def execute_model(self, scheduler_output):
                self._build_attention_metadata(num_tokens=1, num_reqs=1)
            def _dummy_run(self):
                self._build_attention_metadata(num_tokens=1)
    """,
    "vllm/v1/attention/__init__.py": "from .backend import CommonAttentionMetadata\n",
    "vllm/v1/attention/backend.py": """
        from dataclasses import dataclass
        from typing import ClassVar
        @dataclass
        class CommonAttentionMetadata:
            seq_lens: object
            kind: ClassVar[str] = "x"
            block_table_tensor: object = None
    """,
}


def _tree(tmp_path: Path) -> Path:
    for rel, text in _SRC.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return tmp_path


def test_checker_reads_signatures_inherited_attributes_calls_and_fields(tmp_path):
    src = manifest.Sources(_tree(tmp_path))
    assert src.version() == "0.32.0"
    bam = manifest.find(src, need(V1 + "._build_attention_metadata"))
    assert bam["params"] == ["self", "num_tokens", "num_reqs"] and bam["kwonly"] == ["other"]
    assert manifest.find(src, need(V1 + ".requests"))["defined_in"] == \
        "vllm.v1.worker.base:Base"                     # assigned in a base class, tuple target
    assert manifest.find(src, need(V1 + ".device"))["how"] == "field"
    assert not manifest.find(src, need(V1 + ".attn_groups"))["found"]
    fields = manifest.find(src, manifest.Need("vllm.v1.attention:CommonAttentionMetadata",
                                              "fields"))
    assert fields["fields"] == ["seq_lens", "block_table_tensor"]    # ClassVar left out


def test_checker_follows_vllm_lazy_exports(tmp_path):
    """`from vllm import LLM` resolves through vllm/__init__.py's MODULE_ATTRS map."""
    root = _tree(tmp_path)
    (root / "vllm" / "__init__.py").write_text(
        'MODULE_ATTRS = {"Runner": ".v1.worker.gpu_model_runner:GPUModelRunner"}\n')
    src = manifest.Sources(root)
    assert manifest.find(src, manifest.Need("vllm:Runner", "class")) == \
        {"found": True, "defined_in": V1}
    assert not manifest.find(src, manifest.Need("vllm:Other", "class"))["found"]


def test_a_drift_is_a_named_problem(tmp_path):
    """The runner here lacks num_scheduled_tokens and calls the build without it: both are
    problems, and a dummy run's call is exempt."""
    src = manifest.Sources(_tree(tmp_path))
    needs = [n for n in needs_for("0.32.0", ("v1",)) if "_build_attention_metadata" in
             (n.symbol + n.callee)]
    m = {"symbols": {manifest.key(n): manifest.find(src, n) for n in needs}}
    got = manifest.problems(m, needs)
    assert len(got) == 2 and "takes no num_scheduled_tokens" in got[0]
    assert "called in execute_model without num_reqs, num_scheduled_tokens" in got[1]
    assert manifest.problem(needs[0], None).endswith("not in the manifest (regenerate it)")


def test_docs_table_names_every_difference_with_its_releases():
    doc = (ROOT / "docs" / "vllm-internals.md").read_text()
    for d in DIFFERENCES:
        releases_ = d.versions.replace("..", " … ").strip() if d.versions else "all"
        assert f"| {d.name} | {releases_} |" in doc, d.name
