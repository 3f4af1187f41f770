"""The HTTP gate: what the edge (edge.py) can't see from `engine_client.generate`.

The edge checks a DA request where vLLM hands it to the engine. Two kinds of request get there
too late or not at all, so this ASGI middleware reads the body of every POST to the three
generation routes that carries a DA key (a byte search first: other requests pass untouched):
  - beam search (`use_beam_search`): vLLM runs it through its own per-beam requests, built
    without the request's vllm_xargs, so DA would be silently off: refused with HTTP 400;
  - a streamed `/v1/responses` request: vLLM calls `generate` inside its event stream, after
    the 200 and the first events. Every check that needs no prompt (JSON, fields, block size,
    director tags) runs here, before the stream, as an HTTP 400; a request the edge refuses
    later (a chunk outside the rendered prompt) ends its stream with an `error` event, not a
    cut connection.
"""

from __future__ import annotations

import json

from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_LAYOUT, layout_fields, parse_director

ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
MAX_BODY = 64 << 20      # a body past this is left to vLLM (it has its own limits)


def bad_request(message: str, param: str | None = None) -> bytes:
    """vLLM's own error body (ErrorResponse) for a 400."""
    return json.dumps({"error": {"message": message, "type": "BadRequestError",
                                 "param": param, "code": 400}}).encode()


def precheck(body: dict, block_size: int) -> tuple[str, str, str] | None:
    """(reason, message, param) when a DA request must be refused before vLLM runs it."""
    xargs = body.get("vllm_xargs")
    if not isinstance(xargs, dict) or not (EXTRA_LAYOUT in xargs or EXTRA_DIRECTOR in xargs):
        return None
    if body.get("use_beam_search"):
        return ("beam_search", "beam search can't carry a DA layout: vLLM runs each beam as its "
                "own request without the request's vllm_xargs, so DA would be off; send the "
                "request without use_beam_search", "use_beam_search")
    if not body.get("stream"):
        return None       # the edge answers these with a 400 itself
    try:
        if EXTRA_LAYOUT in xargs:
            n_chunks = len(layout_fields(xargs[EXTRA_LAYOUT], block_size=block_size)[3])
            if EXTRA_DIRECTOR in xargs:
                parse_director(xargs[EXTRA_DIRECTOR], n_chunks)
    except ValueError as e:
        return ("layout" if str(e).startswith(EXTRA_LAYOUT) else "director", str(e),
                "vllm_xargs")
    return None


def _edge_error(exc: BaseException | None, depth: int = 0):
    """The EdgeError behind `exc`, else None: raised as is, inside an exception group, or as
    the cause of Starlette's "Caught handled exception, but response already started"."""
    from da_lab.serve.edge import EdgeError

    if exc is None or depth > 8:
        return None
    if isinstance(exc, EdgeError):
        return exc
    for inner in (*getattr(exc, "exceptions", ()), exc.__cause__):
        found = _edge_error(inner, depth + 1)
        if found is not None:
            return found
    return None


class Gate:
    def __init__(self, app, plugin) -> None:
        self.app, self.plugin = app, plugin

    async def __call__(self, scope, receive, send):
        if not (scope.get("type") == "http" and scope.get("method") == "POST"
                and scope.get("path", "").rstrip("/") in ROUTES and self.plugin.edge):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":    # the client left before sending its body
                return await self.app(scope, _replay(msg, receive), send)
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        raw = b"".join(chunks)
        body = _da_body(raw)
        if body is not None:
            refusal = precheck(body, self.plugin.edge.block_size)
            if refusal is not None:
                reason, message, param = refusal
                self.plugin.edge.rejected[reason] = self.plugin.edge.rejected.get(reason, 0) + 1
                return await _respond(send, 400, bad_request(message, param))
        whole = {"type": "http.request", "body": raw, "more_body": False}
        await self._run(scope, _replay(whole, receive), send,
                        streamed=bool(body and body.get("stream")))

    async def _run(self, scope, receive, send, streamed: bool) -> None:
        """Run vLLM's route; a DA refusal raised after a stream began ends it with an error
        event (and counts once: the edge counted the rejection)."""
        started = events = 0

        async def watch(msg):
            nonlocal started, events
            if msg["type"] == "http.response.start":
                started = 1
            elif msg["type"] == "http.response.body":
                events += msg.get("body", b"").count(b"\n\n")
            await send(msg)

        try:
            await self.app(scope, receive, watch if streamed else send)
        except BaseException as exc:
            err = _edge_error(exc) if streamed else None
            if err is None or not started:
                raise
            event = {"type": "error", "code": "invalid_request_error", "message": str(err),
                     "param": "vllm_xargs", "sequence_number": events}
            await send({"type": "http.response.body", "more_body": False,
                        "body": f"event: error\ndata: {json.dumps(event)}\n\n".encode()})


def _da_body(raw: bytes) -> dict | None:
    if len(raw) > MAX_BODY or not (EXTRA_LAYOUT.encode() in raw or
                                   EXTRA_DIRECTOR.encode() in raw):
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None         # vLLM answers malformed JSON itself
    return body if isinstance(body, dict) else None


def _replay(first: dict, receive):
    """A `receive` that gives the app the message already read (the whole body), then passes
    on what the client sends next (a disconnect, which vLLM watches for to abort)."""
    pending = [first]

    async def replay():
        return pending.pop() if pending else await receive()
    return replay


async def _respond(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
