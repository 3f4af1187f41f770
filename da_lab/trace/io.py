"""Lab traces: a header plus one JSON record per engine step, saved to disk and read back.

Two formats, picked by the file extension:
    .jsonl.gz   gzip text; line 1 is the header JSON, then one record JSON per line. Flushed
                after every record, so a run that dies still leaves its steps readable.
    .parquet    one row per record: `step` (int64) and `record` (the record JSON, string);
                the header JSON lives in the file's key-value metadata under b"da_lab.trace".
                Written in zstd row groups; meant for large runs.
The header is {"kind": "da_lab.trace", "schema": SCHEMA, "provenance": {...}, ...}; a record is
any JSON object with an int "step" and a list "requests" (see the lab's README for the fields).

Only the standard library is needed for .jsonl.gz; pandas and pyarrow are imported lazily (for
to_pandas and .parquet). Never import vllm/torch here: a laptop must replay a GPU run.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

__all__ = ["SCHEMA", "TraceError", "Trace", "TraceWriter", "save", "load"]

SCHEMA = 1
KIND = "da_lab.trace"
PARQUET_KEY = b"da_lab.trace"
ROW_GROUP_SIZE = 1000
# ...or fewer: a row group is held in memory until written, and one step of a batch of 64 at
# 8k context is ~0.7 MB of JSON.
ROW_GROUP_BYTES = 64 << 20
_FORMATS = (".jsonl.gz", ".parquet")
_INT64 = (-(2**63), 2**63 - 1)


class TraceError(ValueError):
    """A trace could not be read (or would not be readable if written): one line, names the file."""


# ---------------------------------------------------------------------------------------------
# small helpers


def _oneline(exc: BaseException, limit: int = 160) -> str:
    """An exception's message reduced to one short line (Arrow messages span many)."""
    text = str(exc).strip()
    text = text.splitlines()[0] if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _format_of(path: Path) -> str:
    name = path.name.lower()
    for ext in _FORMATS:
        if name.endswith(ext):
            return ext
    raise TraceError(f"{path}: unknown trace format, use .jsonl.gz or .parquet")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)  # JSON true is not a step number


def _plural(n: int) -> str:
    return f"{n} record" if n == 1 else f"{n} records"


def _check_header(where: str, header: Any, origin: str = "header") -> dict:
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise TraceError(f'{where}: not a da_lab trace ({origin} has no "kind": "{KIND}")')
    schema = header.get("schema")
    if not _is_int(schema) or schema < 1:
        raise TraceError(f"{where}: header has an invalid schema {schema!r} (expected an int >= 1)")
    if schema > SCHEMA:
        raise TraceError(f"{where}: schema {schema} is newer than this da_lab reads ({SCHEMA})")
    return header


def _check_record(where: str, i: int, rec: Any) -> dict:
    if not isinstance(rec, dict):
        raise TraceError(f"{where}: record {i} is a JSON {type(rec).__name__}, not an object")
    if not _is_int(rec.get("step")):
        raise TraceError(f'{where}: record {i} has no integer "step"')
    if "requests" in rec and not isinstance(rec["requests"], list):
        raise TraceError(f'{where}: record {i} (step {rec["step"]}): "requests" is not a list')
    return rec


def check_writable(path: Path, i: int, record: Any) -> None:
    """Refuse now what load() would refuse later (the JSON encoding itself is checked when
    the record is encoded)."""
    _check_record(str(path), i, record)
    if _format_of(path) == ".parquet" and not _INT64[0] <= record["step"] <= _INT64[1]:
        raise TraceError(f"{path}: record {i}: step {record['step']} "
                         "does not fit the int64 step column")


def _json_default(o: Any) -> Any:
    # Hook code may hand over numpy scalars/arrays; everything else must already be JSON.
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON-serializable")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=_json_default)


# ---------------------------------------------------------------------------------------------
# the in-memory trace


def apply_kv_changes(blocks: dict[int, dict], kv: dict, where: str = "") -> dict[int, dict]:
    """Apply one step's physical-KV changes to `blocks` ({id: {"owners", "cached"}}) in place."""
    def block(bid) -> dict:
        try:
            b = int(bid)
        except (TypeError, ValueError):
            raise TraceError(f"kv map: {where}: block id {bid!r} is not an int") from None
        return blocks.setdefault(b, {"owners": [], "cached": False})

    for bid, owners in (kv.get("assign") or {}).items():
        block(bid)["owners"] = list(owners)
    for bid in kv.get("free") or ():
        block(bid)["owners"] = []
    for bid in kv.get("cached") or ():
        block(bid)["cached"] = True
    for bid in kv.get("uncached") or ():
        block(bid)["cached"] = False
    return blocks


@dataclass
class Trace:
    header: dict
    records: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    @property
    def provenance(self) -> dict:
        return self.header.get("provenance") or {}

    def to_pandas(self):
        """One row per (step, request); fields a record lacks become NA."""
        import pandas as pd

        step_cols = ("wall_s", "hook_us")
        req_cols = ("req", "mode", "tag_buffer", "seq_len", "attn_seq_len",
                    "blocks_total", "blocks_read", "new_text")
        cols: dict[str, list] = {c: [] for c in COLUMNS}
        for rec in self.records:
            for r in rec.get("requests") or []:
                r = r if isinstance(r, dict) else {}
                cols["step"].append(rec.get("step"))
                for c in step_cols:
                    cols[c].append(rec.get(c))
                for c in req_cols:
                    cols[c].append(r.get(c))
                ev = r.get("events")
                cols["n_events"].append(len(ev) if isinstance(ev, list) else None)
        return pd.DataFrame({c: _column(pd, cols[c], _DTYPES[c]) for c in COLUMNS})

    def kv_map(self, upto_step: int) -> dict[int, dict]:
        """Replay the per-step "kv" changes of steps <= upto_step, in file order, starting
        from the header's "initial_kv" (the cache as it was when recording began).

        Returns {physical block id: {"owners": [request ids], "cached": bool}} for every block
        any change mentioned; "assign" replaces a block's owners, "free" empties them, and
        "cached"/"uncached" set the prefix-cache flag.
        """
        blocks: dict[int, dict] = {}
        initial = self.header.get("initial_kv")
        if isinstance(initial, dict):
            apply_kv_changes(blocks, initial, "initial_kv")
        for rec in self.records:
            step = rec.get("step")
            if not _is_int(step) or step > upto_step:
                continue
            kv = rec.get("kv")
            if isinstance(kv, dict):   # else: no KV changes recorded at this step
                apply_kv_changes(blocks, kv, f"step {step}")
        return dict(sorted(blocks.items()))


COLUMNS = ("step", "wall_s", "hook_us", "req", "mode", "tag_buffer", "seq_len", "attn_seq_len",
           "blocks_total", "blocks_read", "new_text", "n_events")
_DTYPES = {"step": "Int64", "wall_s": "Float64", "hook_us": "Float64", "req": "string",
           "mode": "string", "tag_buffer": "string", "seq_len": "Int64", "attn_seq_len": "Int64",
           "blocks_total": "Int64", "blocks_read": "Int64", "new_text": "string",
           "n_events": "Int64"}
_PY_TYPES = {"Int64": (int,), "Float64": (int, float), "string": (str,)}


def _column(pd, values: list, dtype: str):
    # A nullable typed column when the values fit; otherwise object (odd records must not crash).
    ok = all(v is None or (isinstance(v, _PY_TYPES[dtype]) and not isinstance(v, bool))
             for v in values)
    if ok:
        try:
            return pd.array(values, dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            pass
    return pd.array([pd.NA if v is None else v for v in values], dtype=object)


# ---------------------------------------------------------------------------------------------
# writing


class TraceWriter:
    """Streams records to `path` (.jsonl.gz or .parquet). Use as a context manager."""

    def __init__(self, path, header: dict, *, row_group_size: int = ROW_GROUP_SIZE):
        self.path = Path(path)
        self._fmt = _format_of(self.path)
        if not isinstance(header, dict):
            raise TraceError(f"{self.path}: header must be a dict, got {type(header).__name__}")
        self.header = _check_header(str(self.path), {"kind": KIND, "schema": SCHEMA, **header})
        try:
            header_json = _dumps(self.header)
        except (TypeError, ValueError) as e:
            raise TraceError(f"{self.path}: header is not JSON-serializable ({e})") from None
        self.count = 0
        self._closed = False
        self._row_group_size = max(1, int(row_group_size))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._fmt == ".jsonl.gz":
            # mtime=0: the same run gives the same bytes. Level 1: a recording must keep pace
            # with the engine; at batch 64 x 8k it halves the writer's time per record
            # (bench/recording_cpu.py: 25.2 -> 12.5 ms) for files ~1.3x larger than level 6.
            self._gz = gzip.GzipFile(self.path, "wb", compresslevel=1, mtime=0)
            self._gz.write(header_json.encode() + b"\n")
            self._gz.flush()
        else:
            pa, pq = _pyarrow(self.path)
            self._schema = pa.schema([("step", pa.int64()), ("record", pa.string())],
                                     metadata={PARQUET_KEY: header_json.encode()})
            # No dictionary encoding: every record string is distinct, and trying to
            # dictionary-encode them cost ~20x the zstd compression itself.
            self._pq = pq.ParquetWriter(self.path, self._schema, compression="zstd",
                                        use_dictionary=False)
            self._steps: list[int] = []
            self._rows: list[str] = []
            self._row_bytes = 0

    def write(self, record: dict) -> None:
        if self._closed:
            raise TraceError(f"{self.path}: write() after close()")
        check_writable(self.path, self.count, record)
        try:
            line = self._encode(record)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{self.path}: record {self.count} (step {record['step']}) is not "
                            f"JSON-serializable: {e}") from None
        if self._fmt == ".jsonl.gz":
            self._gz.write(line.encode() + b"\n")
            self._gz.flush()  # sync flush: the steps so far survive a crash
        else:
            self._steps.append(record["step"])
            self._rows.append(line)
            self._row_bytes += len(line)
            if len(self._rows) >= self._row_group_size or self._row_bytes >= ROW_GROUP_BYTES:
                self._flush_rows()
        self.count += 1

    def _encode(self, record: dict) -> str:
        return _dumps(record)

    def _flush_rows(self) -> None:
        if not self._rows:
            return
        import pyarrow as pa

        table = pa.table({"step": pa.array(self._steps, pa.int64()),
                          "record": pa.array(self._rows, pa.string())}, schema=self._schema)
        self._pq.write_table(table)
        self._steps, self._rows, self._row_bytes = [], [], 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fmt == ".jsonl.gz":
            self._gz.close()
        else:
            try:
                self._flush_rows()
            finally:
                self._pq.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # also on error: keep the steps that were written


def save(path, header: dict, records: list[dict]) -> Path:
    """Write a whole trace at once. Goes through a temporary file so a failure mid-way never
    leaves a half-written trace (or destroys an older one) at `path`."""
    path = Path(path)
    _format_of(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{_format_of(path)}")
    try:
        with TraceWriter(tmp, header) as w:
            for rec in records:
                w.write(rec)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# ---------------------------------------------------------------------------------------------
# reading


def load(path) -> Trace:
    """Read a trace; any problem with the file is a TraceError naming the file and the cause."""
    p = Path(path)
    fmt = _format_of(p)
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(f"{p}: permission denied") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot open ({_oneline(e)})") from None
    with fh:
        if fmt == ".jsonl.gz":
            return _load_jsonl(p, fh)
        return _load_parquet(p, fh)


def _load_jsonl(p: Path, fh) -> Trace:
    header: dict | None = None
    records: list[dict] = []
    n = 0  # lines seen

    def parse(raw: bytes):
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            what = "not UTF-8 text"
        except json.JSONDecodeError as e:
            what = f"not JSON ({_oneline(e)})"
        except RecursionError:
            what = "nested too deeply"
        if header is None:
            raise TraceError(f"{p}: not a da_lab trace (first line is {what})")
        raise TraceError(f"{p}: line {n} is {what}, after {_plural(len(records))}")

    try:
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            for raw in gz:
                n += 1
                if not raw.strip():
                    continue  # tolerate blank lines (e.g. a hand-edited file)
                obj = parse(raw)
                if header is None:
                    header = _check_header(str(p), obj, "first line")
                else:
                    records.append(_check_record(str(p), len(records), obj))
    except EOFError:
        if header is None:
            raise TraceError(f"{p}: truncated (gzip stream ended before the header line)") from None
        raise TraceError(f"{p}: truncated (gzip stream ended early after "
                         f"{_plural(len(records))})") from None
    except gzip.BadGzipFile as e:
        if n == 0 and str(e).startswith("Not a gzipped file"):
            raise TraceError(f"{p}: not a gzip file (a .jsonl.gz trace is gzip-compressed "
                             "JSON lines)") from None
        raise TraceError(f"{p}: corrupt gzip data after {_plural(len(records))} "
                         f"({_oneline(e)})") from None
    except (zlib.error, OSError) as e:
        raise TraceError(f"{p}: corrupt gzip data after {_plural(len(records))} "
                         f"({_oneline(e)})") from None
    if header is None:
        raise TraceError(f"{p}: empty file (no header line)")
    return Trace(header, records)


def _pyarrow(p: Path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TraceError(f"{p}: .parquet traces need pyarrow (pip install pyarrow), "
                         "or use .jsonl.gz") from None
    return pa, pq


def _load_parquet(p: Path, fh) -> Trace:
    pa, pq = _pyarrow(p)
    try:
        pf = pq.ParquetFile(fh)
        meta = pf.metadata.metadata or {}
        names = pf.schema_arrow.names
    except Exception as e:  # Arrow raises many types (ArrowInvalid, OSError, ...) for bad files
        raise TraceError(f"{p}: not a readable Parquet file, truncated or corrupt "
                         f"({_oneline(e)})") from None
    raw = meta.get(PARQUET_KEY)
    if raw is None:
        raise TraceError(f'{p}: not a da_lab trace (no "da_lab.trace" header in the Parquet '
                         "key-value metadata)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TraceError(f"{p}: header in the Parquet metadata is not JSON ({_oneline(e)})") from None
    _check_header(str(p), header, "Parquet header")
    for col in ("step", "record"):
        if col not in names:
            raise TraceError(f'{p}: not a da_lab trace (no "{col}" column)')

    records: list[dict] = []
    for g in range(pf.num_row_groups):
        try:
            table = pf.read_row_group(g, columns=["step", "record"])
            steps = table.column("step").to_pylist()
            rows = table.column("record").to_pylist()
        except Exception as e:
            raise TraceError(f"{p}: corrupt row group {g} after {_plural(len(records))} "
                             f"({_oneline(e)})") from None
        for step, row in zip(steps, rows):
            i = len(records)
            if not isinstance(row, str):
                raise TraceError(f"{p}: record {i} is {type(row).__name__}, not a JSON string")
            try:
                rec = json.loads(row)
            except (json.JSONDecodeError, RecursionError) as e:
                raise TraceError(f"{p}: record {i} is not JSON ({_oneline(e)})") from None
            _check_record(str(p), i, rec)
            if rec["step"] != step:
                raise TraceError(f'{p}: record {i}: "step" column says {step} but the record '
                                 f"says {rec['step']}")
            records.append(rec)
    return Trace(header, records)
