"""The lab's local model cache: where locally built models live and how a build is checked.

Shared by the embedded tiny models (`models`) and SmolLM2 (`smollm2`), so that neither has to
import the other."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def lab_home() -> Path:
    return Path(os.environ.get("DA_LAB_HOME", Path.home() / ".cache" / "da_lab"))


def fingerprint(folder: Path) -> str:
    """sha256 over the checkpoint's files: equal fingerprints mean byte-identical builds."""
    h = hashlib.sha256()
    for name in sorted(p.name for p in folder.iterdir() if p.name != "FINGERPRINT"):
        h.update(name.encode())
        h.update((folder / name).read_bytes())
    return h.hexdigest()


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
