"""The lessons' cells as a reader re-runs them, and two things the lessons lean on, without an
engine: no cell reads a name that two cells bind differently (re-running a cell after Run All
then reads what its own beat made: issue 56, lesson 04's KeyError), a saved notebook keeps its
players' widget state through a kernel restart and a save (make lab's pre-save hook), and the
speed cell's verdict on its own noise."""

from __future__ import annotations

import ast
import builtins
import copy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks" / "src").glob("*.py"))


def code_cells(text: str) -> list[str]:
    """The code cells of a jupytext percent file, in order."""
    cells = []
    for part in text.split("# %%")[1:]:
        head, _, body = part.partition("\n")
        if "[markdown]" not in head:
            cells.append(body)
    return cells


def _bindings(tree: ast.Module) -> dict[str, str]:
    """Names the cell binds at the notebook's top level, each with how: the import it comes
    from (the same import in two cells binds the same object) or "assigned"."""
    out: dict[str, str] = {}

    def visit(node) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            mod = getattr(node, "module", None) or ""
            for a in node.names:
                out[(a.asname or a.name).split(".")[0]] = f"import {mod}:{a.name}"
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = "assigned"
            return      # its body is its own scope
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp
                      | ast.GeneratorExp):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out[node.id] = "assigned"
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in tree.body:
        visit(stmt)
    return out


def _reads(tree: ast.Module) -> set[str]:
    """Names the cell reads that nothing in it binds (anywhere in it: a function's own locals
    count as bound), builtins left out: what it takes from the cells run before it."""
    loads, stores = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else stores).add(node.id)
        elif isinstance(node, ast.arg):
            stores.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            stores.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stores.add(node.name)
    return loads - stores - set(dir(builtins))


def shared_names(text: str) -> list[str]:
    """Every name a cell reads from other cells that two cells bind differently."""
    trees = [ast.parse(c) for c in code_cells(text)]
    binds = [_bindings(t) for t in trees]
    found = []
    for k, tree in enumerate(trees):
        for name in sorted(_reads(tree)):
            hows = {j: b[name] for j, b in enumerate(binds) if name in b}
            same_import = len(set(hows.values())) == 1 and "assigned" not in hows.values()
            if len(hows) > 1 and not same_import:
                found.append(f"code cell {k} reads {name!r}, which code cells "
                             f"{sorted(hows)} bind ({', '.join(sorted(set(hows.values())))})")
    return found


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_no_cell_reads_a_name_that_two_cells_bind(lesson):
    """Re-running any cell after Run All must work: a cell that reads `names` must not find a
    later beat's `names` there (04's readers' guess after its speed cell, issue 56)."""
    assert shared_names(lesson.read_text()) == []


def test_the_rule_sees_04s_old_key_error():
    old = '''# %%
names = ["reader-1"]
# %%
print(names[0])
# %%
names = {"global": "GLOBAL"}
'''
    assert len(shared_names(old)) == 1 and "'names'" in shared_names(old)[0]
    same_import = "# %%\nfrom a import b\n# %%\nfrom a import b\n# %%\nb()\n"
    assert shared_names(same_import) == []


# ---- a saved lesson keeps its players' widget state (make lab's pre-save hook) ---------------

VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"


def _nb(outputs: list[str], state: dict | None) -> dict:
    cells = [{"cell_type": "code", "source": "player.widget", "metadata": {},
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {"text/plain": "PlayerWidget()",
                                    VIEW: {"version_major": 2, "version_minor": 0,
                                           "model_id": m}}}]} for m in outputs]
    meta = {} if state is None else {"widgets": {STATE: {"version_major": 2,
                                                         "version_minor": 0, "state": state}}}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def _model(layout: str | None = None) -> dict:
    st = {"_uid": "x"} | ({"layout": f"IPY_MODEL_{layout}"} if layout else {})
    return {"model_name": "AnyModel", "model_module": "anywidget", "state": st}


