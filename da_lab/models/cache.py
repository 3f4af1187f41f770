"""The lab's local model cache: where locally built models live and how a build is checked.

Shared by the embedded tiny models (`tiny`) and SmolLM2 (`smollm2`), so that neither has to
import the other."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def lab_home() -> Path:
    return Path(os.environ.get("DA_LAB_HOME", Path.home() / ".cache" / "da_lab"))


def fingerprint(folder: Path) -> str:
    """sha256 over the checkpoint's files: equal fingerprints mean byte-identical builds."""
    h = hashlib.sha256()
    # Regular files only: reading a FIFO or a device someone left in the folder would block.
    for name in sorted(p.name for p in folder.iterdir() if p.name != "FINGERPRINT"
                       and p.is_file()):
        h.update(name.encode())
        h.update((folder / name).read_bytes())
    return h.hexdigest()


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def build_atomically(folder: Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` fills a temporary sibling of `folder`, which then gets its FINGERPRINT and
    is renamed into place: a crash halfway never leaves a folder that looks complete."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        write(tmp)
        (tmp / "FINGERPRINT").write_text(fingerprint(tmp) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder
