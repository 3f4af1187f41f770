"""Reading traces: `load` returns a `Trace` (the header and one `StepRecord` per engine step);
any problem with the file, its format or a record's content is a one-line `TraceError` naming
the file (see format.py for the layout)."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from da_lab.core.record import RecordError, StepRecord
from da_lab.trace.format import (
    MAX_LINE_BYTES,
    PARQUET_KEY,
    TraceError,
    check_header,
    check_record,
    check_regular,
    format_of,
    oneline,
    pyarrow_for,
    records_text,
)

__all__ = ["Trace", "apply_kv_changes", "load"]


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
    records: list[StepRecord] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[StepRecord]:
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
            for r in rec.requests:
                cols["step"].append(rec.step)
                for c in step_cols:
                    cols[c].append(getattr(rec, c))
                hooked = r.hooked
                for c in req_cols:
                    cols[c].append(getattr(r, c) if hooked or c in ("req", "new_text") else None)
                cols["n_events"].append(len(r.events) if hooked else None)
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
            if rec.step <= upto_step:
                apply_kv_changes(blocks, rec.kv, f"step {rec.step}")
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




def _typed(p: Path, i: int, obj: dict, schema: int) -> StepRecord:
    try:
        return StepRecord.from_json(obj, schema)
    except RecordError as e:
        raise TraceError(f"{p}: record {i} ({e})") from None


def load(path) -> Trace:
    """Read a trace; any problem with the file is a TraceError naming the file and the cause."""
    p = Path(path)
    problem = None
    try:
        check_regular(p)    # a folder or a device is called that, whatever its name...
    except TraceError as e:
        problem = e
    if problem is not None and "no such file" not in str(problem):
        raise problem
    fmt = format_of(p)     # ...but a missing file with a wrong name: the name comes first
    if problem is not None:
        raise problem
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(f"{p}: permission denied") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot open ({oneline(e)})") from None
    with fh:
        if fmt == ".jsonl.gz":
            return _load_jsonl(p, fh)
        return _load_parquet(p, fh)


_NONBLANK = re.compile(rb"[^ \t\r\n\x0b\x0c]")
READ_CHUNK = 1 << 20


def _lines(p: Path, gz) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line, read in chunks: runs of blank lines are
    skipped by a regex and counted, not split one by one (a gzip of 1 GB of newlines is a few
    seconds), and a line past MAX_LINE_BYTES is refused before it is held whole."""
    n = 0                      # newlines before the current position
    pending: list[bytes] = []  # the start of a line that has no newline yet
    size = 0
    while chunk := gz.read1(READ_CHUNK):    # read1: what a truncated stream held is kept
        start = 0
        if pending:
            end = chunk.find(b"\n")
            if end < 0:
                pending.append(chunk)
                size += len(chunk)
                if size > MAX_LINE_BYTES:
                    raise TraceError(f"{p}: line {n + 1} is longer than "
                                     f"{MAX_LINE_BYTES >> 20} MiB; no step record is that long")
                continue
            line, pending, size = b"".join([*pending, chunk[:end]]), [], 0
            n += 1
            yield n, line
            start = end + 1
        while True:
            m = _NONBLANK.search(chunk, start)
            if m is None:
                n += chunk.count(b"\n", start)
                break
            n += chunk.count(b"\n", start, m.start())
            end = chunk.find(b"\n", m.start())
            if end < 0:
                pending, size = [chunk[m.start():]], len(chunk) - m.start()
                break
            n += 1
            yield n, chunk[m.start():end]
            start = end + 1
    if pending:
        yield n + 1, b"".join(pending)


def _load_jsonl(p: Path, fh) -> Trace:
    header: dict | None = None
    records: list[dict] = []
    n = 0  # the line being read

    def parse(raw: bytes):
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            what = "not UTF-8 text"
        except json.JSONDecodeError as e:
            what = f"not JSON ({oneline(e)})"
        except RecursionError:
            what = "nested too deeply"
        except ValueError as e:     # e.g. an integer of more digits than Python converts
            what = f"not JSON ({oneline(e)})"
        if header is None:
            raise TraceError(f"{p}: not a da_lab trace (first line is {what})")
        raise TraceError(f"{p}: line {n} is {what}, after {records_text(len(records))}")

    try:
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            for item in _lines(p, gz):
                n, raw = item            # parse() names line n
                obj = parse(raw)
                if header is None:
                    header = check_header(str(p), obj, "first line")
                else:
                    check_record(str(p), len(records), obj)
                    records.append(_typed(p, len(records), obj, header["schema"]))
    except EOFError:
        if header is None:
            raise TraceError(f"{p}: truncated (gzip stream ended before the header line)") from None
        raise TraceError(f"{p}: truncated (gzip stream ended early after "
                         f"{records_text(len(records))})") from None
    except gzip.BadGzipFile as e:
        if n == 0 and not records and str(e).startswith("Not a gzipped file"):
            raise TraceError(f"{p}: not a gzip file (a .jsonl.gz trace is gzip-compressed "
                             "JSON lines)") from None
        raise TraceError(f"{p}: corrupt gzip data after {records_text(len(records))} "
                         f"({oneline(e)})") from None
    except (zlib.error, OSError) as e:
        raise TraceError(f"{p}: corrupt gzip data after {records_text(len(records))} "
                         f"({oneline(e)})") from None
    if header is None:
        raise TraceError(f"{p}: empty file (no header line)")
    return Trace(header, records)


def _load_parquet(p: Path, fh) -> Trace:
    pa, pq = pyarrow_for(p)
    try:
        pf = pq.ParquetFile(fh)
        meta = pf.metadata.metadata or {}
        names = pf.schema_arrow.names
    except Exception as e:  # Arrow raises many types (ArrowInvalid, OSError, ...) for bad files
        raise TraceError(f"{p}: not a readable Parquet file, truncated or corrupt "
                         f"({oneline(e)})") from None
    raw = meta.get(PARQUET_KEY)
    if raw is None:
        raise TraceError(f'{p}: not a da_lab trace (no "da_lab.trace" header in the Parquet '
                         "key-value metadata)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TraceError(f"{p}: header in the Parquet metadata is not JSON "
                         f"({oneline(e)})") from None
    check_header(str(p), header, "Parquet header")
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
            raise TraceError(f"{p}: corrupt row group {g} after {records_text(len(records))} "
                             f"({oneline(e)})") from None
        for step, row in zip(steps, rows, strict=True):
            i = len(records)
            if not isinstance(row, str):
                raise TraceError(f"{p}: record {i} is {type(row).__name__}, not a JSON string")
            try:
                rec = json.loads(row)
            except (json.JSONDecodeError, RecursionError) as e:
                raise TraceError(f"{p}: record {i} is not JSON ({oneline(e)})") from None
            check_record(str(p), i, rec)
            if rec["step"] != step:
                raise TraceError(f'{p}: record {i}: "step" column says {step} but the record '
                                 f"says {rec['step']}")
            records.append(_typed(p, i, rec, header["schema"]))
    return Trace(header, records)
