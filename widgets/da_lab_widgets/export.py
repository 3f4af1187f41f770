"""Export: every diagram of a recorded run, at its last step, as PNG, SVG and standalone HTML.

Headless and offline. Needs no vLLM: the diagrams read a trace. Images are rendered by kaleido
1.x, which drives a Chromium-based browser over the DevTools pipe; we point it at the system
Chromium (BROWSER_PATH, default /usr/bin/chromium) and never download one. Running as root
needs Chromium's --no-sandbox: choreographer (kaleido's browser driver) already adds it unless
`enable_sandbox=True` is asked for (choreographer/browsers/chromium.py, get_cli), so we pass
enable_sandbox=False explicitly to keep that guarantee visible. MathJax is off (kaleido would
fetch it from a CDN; no diagram uses LaTeX). HTML files embed plotly.js, so they open offline.

    da-lab export TRACE --out DIR      ->  DIR/1_skeleton.{png,svg,html}, 2_blocks.*,
                                           3_metadata_path.*, 4_da_hook.*, blocks_read.*
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

DEFAULT_BROWSER = "/usr/bin/chromium"
FORMATS = ("png", "svg")
# Used when a figure doesn't set its own size (kaleido's default is 700 x 500).
DEFAULT_SIZE = (1200, 800)


def browser_path() -> str:
    """The Chromium kaleido will drive: $BROWSER_PATH, else the system Chromium (set into
    BROWSER_PATH so choreographer's own lookups agree). Never downloads one."""
    if not os.environ.get("BROWSER_PATH"):
        os.environ["BROWSER_PATH"] = DEFAULT_BROWSER
    path = os.environ["BROWSER_PATH"]
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        found = shutil.which(path)
        if not found:
            raise RuntimeError(
                f"no Chromium at BROWSER_PATH={path!r}: image export drives a system "
                "Chromium-based browser (Debian: apt-get install chromium); set BROWSER_PATH "
                "to its executable. (kaleido.get_chrome() would download one; da_lab never "
                "does.)")
        path = found
    return path


def _static(fig):
    """A plain go.Figure copy of a FigureWidget (what kaleido and write_html serialize)."""
    import plotly.graph_objects as go

    return go.Figure(fig)


def _size(fig) -> tuple[int, int]:
    w, h = fig.layout.width, fig.layout.height
    return int(w or DEFAULT_SIZE[0]), int(h or DEFAULT_SIZE[1])


def export_figures(figures: dict[str, object], out_dir: str | Path) -> list[Path]:
    """Write <name>.png, <name>.svg and <name>.html for every figure; one browser session
    renders all the images. Returns the paths written, in order."""
    import kaleido

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = browser_path()
    jobs, written = [], []
    for name, fig in figures.items():
        static = _static(fig)
        w, h = _size(static)
        for fmt in FORMATS:
            p = out / f"{name}.{fmt}"
            jobs.append({"fig": static, "path": str(p),
                         "opts": {"format": fmt, "width": w, "height": h, "scale": 1}})
            written.append(p)
    kaleido.write_fig_from_object_sync(
        jobs, cancel_on_error=True,
        kopts={"path": path, "enable_sandbox": False, "mathjax": False})
    for name, fig in figures.items():
        p = out / f"{name}.html"
        # include_plotlyjs=True embeds plotly.js (~4 MB): the file opens with no network.
        _static(fig).write_html(str(p), include_plotlyjs=True, full_html=True)
        written.append(p)
    missing = [str(p) for p in written if not p.exists()]
    if missing:
        raise RuntimeError(f"export: kaleido reported success but did not write {missing}")
    return written


def export_figure(fig, base_path: str | Path) -> list[Path]:
    """Write base_path.png, .svg and .html for one figure (FigureWidget or Figure)."""
    base = Path(base_path)
    return export_figures({base.name: fig}, base.parent)


def build_diagrams(header: dict, records: list, i: int | None = None) -> dict[str, object]:
    """Every diagram of the lab, built headless and shown at step i (default: the last step).
    Returns {export name: plotly figure}."""
    from .highlight import Highlight
    from .metadata_path import MetadataPathDiagram
    from .skeleton import SkeletonDiagram

    try:
        from .blocks import BlocksDiagram
        from .dahook import DAHookDiagram
    except ImportError as e:
        raise RuntimeError(
            "export needs every diagram: BlocksDiagram (da_lab_widgets/blocks.py) and "
            f"DAHookDiagram (da_lab_widgets/dahook.py) could not be imported: {e}") from e
    if not records:
        raise ValueError("the trace has no step records to draw")
    i = len(records) - 1 if i is None else i
    hl = Highlight()
    skel = SkeletonDiagram(header, hl)
    blocks = BlocksDiagram(header, hl)
    path = MetadataPathDiagram(header, hl)
    hook = DAHookDiagram(header, hl)
    for d in (skel, blocks, hook):
        d.show(records, i)
    # The packet at the DA hook: the one stage where the full and the kernel's values differ.
    path.show(records, i, frame=path.hook_frame)
    return {"1_skeleton": skel.figure, "2_blocks": blocks.figure,
            "3_metadata_path": path.figure, "4_da_hook": hook.figure,
            "blocks_read": hook.chart}


def export_trace(trace_path: str | Path, out_dir: str | Path) -> list[Path]:
    """Build every diagram of the trace at its last step and write PNG, SVG and HTML of each
    (and of the blocks-read-per-step chart) into out_dir. Returns the paths written."""
    from da_lab.trace import load

    tr = load(trace_path)
    return export_figures(build_diagrams(tr.header, tr.records), out_dir)


def main_export(argv: list[str] | None = None) -> int:
    """`da-lab export TRACE --out DIR`: argv is what follows `export`."""
    import sys

    from da_lab.trace import TraceError

    ap = argparse.ArgumentParser(prog="da-lab export",
                                 description="write every diagram of a trace (last step) as "
                                             "PNG, SVG and HTML; needs no vLLM")
    ap.add_argument("trace", help="a recorded trace (.jsonl.gz or .parquet)")
    ap.add_argument("--out", required=True, help="output folder (created if missing)")
    args = ap.parse_args(argv)
    try:
        paths = export_trace(args.trace, args.out)
    except (TraceError, RuntimeError, ValueError) as e:
        print(f"da-lab export: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main_export())
