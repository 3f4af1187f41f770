"""Write the lab's notebooks (without outputs) from the lessons' sources in notebooks/src/.

    .venv/bin/python tools/make_notebooks.py            # (re)write notebooks/
    .venv/bin/python tools/make_notebooks.py --check    # exit 1 if notebooks/ differs from src/
    .venv/bin/python tools/make_notebooks.py 05         # only the notebooks named 05*

notebooks/src/NN_name.py is a jupytext percent file (`# %% [markdown]`, `# %%`) that ruff lints
and a review reads; it becomes notebooks/NN_name.ipynb. Only each cell's type and source are
taken: cell ids come from the notebook and the cell's position (nbformat would draw random
ones) and the metadata is fixed, so the same sources always give the same bytes and `--check`
can compare files.
"""

import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat as nbf

NB = Path(__file__).resolve().parents[1] / "notebooks"
SRC = NB / "src"
KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}
# Cells that several lessons hold a copy of, by their first line: the closing shutdown note. A
# fix to one copy belongs in all of them, so the copies must stay equal. (The engine-or-recording
# cell is code: da_lab.lesson.open_lesson, called from each lesson's first cell.)
SHARED = ("When you are done, `lab.shutdown()` frees the engine",)
MAX_CODE_LINE = 100   # ruff's line length; E501 is off in src/ for the markdown paragraphs
# nbmake's per-cell limit (its default, 300 s, is a wall clock): on a busy machine a lesson's
# engine or server start alone takes longer (07's server: 316 s at load 53,
# bench/results/lesson-times-cpu-2026-12-07-busy.json). A ceiling, not what a cell takes.
CELL_TIMEOUT_S = 1200


def build(src: Path) -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNEL)
    nb.metadata["execution"] = {"timeout": CELL_TIMEOUT_S}
    new = {"markdown": nbf.v4.new_markdown_cell, "code": nbf.v4.new_code_cell}
    for k, cell in enumerate(jupytext.read(src, fmt="py:percent").cells):
        nb.cells.append(new[cell.cell_type](cell.source, id=f"{src.name[:2]}-{k:02d}"))
    return nb


def problems(notebooks: dict[str, nbf.NotebookNode]) -> list[str]:
    """Shared cells that drifted apart, and code lines too long for a review."""
    out = []
    for first in SHARED:
        copies = {}   # each version of the cell -> the lessons holding it
        for name, nb in notebooks.items():
            for c in nb.cells:
                if c.source.startswith(first):
                    copies.setdefault(c.source, []).append(name)
        if len(copies) > 1:
            versions = " | ".join(", ".join(names) for names in copies.values())
            out.append(f"the cell starting {first!r} has {len(copies)} versions ({versions}): "
                       "make every copy the same")
    for name, nb in notebooks.items():
        for k, c in enumerate(nb.cells):
            if c.cell_type == "code" and any(len(x) > MAX_CODE_LINE
                                             for x in c.source.splitlines()):
                out.append(f"notebooks/src/{name}.py, cell {k}: a line over {MAX_CODE_LINE} "
                           "characters")
    return out


def main(args: list[str]) -> int:
    check = "--check" in args
    only = tuple(a for a in args if not a.startswith("--"))
    notebooks = {src.stem: build(src) for src in sorted(SRC.glob("*.py"))}
    bad = problems(notebooks)
    out = Path(tempfile.mkdtemp()) if check else NB
    for name, nb in notebooks.items():
        if only and not name.startswith(only):
            continue
        nbf.write(nb, out / f"{name}.ipynb")
        committed = NB / f"{name}.ipynb"
        if check and (not committed.exists()
                      or committed.read_bytes() != (out / f"{name}.ipynb").read_bytes()):
            bad.append(f"notebooks/{name}.ipynb differs from notebooks/src/{name}.py: "
                       "run tools/make_notebooks.py")
    if check:
        bad += [f"notebooks/{p.name} has no source notebooks/src/{p.stem}.py"
                for p in sorted(NB.glob("*.ipynb")) if p.stem not in notebooks]
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
