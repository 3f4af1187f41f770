"""A small DA client for `da-lab serve` (any vLLM server with da_lab's plugins), on the
official openai package.

    from da_lab.client import DAClient
    reply = DAClient("http://127.0.0.1:8000").ask(["C1 water 82. ...", ...], "value of water?")
    reply.text, reply.tags, reply.stats["blocks_read"], reply.stats["blocks_total"]

`ask` builds the DA prompt with the server's own tokenizer and chat template (client/prompt.py:
chunks padded to whole KV blocks), sends its token ids to /v1/completions with the layout in
`vllm_xargs` (core/wire.py), streams the reply, then reads the request's DA stats from
/da/requests/{id} (serve/endpoint.py says why stats travel that way).

On the command line: `da-lab ask --server URL --chunks FILE... --question "..." [--json]`.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
                 timeout: float = 600.0, chat_template: str | None = None) -> None:
        """`api_key`: the server's --api-key (default: VLLM_API_KEY, the variable the server
        reads); sent to /v1 and /da/* alike."""
        import httpx
        from openai import OpenAI

        from da_lab.client.prompt import ServerTokenizer

        if not server.startswith(("http://", "https://")):
            raise ValueError(f"--server takes the server's URL (http://HOST:PORT, as "
                             f"`da-lab serve` prints it), not {server!r}")
        self.root = server_root(server)
        api_key = api_key or os.environ.get("VLLM_API_KEY") or "EMPTY"
        auth = {"Authorization": f"Bearer {api_key}"} if api_key != "EMPTY" else {}
        self.http = httpx.Client(timeout=timeout, headers=auth)
        self.openai = OpenAI(base_url=self.root + "/v1", api_key=api_key, timeout=timeout)
        self.model = model or self.openai.models.list().data[0].id
        self.tokenizer = ServerTokenizer(self.root, self.model, self.http, chat_template)
        self._status: dict | None = None

    @property
    def status(self) -> dict:
        """What the server's DA plugin says (block size, DA on or off and why, runner)."""
        if self._status is None:
            r = self.http.get(self.root + "/da/status")
            if r.status_code == 404:
                raise RuntimeError(f"{self.root} has no DA plugin (/da/status: 404); start it "
                                   "with `da-lab serve`, or with VLLM_PLUGINS naming da_lab")
            r.raise_for_status()
            self._status = r.json()
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
        body: dict = {"return_token_ids": True, "ignore_eos": ignore_eos}
        if isinstance(prompt, DAPrompt):
            body["vllm_xargs"] = {EXTRA_LAYOUT: layout_to_wire(prompt.layout), EXTRA_ID: da_id}
            if tags:
                body["vllm_xargs"][EXTRA_DIRECTOR] = director_to_wire(tags)
        elif tags:
            raise ValueError("director tags need a DA prompt (its layout names the chunks)")
        ids = list(prompt.token_ids if isinstance(prompt, DAPrompt) else prompt)
        out = self.openai.completions.create(model=self.model, prompt=ids, max_tokens=max_tokens,
                                             temperature=0.0, stream=stream, extra_body=body)
        text, toks, finish = "", [], None
        for c in (_choices(out) if stream else out.choices):
            text += c.text
            toks += list(getattr(c, "token_ids", None) or [])
            finish = c.finish_reason or finish
            if on_text is not None and c.text:
                on_text(c.text)
        stats = self.stats(da_id) if isinstance(prompt, DAPrompt) else {}
        return Reply(text, list(stats.get("tags", [])), stats, da_id, toks, finish)

    def stats(self, request_id: str) -> dict:
        r = self.http.get(f"{self.root}/da/requests/{request_id}")
        if r.status_code == 404:
            return {}
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        self.http.close()
        self.openai.close()


def _choices(stream):
    for chunk in stream:
        yield from chunk.choices


def _director_arg(text: str) -> tuple[int, str]:
    at, sep, tag = text.partition(":")
    if not sep or not at.strip().isdigit():
        raise ValueError(f"--tag takes AT:TAG (an output index, then the tag), not {text!r}")
    return int(at), tag


def cmd_ask(args) -> int:
    """`da-lab ask`: one DA request; the reply on stdout (streamed), or one JSON document."""
    from pathlib import Path

    import httpx
    import openai

    try:
        chunks = [Path(f).read_text() for f in args.chunks]
        tags = [_director_arg(t) for t in args.tag]
        client = DAClient(args.server, args.model, api_key=args.api_key)
        on_text = None if args.json else (lambda t: (sys.stdout.write(t), sys.stdout.flush()))
        reply = client.ask(chunks, args.question, system=args.system, tags=tags,
                           protocol=args.protocol,
                           max_tokens=args.max_tokens, on_text=on_text)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"da-lab: {e}", file=sys.stderr)
        return 2
    except (openai.APIConnectionError, httpx.TransportError) as e:
        print(f"da-lab: no server answers at {args.server} (is `da-lab serve` running "
              f"there?): {e}", file=sys.stderr)
        return 2
    except (openai.APIError, httpx.HTTPStatusError) as e:    # the server's own message
        print(f"da-lab: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(reply.to_json()))
        return 0
    s = reply.stats
    print()
    print(f"tags: {' '.join(reply.tags) or '(none)'}; blocks read {s.get('blocks_read')} of "
          f"{s.get('blocks_total')} ({s.get('steps')} steps)", file=sys.stderr)
    return 0
