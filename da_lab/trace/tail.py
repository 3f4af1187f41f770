"""Reading a .jsonl.gz trace while it is still being written (a server recording with
DA_LAB_TRACE, a Lab recording in another process).

The writer flushes the gzip stream after every record, so everything up to the last flush
decompresses even though the stream has no end yet; `load()` refuses such a file as truncated,
which is right for a finished run, while a tail takes the complete lines and comes back later
for the rest. Each `read()` decompresses the file from the start (gzip has no random access)
and returns only the records it had not returned before.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from da_lab.core.record import StepRecord
from da_lab.trace.format import (
    TraceError,
    check_header,
    check_record,
    check_regular,
    format_of,
)


class TraceTail:
    def __init__(self, path) -> None:
        self.path = Path(path)
        if format_of(self.path) != ".jsonl.gz":
            raise TraceError(f"{self.path}: only .jsonl.gz traces can be followed while they "
                             "grow (a .parquet file is readable once closed)")
        self.header: dict | None = None
        self.count = 0            # records returned so far
        self.ended = False        # the gzip stream is complete: the writer closed the file

    def read(self) -> list[StepRecord]:
        """The records appended since the last read (none if the file does not exist yet)."""
        if self.ended or not self.path.exists():
            return []
        check_regular(self.path)
        lines, ended = self._lines()
        out = []
        for n, raw in enumerate(lines):
            try:
                obj = json.loads(raw)
            except ValueError:
                raise TraceError(f"{self.path}: line {n + 1} is not JSON") from None
            if n == 0:
                if self.header is None:
                    self.header = check_header(str(self.path), obj, "first line")
                continue
            if n - 1 < self.count:
                continue
            check_record(str(self.path), n - 1, obj)
            out.append(StepRecord.from_json(obj, self.header["schema"]))
        self.count += len(out)
        self.ended = ended
        return out

    def _lines(self) -> tuple[list[bytes], bool]:
        """Complete lines decompressed so far, and whether the stream has ended."""
        parts, ended = [], False
        with open(self.path, "rb") as fh:
            gz = gzip.GzipFile(fileobj=fh, mode="rb")
            try:
                while chunk := gz.read1(1 << 16):
                    parts.append(chunk)
                ended = True
            except EOFError:
                pass                  # no end of stream yet: the writer is still at it
            except (gzip.BadGzipFile, zlib.error, OSError) as e:
                raise TraceError(f"{self.path}: corrupt gzip data ({e})") from None
        lines = b"".join(parts).split(b"\n")
        # The piece after the last newline is a record still being flushed (or nothing).
        return [ln for ln in lines[:-1] if ln.strip()], ended
