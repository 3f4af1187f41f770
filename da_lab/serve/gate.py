"""The doors: what the edge (edge.py) can't see from `engine_client.generate`.

The edge checks a DA request where vLLM hands it to the engine. Two kinds of request get there
too late or not at all, so these checks run on the request *vLLM parsed* (its pydantic request
object: escaped keys already read, any body size, whatever route it came through — /v1/...,
/invocations, the batch chat route), at the serving handlers every generation route calls:
  - beam search (`use_beam_search`): vLLM runs it through its own per-beam requests, built
    without the request's vllm_xargs, so DA would be silently off: refused with HTTP 400;
  - a streamed request (`/v1/responses` calls `generate` inside its event stream, after the
    200): every check that needs no prompt (JSON, fields, block size, director tags) runs here,
    before the stream, as an HTTP 400; a request the edge refuses later (a chunk outside the
    rendered prompt) ends its stream with an `error` event (`ErrorEvents`), not a cut
    connection;
  - the batch chat route runs its items with one `batch_ids()` context, so the edge gives each
    item its own da_id (ids.py), as a list of prompts does;
  - `truncate_prompt_tokens` cuts the prompt after the client built its layout: with the
    layout's prompt_len the edge refuses the shorter prompt; without it the spans would land
    on the truncated prompt's positions, so such a request is refused here.
"""

from __future__ import annotations

import functools
import json

from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_LAYOUT, layout_fields, parse_director
from da_lab.serve.ids import batch_ids

# app.state attribute -> the handler method the routes (and /invocations) call with the parsed
# request; the batch one gets its items' ids from one context.
HANDLERS = (("openai_serving_completion", "create_completion"),
            ("openai_serving_chat", "create_chat_completion"),
            ("openai_serving_chat_batch", "create_batch_chat_completion"),
            ("openai_serving_responses", "create_responses"))
BATCH = "create_batch_chat_completion"
STREAMED_ROUTES = ("/v1/responses",)    # routes whose generate runs after the 200


def precheck(request, block_size: int) -> tuple[str, str, str] | None:
    """(reason, message, param) when a parsed DA request must be refused before vLLM runs it."""
    xargs = getattr(request, "vllm_xargs", None)
    if not isinstance(xargs, dict) or not (EXTRA_LAYOUT in xargs or EXTRA_DIRECTOR in xargs):
        return None
    if getattr(request, "use_beam_search", False):
        return ("beam_search", "beam search can't carry a DA layout: vLLM runs each beam as its "
                "own request without the request's vllm_xargs, so DA would be off; send the "
                "request without use_beam_search", "use_beam_search")
    if getattr(request, "truncate_prompt_tokens", None) is not None and EXTRA_LAYOUT in xargs:
        try:
            d = layout_fields(xargs[EXTRA_LAYOUT], block_size=block_size)[0]
        except ValueError as e:
            return ("layout", str(e), "vllm_xargs")
        if "prompt_len" not in d:
            return ("truncation", f"truncate_prompt_tokens can't be combined with a "
                    f"{EXTRA_LAYOUT} without prompt_len: the prompt would be cut after its "
                    "chunks were placed, and the spans would name other tokens; give "
                    "prompt_len (a cut prompt is then refused) or leave truncation out",
                    "truncate_prompt_tokens")
    if not getattr(request, "stream", False):
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


class MissingDoor(RuntimeError):
    """A serving handler the gate wraps is not where it was (a vLLM release renamed it): the
    server must not start, or that route would run DA requests without these checks."""


def missing_doors(state) -> list[str]:
    """The handlers of HANDLERS that `state` lacks: an app.state attribute that is gone, or a
    handler without its method. A handler that is None is a task this server does not run
    (vLLM answers that route itself), not a missing one."""
    out = []
    for attr, name in HANDLERS:
        if not hasattr(state, attr):
            out.append(f"app.state.{attr}")
            continue
        handler = getattr(state, attr)
        if handler is not None and not callable(getattr(handler, name, None)):
            out.append(f"app.state.{attr}.{name} ({type(handler).__name__})")
    return out


def install(state, plugin) -> list[str]:
    """Wrap the serving handlers in `state` (vLLM's app.state); the names of those wrapped.
    Raises MissingDoor, one line naming the handler and the release, when one is missing
    (its needs are declared in versions/needs_engine.py, SERVE_HANDLERS)."""
    from da_lab.serve.edge import EdgeError
    from da_lab.versions.releases import engine_name, supported_range

    missing = missing_doors(state)
    if missing:
        raise MissingDoor(
            f"da_lab: {engine_name()} has no {', '.join(missing)}, a serving handler the DA "
            f"checks run at (serve/gate.py); without it that route would serve DA requests "
            f"unchecked, so the server does not start (da_lab supports vLLM "
            f"{supported_range()})")
    done = []
    for attr, name in HANDLERS:
        handler = getattr(state, attr)
        orig = getattr(handler, name, None)
        if handler is None or getattr(orig, "_da_door", False):
            continue

        def wrap(orig=orig, batch=(name == BATCH)):
            @functools.wraps(orig)
            async def door(request, *args, **kwargs):
                refusal = precheck(request, plugin.edge.block_size)
                if refusal is not None:
                    reason, message, _param = refusal
                    plugin.edge.rejected[reason] = plugin.edge.rejected.get(reason, 0) + 1
                    raise EdgeError(reason, message)   # vLLM answers a ValueError with a 400
                if not batch:
                    return await orig(request, *args, **kwargs)
                with batch_ids():
                    return await orig(request, *args, **kwargs)
            door._da_door = True
            return door

        setattr(handler, name, wrap())      # an instance attribute: every caller gets it
        done.append(f"{attr}.{name}")
    return done


def _edge_error(exc: BaseException | None, depth: int = 0):
    """The EdgeError behind `exc`, else None: raised as is, inside an exception group, or as
    the cause of Starlette's "Caught handled exception, but response already started"."""
    from da_lab.serve.edge import EdgeError

    if exc is None or depth > 8:
        return None
    if isinstance(exc, EdgeError):
        return exc
    for inner in (*getattr(exc, "exceptions", ()), exc.__cause__, exc.__context__):
        found = _edge_error(inner, depth + 1)
        if found is not None:
            return found
    return None


class ErrorEvents:
    """ASGI middleware: a DA refusal raised after a streamed response began ends the stream with
    an `error` event (the edge counted the rejection). Reads no body: what the request asked
    for is judged on what vLLM parsed (above), never on raw bytes."""

    def __init__(self, app, plugin) -> None:
        self.app, self.plugin = app, plugin

    async def __call__(self, scope, receive, send):
        if not (scope.get("type") == "http" and scope.get("method") == "POST"
                and scope.get("path", "").rstrip("/") in STREAMED_ROUTES):
            return await self.app(scope, receive, send)
        started = events = 0

        async def watch(msg):
            nonlocal started, events
            if msg["type"] == "http.response.start":
                started = 1
            elif msg["type"] == "http.response.body":
                events += msg.get("body", b"").count(b"\n\n")
            await send(msg)

        try:
            await self.app(scope, receive, watch)
        except BaseException as exc:
            err = _edge_error(exc)
            if err is None or not started:
                raise
            event = {"type": "error", "code": "invalid_request_error", "message": str(err),
                     "param": "vllm_xargs", "sequence_number": events}
            await send({"type": "http.response.body", "more_body": False,
                        "body": f"event: error\ndata: {json.dumps(event)}\n\n".encode()})
