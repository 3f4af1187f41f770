"""The server's edge: a DA request is checked before it reaches the engine.

Where: the API server's `engine_client.generate(prompt, sampling_params, request_id, ...)`,
wrapped by the endpoint plugin (endpoint.py). Every OpenAI route (completions, chat
completions, responses) calls it with the rendered token ids and the SamplingParams whose
`extra_args` hold the request's `vllm_xargs`, and calls it *synchronously*, before a streamed
response has started: an error raised here is a ValueError out of the route, which vLLM maps to
HTTP 400 with the message (0.26 and 0.32 alike). Inside the engine it would be too late: a bad
DA request would run unmasked, or, once streaming, end as an error chunk after a 200.

What it does: checks the layout against the prompt (chunks inside it, a question after them,
the engine's block size) and the director's tags against the layout and the vocabulary, refuses
DA on a model the hook refused, then gives the engine its own form in a copy of the request's
SamplingParams (a layout dict with this prompt's prompt_len, [[at, [ids]]], a da_id that no
running request holds: ids.py). Requests without DA keys pass untouched.
"""

from __future__ import annotations

import copy
import functools

from da_lab.core.wire import (
    EXTRA_DIRECTOR,
    EXTRA_ID,
    EXTRA_LAYOUT,
    extra_args,
    parse_director,
    parse_layout,
)
from da_lab.serve.ids import IdInUse, LiveIds


class EdgeError(ValueError):
    """A DA request the server refuses (HTTP 400); `reason` labels the rejections metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def prompt_token_ids(prompt) -> list[int] | None:
    """The token ids vLLM's renderer made of the request (a TokensInput dict in 0.26/0.32)."""
    ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else getattr(
        prompt, "prompt_token_ids", None)
    return list(ids) if ids is not None else None


STRUCTURED = (f"vllm_xargs.{EXTRA_DIRECTOR} can't be combined with structured output "
              "(guided_regex, guided_json, guided_choice, guided_grammar, response_format "
              "json_object/json_schema, structured_outputs): the director writes its tags into "
              "the reply, and the grammar would refuse those tokens; send the director or the "
              "structured output, not both (a layout alone may carry structured output)")


CONSTRAINED = (f"vllm_xargs.{EXTRA_DIRECTOR} can't be combined with {{names}}: the director "
               "forces its tag tokens into the reply whatever those allow or ban, so they would "
               "not hold; send the director or the token constraint, not both (a layout alone "
               "may carry one)")


def constrained(params) -> list[str]:
    """The token constraints the director's forced tokens would override."""
    return [name for name in ("allowed_token_ids", "bad_words") if getattr(params, name, None)]


def structured(params) -> bool:
    """Whether the SamplingParams vLLM built carry a grammar (structured_outputs in 0.26 ...
    0.33; the older guided_decoding is in none of them)."""
    return getattr(params, "structured_outputs", None) is not None


