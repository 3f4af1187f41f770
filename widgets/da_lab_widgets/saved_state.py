"""A saved lesson reopens with its players or with a placeholder, never "model not found".

JupyterLab (with "save widget state", which `make lab` turns on) writes into a notebook the
state of the widget models its page holds *with a live kernel* only. After a kernel restart the
players drawn from the saved state have none, so the next save (or autosave) writes no state
for them, while the outputs still name their models: the next reload shows JupyterLab's
"Error displaying widget: model not found" where each player was (issue 56).

`make lab`'s server runs `pre_save` before every save (tools/lab_files.py sets it as the
contents manager's pre_save_hook). For each widget output whose model the new state lacks, it
keeps that model's state from the file being replaced (with every model it refers to); where
the old file has none either, it drops the output's widget view, so the page shows the output's
HTML instead (the player's: "run this cell to start it again", player.py's PLACEHOLDER).
Outputs of a live kernel are never touched: their models are in the new state.
"""

from __future__ import annotations

import json
from pathlib import Path

VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"
REF = "IPY_MODEL_"
GONE = ('<div style="color:#555;font-size:13px">(a widget was here: run this cell again to '
        "show it; the kernel that drew it is gone)</div>")


def _state(nb: dict) -> dict | None:
    """The notebook's saved widget models, {model id: state}; None where it saves none."""
    got = ((nb.get("metadata") or {}).get("widgets") or {}).get(STATE)
    return got.get("state") if isinstance(got, dict) and isinstance(got.get("state"), dict) \
        else None


def _refs(value) -> set[str]:
    """The model ids a model's state refers to ("IPY_MODEL_<id>", nested anywhere)."""
    if isinstance(value, str):
        return {value[len(REF):]} if value.startswith(REF) else set()
    if isinstance(value, dict):
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def _views(nb: dict):
    """Every output's data dict that shows a widget, with its model id."""
    for cell in nb.get("cells") or []:
        for out in cell.get("outputs") or []:
            data = out.get("data") if isinstance(out, dict) else None
            view = data.get(VIEW) if isinstance(data, dict) else None
            if isinstance(view, dict) and view.get("model_id"):
                yield data, view["model_id"]


def keep_saved_widgets(new: dict, old: dict | None) -> dict:
    """Bring `new` (the notebook about to be written) the saved state of every widget its
    outputs show that `old` (the file it replaces) had and `new` lacks; drop the widget view of
    outputs whose model neither has. Returns {"kept": n models, "dropped": n outputs}."""
    state = _state(new)
    if state is None:       # this JupyterLab saves no widget state: nothing to keep or judge
        return {"kept": 0, "dropped": 0}
    before = _state(old or {}) or {}
    kept = 0
    todo = [mid for _, mid in _views(new) if mid not in state]
    while todo:
        mid = todo.pop()
        if mid in state or mid not in before:
            continue
        state[mid] = before[mid]
        kept += 1
        todo.extend(_refs(before[mid].get("state")) - set(state))
    dropped = 0
    for data, mid in list(_views(new)):
        if mid not in state:
            del data[VIEW]
            data.setdefault("text/html", GONE)
            dropped += 1
    return {"kept": kept, "dropped": dropped}


def pre_save(model: dict, path: str, contents_manager, **_kwargs) -> None:
    """jupyter_server's pre_save_hook: a notebook about to be saved keeps its players' state."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    old = None
    try:
        os_path = Path(contents_manager._get_os_path(path))
        if os_path.is_file():
            old = json.loads(os_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, AttributeError):
        old = None      # no readable file to keep from: outputs without state are dropped
    done = keep_saved_widgets(model["content"], old)
    if any(done.values()):
        contents_manager.log.info("%s: kept the saved state of %d widget model(s); %d widget "
                                  "output(s) with none left as placeholders", path,
                                  done["kept"], done["dropped"])
