"""A small DA client for `da-lab serve` (any vLLM server with da_lab's plugins), on httpx.

    from da_lab.client import DAClient
    reply = DAClient("http://127.0.0.1:8000").ask(["C1 water 82. ...", ...], "value of water?")
    reply.text, reply.tags, reply.stats["blocks_read"], reply.stats["blocks_total"]

`ask` builds the DA prompt with the server's own tokenizer and chat template (client/prompt.py:
chunks padded to whole KV blocks), sends its token ids to /v1/completions with the layout in
`vllm_xargs` (core/wire.py), streams the reply, then reads the request's DA stats from
/da/requests/{id} (serve/endpoint.py says why stats travel that way).

Every call has a total time limit and every answer a size limit, and an answer that is not
what a DA server sends is a `ServerError` with one line saying so (client/transport.py): a
client never hangs on, or fills its memory for, a server that isn't one.

On the command line: `da-lab ask --server URL --chunks FILE... --question "..." [--json]`.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from da_lab.client.transport import Overdue, ServerError, Transport
from da_lab.core.layout import DAPrompt
from da_lab.core.wire import (
    EXTRA_DIRECTOR,
    EXTRA_ID,
    EXTRA_LAYOUT,
    director_to_wire,
    layout_to_wire,
)


@dataclass
class Reply:
    text: str
    tags: list[str]                  # the tags the model wrote (and the director forced), in order
    stats: dict                      # the hook's DA stats for the request (empty: plain request)
    request_id: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None

    def to_json(self) -> dict:
        return {"text": self.text, "tags": self.tags, "stats": self.stats,
                "request_id": self.request_id, "token_ids": self.token_ids,
                "finish_reason": self.finish_reason}


def server_root(url: str) -> str:
    root = url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


class DAClient:
    def __init__(self, server: str, model: str | None = None, *, api_key: str | None = None,
                 timeout: float = 600.0, chat_template: str | None = None,
                 deadline: float | None = None) -> None:
        """`api_key`: the server's --api-key (default: VLLM_API_KEY, the variable the server
        reads); sent to /v1 and /da/* alike. `timeout`: seconds one call may take in all;
        `deadline`: a time.monotonic() after which every call fails (a command's overall
        limit)."""
        from da_lab.client.prompt import ServerTokenizer

        if not isinstance(server, str) or not server.startswith(("http://", "https://")):
            raise ValueError(f"--server takes the server's URL (http://HOST:PORT, as "
                             f"`da-lab serve` prints it), not {server!r}")
        self.root = server_root(server)
        api_key = api_key or os.environ.get("VLLM_API_KEY") or "EMPTY"
        auth = {"Authorization": f"Bearer {api_key}"} if api_key != "EMPTY" else {}
        self.net = Transport(self.root, auth, timeout, deadline)
        self.model = model or self._first_model()
        self.tokenizer = ServerTokenizer(self.net, self.model, chat_template)
        self._status: dict | None = None

    def _first_model(self) -> str:
        _, doc = self.net.json("GET", "/v1/models")
        data = doc.get("data") if isinstance(doc, dict) else None
        first = data[0] if isinstance(data, list) and data else None
        name = first.get("id") if isinstance(first, dict) else None
        if not isinstance(name, str) or not name:
            raise ServerError("/v1/models: the server names no model (expected "
                              '{"data": [{"id": NAME}, ...]}); give --model')
        return name

    @property
    def status(self) -> dict:
        """What the server's DA plugin says (block size, DA on or off and why, runner)."""
        if self._status is None:
            code, doc = self.net.json("GET", "/da/status", ok=(200, 404))
            if code == 404:
                raise ServerError(f"{self.root} has no DA plugin (/da/status: 404); start it "
                                  "with `da-lab serve`, or with VLLM_PLUGINS naming da_lab")
            bs = doc.get("block_size") if isinstance(doc, dict) else None
            if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= 1 << 16:
                raise ServerError(f"/da/status: no usable block_size ({str(bs)[:40]}); not "
                                  "a DA server's status")
            self._status = doc
        return self._status

    def prompt(self, chunks: Sequence[str], question: str, *, system: str | None = None,
               protocol: str = "card", **paper) -> DAPrompt:
        """The DA prompt: the card's padded chunks, or protocol="paper" for the paper's
        Magic Chunk prompt of unpadded spans (client/prompt.py; `paper`: form, rules)."""
        from da_lab.client.prompt import build

        return build(self.tokenizer, list(chunks), question,
                     block_size=int(self.status["block_size"]), system=system,
                     protocol=protocol, **paper)

    def ask(self, chunks: Sequence[str], question: str, *, system: str | None = None,
            protocol: str = "card", **kwargs) -> Reply:
        """Build the DA prompt for `chunks` + `question` and send it (see `send`)."""
        return self.send(self.prompt(chunks, question, system=system, protocol=protocol),
                         **kwargs)

    def send(self, prompt: DAPrompt | list[int], *, max_tokens: int = 64,
             tags: Sequence[tuple[int, str]] = (), stream: bool = True,
             on_text: Callable[[str], None] | None = None, request_id: str | None = None,
             ignore_eos: bool = False) -> Reply:
        """Greedy completion of `prompt` (a DAPrompt: with its layout; token ids: plain);
        `tags`: (output index, tag text) the server's director writes there."""
        da_id = request_id or f"da-{uuid.uuid4().hex[:16]}"
        body: dict = {"model": self.model, "max_tokens": max_tokens, "temperature": 0.0,
                      "stream": stream, "return_token_ids": True, "ignore_eos": ignore_eos}
        if isinstance(prompt, DAPrompt):
            body["vllm_xargs"] = {EXTRA_LAYOUT: layout_to_wire(prompt.layout), EXTRA_ID: da_id}
            if tags:
                body["vllm_xargs"][EXTRA_DIRECTOR] = director_to_wire(tags)
        elif tags:
            raise ValueError("director tags need a DA prompt (its layout names the chunks)")
        body["prompt"] = list(prompt.token_ids if isinstance(prompt, DAPrompt) else prompt)
        if stream:
            events = self.net.events("/v1/completions", body)
        else:
            events = [self.net.json("POST", "/v1/completions", body)[1]]
        text, toks, finish = "", [], None
        for c in _choices(events):
            text += c["text"]
            toks += c["token_ids"]
            finish = c["finish_reason"] or finish
            if on_text is not None and c["text"]:
                on_text(c["text"])
        stats = self.stats(da_id) if isinstance(prompt, DAPrompt) else {}
        return Reply(text, list(stats.get("tags", [])), stats, da_id, toks, finish)

    def stats(self, request_id: str) -> dict:
        path = f"/da/requests/{request_id}"
        code, doc = self.net.json("GET", path, ok=(200, 404))
        if code == 404:
            return {}
        tags = doc.get("tags", []) if isinstance(doc, dict) else None
        if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise ServerError(f"{path}: not a DA request's stats (expected a JSON object "
                              "whose tags are a list of strings)")
        return doc

    def da_get(self, path: str) -> object:
        """GET one of the plugin's /da/* routes (the key and limits of every call)."""
        return self.net.json("GET", path)[1]

    def close(self) -> None:
        self.net.close()


def _choices(events):
    """Each choice of a completion's events, checked: text, token ids (ints), finish."""
    for doc in events:
        choices = doc.get("choices") if isinstance(doc, dict) else None
        if not isinstance(choices, list):
            raise ServerError("/v1/completions: an answer without choices; not an OpenAI "
                              "completion")
        for c in choices:
            text = c.get("text") if isinstance(c, dict) else None
            ids = (c.get("token_ids") or []) if isinstance(c, dict) else None
            fin = c.get("finish_reason") if isinstance(c, dict) else None
            if not isinstance(text, str) or not isinstance(ids, list) or not all(
                    isinstance(t, int) and not isinstance(t, bool) for t in ids) or not (
                    fin is None or isinstance(fin, str)):
                raise ServerError("/v1/completions: a choice that is not {text, token_ids, "
                                  "finish_reason}; not an OpenAI completion")
            yield {"text": text, "token_ids": ids, "finish_reason": fin}


def _director_arg(text: str) -> tuple[int, str]:
    at, sep, tag = text.partition(":")
    if not sep or not at.strip().isdigit():
        raise ValueError(f"--tag takes AT:TAG (an output index, then the tag), not {text!r}")
    return int(at), tag


def cmd_ask(args) -> int:
    """`da-lab ask`: one DA request; the reply on stdout (streamed), or one JSON document.
    Whatever goes wrong is one line on stderr: no traceback, within --timeout in all."""
    from pathlib import Path

    from da_lab.client.transport import one_line

    deadline = time.monotonic() + args.timeout
    try:
        with overall_timeout(args.timeout):
            chunks = [Path(f).read_text() for f in args.chunks]
            tags = [_director_arg(t) for t in args.tag]
            client = DAClient(args.server, args.model, api_key=args.api_key,
                              timeout=args.timeout, deadline=deadline)
            on_text = None if args.json else (lambda t: (sys.stdout.write(t),
                                                         sys.stdout.flush()))
            reply = client.ask(chunks, args.question, system=args.system, tags=tags,
                               protocol=args.protocol, max_tokens=args.max_tokens,
                               on_text=on_text)
    except (OSError, ValueError) as e:
        print(f"da-lab: {one_line(e)}", file=sys.stderr)
        return 2
    except ServerError as e:
        print(f"da-lab: {args.server}: {one_line(e)}", file=sys.stderr)
        return 1
    except Exception as e:   # noqa: BLE001 - one line, whatever the server made us trip on
        print(f"da-lab: {args.server}: an answer da-lab could not use ({type(e).__name__}: "
              f"{one_line(e)})", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(reply.to_json()))
        return 0
    s = reply.stats
    print()
    print(f"tags: {' '.join(reply.tags) or '(none)'}; blocks read {s.get('blocks_read')} of "
          f"{s.get('blocks_total')} ({s.get('steps')} steps)", file=sys.stderr)
    return 0


class overall_timeout:
    """A command's overall limit: SIGALRM after `seconds` raises Overdue in whatever
    the main thread waits on (a read from a server that drips its headers included). Off in
    other threads, where a signal can't be set."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self):
        import signal
        import threading

        self.on = threading.current_thread() is threading.main_thread() and \
            hasattr(signal, "setitimer")
        if self.on:
            def expire(_sig, _frame):
                raise Overdue(f"no answer within the overall --timeout of {self.seconds:g} s")

            self.old = signal.signal(signal.SIGALRM, expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc) -> None:
        if self.on:
            import signal

            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
