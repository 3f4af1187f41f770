"""Fake servers for the client's hostile cases (tests/test_client_hostile.py and the doors run,
doors_client.py): one that speaks the DA server's protocol well enough to be checked (the
routes `da-lab ask` and the check tool call, behind an API key), and modes in which it answers
as no DA server would: wrong shapes, errors, huge bodies, a drip, silence. No vLLM: these try
the client against what a server may send."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

KEY = "sk-fake"
TAGS = ["<focus C3,C7>", "<global>"]
STATS = {"id": "x", "tags": TAGS, "blocks_read": 9, "blocks_total": 27, "steps": 24,
         "mode_switches": ["focus", "global"]}
STATE = {"live_requests": 0, "pending_outputs": 0, "rank": 0}

# mode -> {route: answer}; an answer is (status, JSON value or bytes), or a callable(handler).
MB = 1 << 20


def _drip(h):
    h.send_response(200)
    h.send_header("content-type", "application/json")
    h.end_headers()
    h.wfile.write(b'{"data": [')
    while True:
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.2)


def _drip_headers(h):
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    while True:
        h.wfile.write(b"X")
        h.wfile.flush()
        time.sleep(0.2)


def _silent(_h):
    time.sleep(3600)


def _huge(h):
    h.send_response(200)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(110 * MB))
    h.end_headers()
    h.wfile.write(b'{"tags": [], "pad": "')
    for _ in range(110):
        h.wfile.write(b"x" * MB)


MODES: dict[str, dict] = {
    "good": {},
    "no_models": {"/v1/models": (200, {"data": []})},
    "models_not_json": {"/v1/models": (200, b"<html>hello</html>")},
    "models_deep_json": {"/v1/models": (200, b"[" * 200_000)},
    "status_no_block_size": {"/da/status": (200, {"serve": True})},
    "block_size_zero": {"/da/status": (200, {"block_size": 0})},
    "block_size_text": {"/da/status": (200, {"block_size": "32"})},
    "no_da_plugin": {"/da/status": (404, {"detail": "Not Found"})},
    "tokenize_null": {"/tokenize": (200, {"tokens": None})},
    "tokenize_list": {"/tokenize": (200, [1, 2, 3])},
    "completion_no_choices": {"/v1/completions": (200, {"id": "c"})},
    "completion_null_text": {"/v1/completions": (200, {"choices": [{"text": None}]})},
    "stream_no_done": {"/v1/completions#stream": (200, b'data: {"choices": []}\n\n')},
    "stream_garbage": {"/v1/completions#stream": (200, b"data: {nope\n\n")},
    "stats_huge": {"/da/requests": _huge},
    "stats_tags_text": {"/da/requests": (200, {"tags": "<local>"})},
    "stats_list": {"/da/requests": (200, [1])},
    "ranks_text": {"/da/requests#ranks": (200, {"ranks": "all"})},
    "state_empty": {"/da/state": (200, {"ranks": []})},
    "server_error": {"*": (500, b"<html>Internal Server Error</html>")},
    "drip": {"/v1/models": _drip},
    "drip_headers": {"/v1/models": _drip_headers},
    "silent": {"/v1/models": _silent},
    "generates_nothing": {
        "/v1/completions": (200, {"choices": [{"text": "", "token_ids": [],
                                               "finish_reason": "length"}]}),
        "/v1/completions#stream": (200, b'data: {"choices": [{"text": "", "token_ids": [], '
                                        b'"finish_reason": "length"}]}\n\ndata: [DONE]\n\n')},
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, value) -> None:
        body = value if isinstance(value, bytes) else json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, method: str) -> None:
        n = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(n) or b"null")
        url = urlparse(self.path)
        if self.headers.get("authorization") != f"Bearer {KEY}":
            return self._send(401, {"error": "Unauthorized"})
        special = self.server.mode
        path = url.path
        key = path if not path.startswith("/da/requests/") else "/da/requests"
        if key == "/v1/completions" and isinstance(body, dict) and body.get("stream"):
            key += "#stream"
        if "ranks=all" in url.query:
            key += "#ranks"
        answer = special.get(key) or special.get(key.split("#")[0]) or special.get("*")
        try:
            if callable(answer):
                return answer(self)
            if answer is not None:
                return self._send(*answer)
            self._good(key, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _good(self, key: str, body) -> None:
        if key == "/v1/models":
            return self._send(200, {"data": [{"id": "fake"}]})
        if key == "/da/status":
            return self._send(200, {"block_size": 32, "serve": True})
        if key == "/tokenize":
            if "messages" in body:
                return self._send(400, {"error": {"message": "this model has no chat template"}})
            return self._send(200, {"tokens": [ord(c) % 500 + 1 for c in body["prompt"]]})
        if key == "/detokenize":
            return self._send(200, {"prompt": "".join(chr(t) for t in body["tokens"])})
        if key.startswith("/v1/completions"):
            n = body["max_tokens"]
            choice = {"text": "a" * n, "token_ids": [97] * n, "finish_reason": "length"}
            if not key.endswith("#stream"):
                return self._send(200, {"choices": [choice]})
            events = b"".join(b"data: " + json.dumps({"choices": [
                {"text": "a", "token_ids": [97], "finish_reason": None}]}).encode() + b"\n\n"
                for _ in range(n)) + b"data: [DONE]\n\n"
            return self._send(200, events)
        if key == "/da/requests#ranks":
            return self._send(200, {"ranks": [STATS]})
        if key == "/da/requests":
            return self._send(200, STATS)
        if key == "/da/state":
            return self._send(200, {"ranks": [STATE]})
        self._send(404, {"detail": "Not Found"})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


class FakeServer:
    def __init__(self, mode: str = "good") -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.mode = MODES[mode]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