class Edge:
    def __init__(self, *, block_size: int, vocab_size: int, disabled: str | None,
                 tokenizer) -> None:
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.disabled = disabled
        self.tokenizer = tokenizer      # the server's own (engine_client.get_tokenizer())
        self.rejected: dict[str, int] = {}     # reason -> count, for /metrics
        self.ids = LiveIds()

    # ---- wiring ----------------------------------------------------------------------------
    def install(self, engine_client) -> None:
        """Check every request `engine_client.generate` receives (once per client)."""
        orig = engine_client.generate
        if getattr(orig, "_da_edge", False):
            return

        @functools.wraps(orig)
        def generate(*args, **kwargs):
            args, kwargs = list(args), dict(kwargs)
            prompt = args[0] if args else kwargs.get("prompt")
            params = args[1] if len(args) > 1 else kwargs.get("sampling_params")
            req_id = args[2] if len(args) > 2 else kwargs.get("request_id")   # vLLM's id
            mine, da_id = self.admit(prompt, params, req_id)
            if da_id is None:
                return orig(*args, **kwargs)
            if len(args) > 1:
                args[1] = mine
            else:
                kwargs["sampling_params"] = mine
            return self.ids.hold(da_id, orig(*args, **kwargs))

        generate._da_edge = True
        engine_client.generate = generate

    # ---- the check ------------------------------------------------------------------------
    def admit(self, prompt, params, req_id):
        """(the SamplingParams to send, the request's da_id), or (params, None) for a request
        without DA keys. The engine's form goes into a copy: vLLM hands every prompt of a
        prompt list the same `vllm_xargs` dict, so writing into it would give them all one
        layout and one id."""
        ex = getattr(params, "extra_args", None)
        if not ex or (EXTRA_LAYOUT not in ex and EXTRA_DIRECTOR not in ex):
            return params, None
        try:
            layout, script = self._check(ex, prompt, params)
            try:
                da_id = self.ids.claim(ex, req_id)
            except IdInUse as e:
                raise EdgeError("id", str(e)) from None
        except EdgeError as e:
            self.rejected[e.reason] = self.rejected.get(e.reason, 0) + 1
            raise
        mine = copy.copy(params)
        # The engine's form (what the hook reads: this prompt's layout, the director's token
        # ids, the claimed id) over the client's other keys.
        mine.extra_args = {**ex, **extra_args(da_id, layout, script)}
        return mine, da_id

    def _check(self, ex: dict, prompt, params) -> tuple:
        """(the request's Layout, the director's script in token ids or None); EdgeError."""
        if EXTRA_LAYOUT not in ex:
            raise EdgeError("director", f"vllm_xargs.{EXTRA_DIRECTOR} needs a "
                                        f"vllm_xargs.{EXTRA_LAYOUT} (the chunks it names)")
        if self.disabled:
            raise EdgeError("disabled", f"DA is off on this server, so a request with "
                                        f"{EXTRA_LAYOUT} can't be served: {self.disabled}")
        ids = prompt_token_ids(prompt)
        if ids is None:
            raise EdgeError("prompt", "a DA request needs a prompt the server turns into token "
                                      "ids (text, chat messages or token ids)")
        if (getattr(params, "n", 1) or 1) > 1:
            raise EdgeError("prompt", "a DA request generates one sequence (n=1): its layout "
                                      "and stats belong to one request")
        if ex.get(EXTRA_ID) is not None and not isinstance(ex[EXTRA_ID], str | int):
            raise EdgeError("id", f"vllm_xargs.{EXTRA_ID} must be a string")
        if isinstance(ex.get(EXTRA_ID), str) and ("/" in ex[EXTRA_ID] or not ex[EXTRA_ID]):
            # GET /da/requests/{da_id} is one path segment: such an id could never be fetched.
            raise EdgeError("id", f"vllm_xargs.{EXTRA_ID} {ex[EXTRA_ID][:80]!r} can't be an "
                                  "id: it must be non-empty and hold no '/' (its stats are "
                                  f"fetched at /da/requests/{{{EXTRA_ID}}})")
        if EXTRA_DIRECTOR in ex and structured(params):
            raise EdgeError("structured_output", STRUCTURED)
        if EXTRA_DIRECTOR in ex and constrained(params):
            raise EdgeError("constrained_output",
                            CONSTRAINED.format(names=" and ".join(constrained(params))))
        try:
            layout = parse_layout(ex[EXTRA_LAYOUT], len(ids), block_size=self.block_size)
        except ValueError as e:
            raise EdgeError("layout", str(e)) from None
        if EXTRA_DIRECTOR not in ex:
            return layout, None
        try:
            script = self._director(ex[EXTRA_DIRECTOR], layout.n_chunks,
                                    getattr(params, "max_tokens", None))
        except ValueError as e:
            raise EdgeError("director", str(e)) from None
        return layout, [[at, t] for at, t in script]

    def _director(self, value, n_chunks: int, max_tokens) -> list[tuple[int, list[int]]]:
        from da_lab.engine.validate import check_tags

        script = [(at, self._encode(t) if isinstance(t, str) else t)
                  for at, t in parse_director(value, n_chunks)]
        for at, t in script:
            bad = [x for x in t if x < 0 or (self.vocab_size and x >= self.vocab_size)]
            if bad:
                raise ValueError(f"{EXTRA_DIRECTOR}: token id {bad[0]} at output {at} is "
                                 f"outside the model's vocabulary (0..{self.vocab_size - 1})")
        if max_tokens:
            check_tags(script, int(max_tokens))
        return script

    def _encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError(f"{EXTRA_DIRECTOR}: this server has no tokenizer to encode tag "
                             "text with; send the tag's token ids")
        return list(self.tokenizer.encode(text, add_special_tokens=False))
