"""The director: scripted tags for models that don't write their own.

At a chosen output position the director makes the request's next sampled token the next token
of a tag. The tag then sits in the model's own output stream and the hook traps it exactly like
a model-written one: the director never changes the mode beside the stream.

How: the hook overrides the sampler's output for that row (`Step.after_sampling`), on the
v1 and the V2 model runner alike. It is deliberately *not* a vLLM logits processor: on GPU
vLLM 0.26 any custom logits processor silently moves the engine from the V2 to the v1 model
runner, so a lab with scripted tags would no longer run the runner it asked for.

Scripts arrive with the request (`SamplingParams.extra_args["da_director"]`, so they reach an
engine core in another process) or, for an in-process engine, through the request book's live
scripts: `Lab.steer` calls `RequestBook.steer` (through the session) while the request runs, so
a user's button ends up in the model's stream.
"""

from __future__ import annotations

import json


def normalize(script, tokenizer=None) -> list[tuple[int, list[int]]]:
    """[(at, ids)] from extra_args' JSON-ish [[at, [ids]], ...] or the wire's JSON string,
    whose tags may be text (encoded by `tokenizer()`, which returns a `tokenizers.Tokenizer`);
    bad entries are dropped (the server's edge refuses them before they get here)."""
    if isinstance(script, str):
        try:
            script = json.loads(script)
        except (ValueError, RecursionError):
            return []
    out = []
    for entry in script or ():
        try:
            at, ids = entry
            if isinstance(ids, str) and tokenizer is not None:
                ids = tokenizer().encode(ids, add_special_tokens=False).ids
            out.append((int(at), [int(t) for t in ids]))
        except (TypeError, ValueError):
            continue
    return sorted(out)


def token_at(script: list[tuple[int, list[int]]], n: int) -> int | None:
    """The token the script writes at output index `n`, if any."""
    for at, ids in script:
        if at <= n < at + len(ids):
            return ids[n - at]
    return None


def check(script: list[tuple[int, list[int]]], vocab_size: int) -> None:
    """Refuse a script the engine can't write: a negative output index, or a token id outside
    the model's vocabulary (it would index past the embedding table). 0 = size unknown."""
    for at, ids in script:
        if at < 0:
            raise ValueError(f"director: output index {at} is negative")
        bad = [t for t in ids if t < 0 or (vocab_size and t >= vocab_size)]
        if bad:
            raise ValueError(f"director: token id {bad[0]} at output {at} is outside the "
                             f"model's vocabulary (0..{vocab_size - 1})")
