"""A fine-tuned delta (LoRA factors) and how it is merged into a base model's folder, for every
model the lab builds from a GGUF (`smollm2`, `gemma3`): one format, one merge.

A delta file holds, for each adapted weight W (its state-dict name), `W.lora_A` (r, in) and
`W.lora_B` (out, r), in bf16, and one metadata key, DELTA_META: a JSON object (format, rank,
alpha, targets, the base weights' sha256). One key keeps the file's bytes deterministic
(safetensors writes a metadata map in no fixed order). Merging is W + alpha/r B A in float32;
the merged weights keep the base's dtype.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

DELTA_FILE = "delta.safetensors"
DELTA_FORMAT = "da_lab-lora-1"
DELTA_META = "da_lab_delta"
# What a merged folder copies from its base unchanged.
COPIED = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")


class ModelMissing(FileNotFoundError):
    """What is needed to build a model is not on this machine (said in one line)."""


def delta_file(delta: Path | None, default_dir: Path) -> Path:
    """The delta file meant: a file, a folder holding DELTA_FILE, or the default folder's."""
    delta = Path(delta) if delta else Path(default_dir)
    return delta / DELTA_FILE if delta.is_dir() else delta


def read_delta(path: Path, *, error: type[Exception] = ModelMissing, what: str = "",
               hint: str = "") -> tuple[dict, dict]:
    """(tensors, metadata) of a delta file (or of DELTA_FILE in a folder). A missing file raises
    `error` naming `what` model's delta, with `hint` (how to make one); a file of another format
    a ValueError."""
    from safetensors import safe_open

    path = Path(path)
    if path.is_dir():
        path = path / DELTA_FILE
    if not path.is_file():
        said = f"no {what + ' ' if what else ''}delta at {path}"
        raise error(said + (f" ({hint})" if hint else ""))
    with safe_open(str(path), framework="pt") as f:
        raw = (f.metadata() or {}).get(DELTA_META, "{}")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = {}
    if not isinstance(meta, dict) or meta.get("format") != DELTA_FORMAT:
        raise ValueError(f"{path}: not a {DELTA_FORMAT} delta (format={meta.get('format')!r})")
    return tensors, meta


def merge_delta(state: dict, tensors: dict, meta: dict) -> list[str]:
    """W += alpha/r * B @ A for every adapted weight, in float32, in place. Returns the names."""
    scale = float(meta["alpha"]) / int(meta["rank"])
    names = sorted({k.rsplit(".", 1)[0] for k in tensors})
    for name in names:
        if name not in state:
            raise ValueError(f"delta adapts {name!r}, which the base model does not have")
        a, b = tensors[name + ".lora_A"].float(), tensors[name + ".lora_B"].float()
        w = state[name]
        if (b.shape[0], a.shape[1]) != tuple(w.shape):
            raise ValueError(f"delta for {name}: {tuple(b.shape)} x {tuple(a.shape)} does not "
                             f"fit {tuple(w.shape)}")
        state[name] = (w.float() + scale * (b @ a)).to(w.dtype).contiguous()
    return names


def save_weights(state: dict, path: Path) -> None:
    """One metadata key only: two keys would make two builds differ in their header bytes
    (source.json holds provenance)."""
    from safetensors.torch import save_file

    save_file(state, str(path), metadata={"format": "pt"})


def write_merged(folder: Path, base: Path, delta: Path, **read_kw) -> list[str]:
    """`folder` = the base's folder with the delta merged into model.safetensors; returns the
    adapted weights' names."""
    from safetensors.torch import load_file

    tensors, meta = read_delta(delta, **read_kw)
    for f in COPIED:
        shutil.copyfile(Path(base) / f, Path(folder) / f)
    state = load_file(str(Path(base) / "model.safetensors"))
    names = merge_delta(state, tensors, meta)
    save_weights(state, Path(folder) / "model.safetensors")
    return names
