"""HTTP for the client, on httpx, against a server that may not be a DA server at all: every
call has a total time limit (not only per read: a server that drips one byte a second is cut
at it), every answer a size limit (read in pieces, never whole into memory first), and every
way an answer can be wrong (a status, no JSON, the wrong shape) is one `ServerError` whose
message is one line naming the route. `da-lab ask` and `python -m da_lab.client.check` print
that line; a notebook gets the exception.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx

# The largest answer each kind of call reads (a DA server's are far smaller: stats are a few
# kB, a 128k-token prompt's /tokenize answer ~1 MB).
MAX_JSON_BYTES = 16 << 20
MAX_STREAM_BYTES = 64 << 20      # one streamed completion, every event together
MAX_LINE_BYTES = 1 << 20         # one server-sent event


class ServerError(RuntimeError):
    """The server did not answer as a DA server does (or answered with an error)."""


class Overdue(ServerError):
    """A command's overall time limit passed (raised from a signal handler: not an OSError,
    so the HTTP layers below pass it up unchanged)."""


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def message(status: int, body: bytes) -> str:
    """A server's error, as vLLM writes it ({"error": {"message": ...}} or {"detail": ...}),
    else the body's first characters."""
    try:
        doc = json.loads(body)
    except ValueError:
        return one_line(body[:600].decode("utf-8", "replace")) or f"HTTP {status}"
    err = doc.get("error", doc.get("detail")) if isinstance(doc, dict) else None
    if isinstance(err, dict):
        err = err.get("message", err)
    return one_line(err if err is not None else doc)


class Transport:
    """One httpx.Client for a server root, with `timeout` seconds per call and, if set, an
    overall `deadline` (time.monotonic()) after which every call fails."""

    def __init__(self, root: str, headers: dict, timeout: float,
                 deadline: float | None = None) -> None:
        self.root, self.timeout, self.deadline = root, float(timeout), deadline
        self.http = httpx.Client(headers=headers, timeout=timeout)

    def _end(self) -> float:
        end = time.monotonic() + self.timeout
        return end if self.deadline is None else min(end, self.deadline)

    def _left(self, end: float, path: str) -> float:
        left = end - time.monotonic()
        if left <= 0:
            overall = "" if self.deadline is None else ", or the overall --timeout"
            raise ServerError(f"{path}: no complete answer within the time limit "
                              f"({self.timeout:g} s per call{overall})")
        return left

    def _read(self, r: httpx.Response, path: str, end: float, limit: int) -> Iterator[bytes]:
        got = 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got > limit:
                raise ServerError(f"{path}: the answer is over {limit >> 20} MiB; a DA server's "
                                  "is far smaller")
            self._left(end, path)
            yield chunk

    def call(self, method: str, path: str, body: dict | None = None, *,
             limit: int = MAX_JSON_BYTES) -> tuple[int, bytes]:
        """(status, body) of one call, the body read whole within the limits."""
        end = self._end()
        try:
            with self.http.stream(method, self.root + path, json=body,
                                  timeout=self._left(end, path)) as r:
                data = b"".join(self._read(r, path, end, limit))
                return r.status_code, data
        except httpx.TimeoutException:
            self._left(time.monotonic() - 1, path)       # raises: said as the time limit
            raise
        except httpx.ConnectError as e:        # nothing listens there: say that first
            raise ServerError(f"no server answers at {self.root} ({path}: "
                              f"{one_line(e) or 'connection failed'}); is a DA server running "
                              "there?") from None
        except httpx.HTTPError as e:
            raise ServerError(f"{path}: {type(e).__name__}: {one_line(e) or 'no answer'} "
                              f"(is a DA server running at {self.root}?)") from None

    def json(self, method: str, path: str, body: dict | None = None, *,
             ok: tuple[int, ...] = (200,), limit: int = MAX_JSON_BYTES):
        """(status, decoded JSON) for a status in `ok`; ServerError for any other."""
        status, data = self.call(method, path, body, limit=limit)
        if status not in ok:
            hint = " (the server wants its --api-key: --api-key or VLLM_API_KEY)" \
                if status == 401 else ""
            raise ServerError(f"{path}: HTTP {status}: {message(status, data)}{hint}")
        try:
            return status, json.loads(data)
        except (ValueError, RecursionError):
            raise ServerError(f"{path}: the answer is not JSON ({one_line(data[:80])!r}...)") \
                from None

    def events(self, path: str, body: dict) -> Iterator[dict]:
        """The JSON events of a server-sent-events stream (`data: {...}` lines, until
        `data: [DONE]`), each line and the whole stream within the limits."""
        end = self._end()
        try:
            with self.http.stream("POST", self.root + path, json=body,
                                  timeout=self._left(end, path)) as r:
                if r.status_code != 200:
                    data = b"".join(self._read(r, path, end, MAX_JSON_BYTES))
                    raise ServerError(f"{path}: HTTP {r.status_code}: "
                                      f"{message(r.status_code, data)}")
                yield from self._sse(self._read(r, path, end, MAX_STREAM_BYTES), path)
        except httpx.TimeoutException:
            self._left(time.monotonic() - 1, path)
            raise
        except httpx.HTTPError as e:
            raise ServerError(f"{path}: the stream broke off ({type(e).__name__}: "
                              f"{one_line(e)})") from None

    @staticmethod
    def _sse(chunks: Iterator[bytes], path: str) -> Iterator[dict]:
        buf = b""
        for chunk in chunks:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                try:
                    event = json.loads(data)
                except (ValueError, RecursionError):
                    raise ServerError(f"{path}: a streamed event is not JSON "
                                      f"({one_line(data[:80])!r}...)") from None
                if not isinstance(event, dict):
                    raise ServerError(f"{path}: a streamed event is not a JSON object")
                if "error" in event:
                    raise ServerError(f"{path}: the stream ended with an error: "
                                      f"{message(200, data)}")
                yield event
            if len(buf) > MAX_LINE_BYTES:
                raise ServerError(f"{path}: a streamed event is over {MAX_LINE_BYTES >> 20} "
                                  "MiB; a DA server's are far smaller")
        raise ServerError(f"{path}: the stream ended without its last event (data: [DONE])")

    def close(self) -> None:
        self.http.close()
