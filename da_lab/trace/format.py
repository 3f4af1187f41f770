"""The trace file format shared by the writer and the reader.

Two formats, picked by the file extension:
    .jsonl.gz   gzip text; line 1 is the header JSON, then one record JSON per line. Flushed
                after every record, so a run that dies still leaves its steps readable.
    .parquet    one row per record: `step` (int64) and `record` (the record JSON, string);
                the header JSON lives in the file's key-value metadata under b"da_lab.trace".
                Written in zstd row groups; meant for large runs.
The header is {"kind": "da_lab.trace", "schema": SCHEMA, "provenance": {...}, ...}; a record is
a `StepRecord.to_json()` (da_lab/core/record.py; schema 1 files hold the older dict form).

Only the standard library and numpy are needed for .jsonl.gz; pandas and pyarrow are imported
lazily (for to_pandas and .parquet). Never import vllm/torch here: a laptop must replay a GPU run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from da_lab.core.record import SCHEMA, RecordError, StepRecord

KIND = "da_lab.trace"
PARQUET_KEY = b"da_lab.trace"
ROW_GROUP_SIZE = 1000
# ...or fewer: a row group is held in memory until written, and one step of a batch of 64 at
# 8k context is ~0.7 MB of JSON.
ROW_GROUP_BYTES = 64 << 20
_FORMATS = (".jsonl.gz", ".parquet")
# A step number the page can play. JavaScript holds integers exactly up to 2**53 - 1, but the
# player's own arithmetic on steps gives out sooner: `da-lab export --out` drew a trace of
# steps 2**51 - 16 .. 2**51 - 11 and timed out (Chromium, 60 s) on one from 2**51 (issue 57).
# No engine run counts that many steps; load() refuses more, so export says so at once.
MAX_STEP = 2**51 - 1
# The longest line a .jsonl.gz reader takes: one step of a batch of 64 at 8k context is ~0.7 MB.
MAX_LINE_BYTES = 64 << 20


class TraceError(ValueError):
    """A trace could not be read (or would not be readable if written): one line, names the file."""


# ---------------------------------------------------------------------------------------------
# what a trace says about the run: its header


def provenance(*, vllm: str, device: str, model, runner: str, backend: str, block_size: int,
               num_blocks: int, **extra: Any) -> dict:
    """The header's provenance, the one way every writer makes it (the Lab, a server's trace,
    the bench's recorder): which vLLM on which device ran which model on which runner and
    backend, with what blocks; `extra` adds what that writer knows (graphs, runner kind,
    "source": "vllm serve")."""
    from datetime import UTC, datetime

    from da_lab import __version__

    return {"vllm": vllm, "device": device, "model": str(model),
            "model_name": Path(str(model)).name, "runner": runner, "backend": backend,
            "block_size": block_size, "num_blocks": num_blocks, **extra,
            "da_lab": __version__, "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def header(prov: dict, skeleton: dict | None = None, initial_kv: dict | None = None) -> dict:
    """A trace's header (the writer adds "kind" and "schema"): provenance, diagram 1's
    skeleton, the physical KV map when recording began (changes from an empty cache)."""
    return {"provenance": prov, "skeleton": skeleton or {}, "initial_kv": initial_kv or {}}


# ---------------------------------------------------------------------------------------------
# small helpers


def oneline(exc: BaseException, limit: int = 160) -> str:
    """An exception's message reduced to one short line (Arrow messages span many)."""
    text = str(exc).strip()
    text = text.splitlines()[0] if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_of(path: Path) -> str:
    name = path.name.lower()
    for ext in _FORMATS:
        if name.endswith(ext):
            return ext
    raise TraceError(f"{path}: unknown trace format, use .jsonl.gz or .parquet")


def check_regular(p: Path) -> None:
    """Refuse what is not a regular file before opening it: open() on a FIFO blocks until
    something writes to it, and a device file is not a trace."""
    import stat

    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot open ({oneline(e)})") from None
    if stat.S_ISDIR(mode):
        raise TraceError(f"{p}: is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise TraceError(f"{p}: is {kind}, not a trace file")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)  # JSON true is not a step number


def records_text(n: int) -> str:
    return f"{n} record" if n == 1 else f"{n} records"


def check_header(where: str, header: Any, origin: str = "header") -> dict:
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise TraceError(f'{where}: not a da_lab trace ({origin} has no "kind": "{KIND}")')
    schema = header.get("schema")
    if not _is_int(schema) or schema < 1:
        raise TraceError(f"{where}: header has an invalid schema {schema!r} (expected an int >= 1)")
    if schema > SCHEMA:
        raise TraceError(f"{where}: schema {schema} is newer than this da_lab reads ({SCHEMA})")
    prov = header.get("provenance")
    if prov is not None and not isinstance(prov, dict):
        raise TraceError(f"{where}: header.provenance is a JSON {type(prov).__name__}, "
                         "not an object")
    for key, least in (("block_size", 1), ("num_blocks", 0)):
        v = (prov or {}).get(key)
        if v is not None and not (_is_int(v) and v >= least):
            raise TraceError(f"{where}: header.provenance.{key} is {v!r:.40}, not an int "
                             f">= {least}")
    return header


def check_record(where: str, i: int, rec: Any) -> dict:
    if not isinstance(rec, dict):
        raise TraceError(f"{where}: record {i} is a JSON {type(rec).__name__}, not an object")
    if not _is_int(rec.get("step")):
        raise TraceError(f'{where}: record {i} has no integer "step"')
    if not 0 <= rec["step"] <= MAX_STEP:
        digits = str(abs(rec["step"]))      # json holds at most 4,300 digits: str() is safe
        shown = rec["step"] if len(digits) <= 20 else f"a {len(digits)}-digit number"
        raise TraceError(f'{where}: record {i}: "step" is {shown}, outside 0..{MAX_STEP} '
                         "(2**51 - 1: the steps the page plays; no engine run counts more)")
    if "requests" in rec and not isinstance(rec["requests"], list):
        raise TraceError(f'{where}: record {i} (step {rec["step"]}): "requests" is not a list')
    return rec


def check_writable(path: Path, i: int, record: Any) -> None:
    """Refuse now what load() would refuse later (the JSON encoding itself is checked when
    the record is encoded). `record`: a StepRecord or its JSON dict."""
    step = record.step if isinstance(record, StepRecord) else \
        check_record(str(path), i, record)["step"]
    format_of(path)
    if not 0 <= step <= MAX_STEP:       # load() refuses it (and MAX_STEP fits parquet's int64)
        raise TraceError(f"{path}: record {i}: step {step} is outside 0..{MAX_STEP}")
    if not isinstance(record, StepRecord):
        try:      # a dict must be a record load() reads back (StepRecord.to_json's form)
            StepRecord.from_json(record, SCHEMA)
        except RecordError as e:
            raise TraceError(f"{path}: record {i} ({e})") from None


def _json_default(o: Any) -> Any:
    # Hook code may hand over numpy scalars/arrays; everything else must already be JSON.
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON-serializable")


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=_json_default)




def pyarrow_for(p: Path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TraceError(f"{p}: .parquet traces need pyarrow (pip install pyarrow), "
                         "or use .jsonl.gz") from None
    return pa, pq
