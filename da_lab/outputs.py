"""Where a command writes, checked before the work starts: a 48-second engine start must not
end in a traceback because `--out` names /proc or a file where a folder should be."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def file_problem(path: str | os.PathLike, *, make_parent: bool = False) -> str | None:
    """Why a file can't be written at `path` (None: it can). Nothing is left behind but, with
    `make_parent`, the folders leading to it."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a folder; give a file name"
    if p.exists() and not p.is_file():
        return f"{p} exists and is not a regular file"
    if make_parent:
        return folder_problem(p.parent)
    if not p.parent.is_dir():
        return f"folder {p.parent.resolve()} does not exist"
    return _probe(p.parent)


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why `path` can't be (made into) a folder to write in (None: it can; it is created)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        return f"{p} exists and is not a folder"
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"can't create folder {p}: {e.strerror or e}"
    return _probe(p)


def _probe(folder: Path) -> str | None:
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".da_lab-probe-"):
            pass
    except OSError as e:
        return f"can't write in {folder}: {e.strerror or e}"
    return None