def test_a_restart_and_a_save_keep_the_saved_players():
    from da_lab_widgets.saved_state import keep_saved_widgets

    saved = _nb(["p1"], {"p1": _model("l1"), "l1": {"model_name": "LayoutModel", "state": {}}})
    # after a restart the page holds no live model: JupyterLab writes an empty state
    again = _nb(["p1"], {})
    assert keep_saved_widgets(again, saved) == {"kept": 2, "dropped": 0}
    assert _nb(["p1"], None)["metadata"] == {}
    assert set(again["metadata"]["widgets"][STATE]["state"]) == {"p1", "l1"}
    assert VIEW in again["cells"][0]["outputs"][0]["data"]


def test_a_player_with_no_state_left_shows_its_placeholder():
    from da_lab_widgets.player import PLACEHOLDER
    from da_lab_widgets.saved_state import keep_saved_widgets

    # run, restarted before any save: neither file nor page has its state
    new = _nb(["p2"], {})
    new["cells"][0]["outputs"][0]["data"]["text/html"] = PLACEHOLDER
    assert keep_saved_widgets(new, _nb(["p2"], {})) == {"kept": 0, "dropped": 1}
    data = new["cells"][0]["outputs"][0]["data"]
    assert VIEW not in data and data["text/html"] == PLACEHOLDER
    # a live kernel's outputs are untouched, and a JupyterLab that saves no state is left alone
    live = _nb(["p3"], {"p3": _model()})
    before = copy.deepcopy(live)
    assert keep_saved_widgets(live, None) == {"kept": 0, "dropped": 0} and live == before
    off = _nb(["p4"], None)
    assert keep_saved_widgets(off, _nb(["p4"], {"p4": _model()})) == {"kept": 0, "dropped": 0}
    assert VIEW in off["cells"][0]["outputs"][0]["data"]


def test_the_player_widget_carries_its_placeholder():
    from da_lab_widgets import Player, TraceSource
    from da_lab_widgets.player import PLACEHOLDER

    src = TraceSource(ROOT / "traces" / "seed_cpu.jsonl.gz")
    bundle = Player(src, []).widget._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert VIEW in data and data["text/html"] == PLACEHOLDER


# ---- the speed cell says when its numbers are too noisy to read -------------------------------

def _speed(g: list[float], f: list[float]) -> dict:
    return {"modes": {"global": {"step_ms": g}, "focus": {"step_ms": f}}}


def test_the_speed_cell_reads_a_quiet_run_and_warns_on_a_busy_one():
    from da_lab.lesson import speed_lines

    quiet = _speed([10.0 + 0.1 * k for k in range(20)], [6.0 + 0.1 * k for k in range(20)])
    lines = speed_lines(quiet, (1.2, 1.3), 2)
    assert lines[-1].startswith("quiet enough to read") and "median decode step" in lines[0]
    # issue 56: at load 8-11 on 2 CPUs the profile said FOCUS was slower; the cell must say
    busy = speed_lines(quiet, (8.4, 11.0), 2)
    assert busy[-1].startswith("⚠ too noisy to read") and "load average 8.4 → 11.0" in busy[-1]
    overlap = speed_lines(_speed([10.0, 30.0, 12.0, 25.0], [11.0, 28.0, 9.0, 26.0]), (1, 1), 2)
    assert overlap[-1].startswith("⚠ too noisy to read") and "overlap" in overlap[-1]


# ---- words that must agree with what they describe (issue 56, item 6) -------------------------

def test_the_eval_table_names_each_set_whole():
    from da_lab.training.eval.evaluate import table

    r = {"n": 5, "blocks_read_fraction_after_tag": 0.3, **{k: 0.5 for k in (
        "tag_accuracy", "da_answer_accuracy", "all_blocks_answer_accuracy",
        "base_all_blocks_answer_accuracy", "wrong_tag_answer_accuracy",
        "hidden_chunk_answer_accuracy", "local_accuracy", "decoding_attention_cost")}}
    lines = table({**r, "by_kind": {"single": r}, "by_set": {"held-out-domains-fresh": r}})
    assert "held-out-domains-fresh " in lines           # was cut to "held-out-d"
    rows = lines.splitlines()
    assert len({row.index("0.500") for row in rows if "0.500" in row}) == 1    # columns align


def test_eval_help_names_the_prompts_protocol_field():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "da_lab.cli", "eval", "--help"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert '"protocol"' in text and '"paper"' in text and "Magic Chunk" in text, text
