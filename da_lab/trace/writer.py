"""Writing traces: `TraceWriter` streams step records to a .jsonl.gz or .parquet file; `save`
writes a whole trace at once (see format.py for the layout)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from da_lab.core.record import StepRecord
from da_lab.trace import format as fmt
from da_lab.trace.format import (
    KIND,
    PARQUET_KEY,
    ROW_GROUP_SIZE,
    TraceError,
    check_header,
    check_writable,
    compact_json,
    format_of,
    pyarrow_for,
)

__all__ = ["TraceWriter", "save"]


class TraceWriter:
    """Streams records to `path` (.jsonl.gz or .parquet). Use as a context manager."""

    def __init__(self, path, header: dict, *, row_group_size: int = ROW_GROUP_SIZE):
        self.path = Path(path)
        self._fmt = format_of(self.path)
        if not isinstance(header, dict):
            raise TraceError(f"{self.path}: header must be a dict, got {type(header).__name__}")
        self.header = check_header(str(self.path), {"kind": KIND, "schema": fmt.SCHEMA, **header})
        try:
            header_json = compact_json(self.header)
        except (TypeError, ValueError) as e:
            raise TraceError(f"{self.path}: header is not JSON-serializable ({e})") from None
        self.count = 0
        self._closed = False
        self._row_group_size = max(1, int(row_group_size))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._fmt == ".jsonl.gz":
            # mtime=0: the same run gives the same bytes. Level 1: a recording must keep pace
            # with the engine; at batch 64 x 8k it halves the writer's time per record
            # (bench/results/recording-cpu-2026-11-30.txt: 25.2 -> 12.5 ms) for files ~1.3x
            # larger than level 6.
            self._gz = gzip.GzipFile(self.path, "wb", compresslevel=1, mtime=0)
            self._gz.write(header_json.encode() + b"\n")
            self._gz.flush()
        else:
            pa, pq = pyarrow_for(self.path)
            self._schema = pa.schema([("step", pa.int64()), ("record", pa.string())],
                                     metadata={PARQUET_KEY: header_json.encode()})
            # No dictionary encoding: every record string is distinct, and trying to
            # dictionary-encode them cost ~20x the zstd compression itself.
            self._pq = pq.ParquetWriter(self.path, self._schema, compression="zstd",
                                        use_dictionary=False)
            self._steps: list[int] = []
            self._rows: list[str] = []
            self._row_bytes = 0

    def write(self, record: StepRecord | dict) -> None:
        """Write one record: a StepRecord, or its `to_json()` dict."""
        if self._closed:
            raise TraceError(f"{self.path}: write() after close()")
        if isinstance(record, StepRecord):
            record = record.to_json(arrays=True)
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
            if len(self._rows) >= self._row_group_size or self._row_bytes >= fmt.ROW_GROUP_BYTES:
                self._flush_rows()
        self.count += 1

    def _encode(self, record: dict) -> str:
        return compact_json(record)

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

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # also on error: keep the steps that were written


def save(path, header: dict, records: list) -> Path:
    """Write a whole trace at once. Goes through a temporary file so a failure mid-way never
    leaves a half-written trace (or destroys an older one) at `path`."""
    path = Path(path)
    format_of(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{format_of(path)}")
    try:
        with TraceWriter(tmp, header) as w:
            for rec in records:
                w.write(rec)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path



