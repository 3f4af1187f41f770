"""The flat wire form of a DA request: what travels in an OpenAI request's `vllm_xargs`.

vLLM's OpenAI server copies `vllm_xargs` into `SamplingParams.extra_args`, but its values may
only be str / int / float or flat lists of them, so the nested parts travel as JSON strings:

    "da_layout":   '{"block_size":32,"head_blocks":1,"chunk_blocks":[2,2,2],"prompt_len":230}'
                   or the paper's unpadded chunks, token spans [start, end) of the prompt:
                   '{"block_size":32,"chunk_spans":[[12,80],[80,151]],"prompt_len":230}'
                   (Layout.to_dict(); "prompt_len" may be left out: the prompt's own length;
                   "rules": "paper" reads the tags by the paper's §2.3 rules, "reference" (the
                   default) by the reference implementation's stack: docs/protocol.md)
    "da_director": '[[4, "<focus C2,C3>"], [16, "<global>"]]'
                   (output index -> tag text, or -> token ids; tags the director writes)
    "da_id":       the caller's name for the request (its DA stats are looked up by it)

Pure: no vLLM. The server's edge (da_lab/serve/edge.py) checks these with `parse_layout` and
`parse_director` and turns them into the engine's form (a layout dict, [[at, [ids]]]) before the
request reaches the engine; the hook reads either form.
"""

from __future__ import annotations

import json

from da_lab.core.layout import MAX_CHUNKS, Layout
from da_lab.core.tags import RULES, Closing, Directive, parse_tag

EXTRA_LAYOUT = "da_layout"      # SamplingParams.extra_args key: the Layout
EXTRA_DIRECTOR = "da_director"  # [[output_index, [token ids]], ...] (wire: tag text allowed)
EXTRA_ID = "da_id"              # the caller's request id (the worker sees an internal one)
_LAYOUT_KEYS = {"block_size", "head_blocks", "chunk_blocks", "prompt_len", "hidden", "rules"}
_SPAN_KEYS = {"block_size", "chunk_spans", "prompt_len", "hidden", "rules"}
# hidden: chunks FOCUS never keeps (the eval's ablation); rules: how closing tags read
_OPTIONAL = {"prompt_len", "hidden", "rules"}
# MAX_CHUNKS (core/layout.py): chunks one layout may name, a bound on what a request costs.
# A wire value past this many characters is refused before it is parsed: a real layout of
# 4,096 one-block chunks is ~8 kB, and a deeply nested one must not reach json's recursion.
MAX_WIRE_CHARS = 1 << 20


def extra_args(da_id: str, layout: Layout | dict | None = None,
               director: list | None = None) -> dict:
    """The engine's `SamplingParams.extra_args` for a request: its id, its layout (a Layout or
    its dict) and the director's script ([[output index, [token ids]], ...]) where given. The
    one constructor: the Lab, the teacher, the bench, the eval, the TP check and the server's
    edge build theirs here, so the key set the hook reads (EXTRA_*) is written in one place."""
    extra: dict = {EXTRA_ID: da_id}
    if layout is not None:
        extra[EXTRA_LAYOUT] = layout.to_dict() if isinstance(layout, Layout) else layout
    if director is not None:
        extra[EXTRA_DIRECTOR] = director
    return extra


def layout_to_wire(layout: Layout, *, with_prompt_len: bool = True) -> str:
    d = layout.to_dict()
    if not with_prompt_len:
        del d["prompt_len"]
    return json.dumps(d, separators=(",", ":"))


def _short(value, limit: int = 80) -> str:
    """repr() cut to `limit` characters: an error message quotes what it refuses, not 1 MB."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def _json(value, what: str):
    if not isinstance(value, str):
        return value
    if len(value) > MAX_WIRE_CHARS:
        raise ValueError(f"{what} is {len(value):,} characters long; the limit is "
                         f"{MAX_WIRE_CHARS:,}")
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} is not valid JSON ({e.msg} at character {e.pos})") from None
    except RecursionError:     # nesting deeper than json can follow
        raise ValueError(f"{what}: its JSON is nested too deeply to read") from None
    except ValueError as e:    # e.g. an integer of more digits than Python converts
        raise ValueError(f"{what} is not valid JSON ({e})") from None


def _int(d: dict, key: str, what: str) -> int:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what}.{key} must be a whole number, not {_short(v)}")
    return v


def layout_fields(value, *, block_size: int | None = None):
    """(dict, block_size, head_blocks, chunk sizes, hidden) of a wire layout: every check that
    needs no prompt (the server's HTTP gate runs these before a stream starts). For a layout of
    chunk spans, the sizes are the blocks each span touches and head_blocks those before it."""
    what = EXTRA_LAYOUT
    d = _json(value, what)
    if not isinstance(d, dict):
        raise ValueError(f"{what} must be a JSON object such as {{\"block_size\": 32, "
                         f"\"head_blocks\": 1, \"chunk_blocks\": [2, 2]}} or {{\"block_size\": "
                         f"32, \"chunk_spans\": [[12, 80], [80, 151]]}}, not {_short(d)}")
    spans = "chunk_spans" in d
    keys = _SPAN_KEYS if spans else _LAYOUT_KEYS
    unknown = sorted(set(d) - keys)
    missing = sorted(keys - set(d) - _OPTIONAL)
    if unknown or missing:
        raise ValueError(f"{what}: " + "; ".join(
            ([f"unknown field(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing field(s) {', '.join(missing)}"] if missing else []))
            + f" (fields: {', '.join(sorted(keys))}; prompt_len, hidden and rules are "
              "optional)")
    bs = _int(d, "block_size", what)
    if block_size is not None and bs != block_size:
        raise ValueError(f"{what}.block_size is {bs} but the engine's KV blocks hold "
                         f"{block_size} tokens: build the prompt for block size {block_size}")
    hidden = d.get("hidden", [])
    if not isinstance(hidden, list) or len(hidden) > MAX_CHUNKS:
        raise ValueError(f"{what}.hidden must be a list of at most {MAX_CHUNKS:,} chunk "
                         f"numbers (each chunk once), not {_short(hidden)}")
    hid = tuple(_int({"hidden": c}, "hidden", what) for c in hidden)
    rules = d.get("rules", "reference")
    if not isinstance(rules, str) or rules not in RULES:
        raise ValueError(f"{what}.rules must be one of {', '.join(map(repr, RULES))}, not "
                         f"{_short(rules)}")
    if spans:
        pairs = _spans(d["chunk_spans"], what)
        if bs < 1:
            raise ValueError(f"{what}: block_size must be at least 1 (got {bs})")
        head = pairs[0][0] // bs
        return d, bs, head, [-(-b // bs) - a // bs for a, b in pairs], hid
    head = _int(d, "head_blocks", what)
    chunks = d["chunk_blocks"]
    if not isinstance(chunks, list) or not chunks or len(chunks) > MAX_CHUNKS:
        raise ValueError(f"{what}.chunk_blocks must be a non-empty list of at most "
                         f"{MAX_CHUNKS:,} block counts, not {_short(chunks)}")
    sizes = [_int({"chunk_blocks": c}, "chunk_blocks", what) for c in chunks]
    if head < 1 or bs < 1 or min(sizes) < 1:
        raise ValueError(f"{what}: block_size, head_blocks and every chunk's block count must "
                         f"be at least 1 (got {bs}, {head}, {sizes})")
    return d, bs, head, sizes, hid


def _spans(value, what: str) -> list[tuple[int, int]]:
    if not isinstance(value, list) or not value or len(value) > MAX_CHUNKS:
        raise ValueError(f"{what}.chunk_spans must be a non-empty list of at most "
                         f"{MAX_CHUNKS:,} [start, end] token spans, not {_short(value)}")
    out = []
    for k, span in enumerate(value):
        if not (isinstance(span, list) and len(span) == 2):
            raise ValueError(f"{what}.chunk_spans[{k}] must be [start, end], not {_short(span)}")
        out.append(tuple(_int({"chunk_spans": v}, "chunk_spans", what) for v in span))
    return out


def parse_layout(value, prompt_len: int | None = None, *,
                 block_size: int | None = None) -> Layout:
    """The Layout of `value` (a wire JSON string or Layout.to_dict()), checked against the
    request's prompt length and the engine's block size where they are known. A layout without
    "prompt_len" takes `prompt_len`. Raises ValueError naming what is wrong."""
    what = EXTRA_LAYOUT
    d, bs, head, sizes, hid = layout_fields(value, block_size=block_size)
    n = _int(d, "prompt_len", what) if "prompt_len" in d else prompt_len
    if n is None:
        raise ValueError(f"{what} has no prompt_len and the prompt's length is not known here")
    if prompt_len is not None and n != prompt_len:
        raise ValueError(f"{what}.prompt_len is {n} but the prompt has {prompt_len} tokens")
    rules = d.get("rules", "reference")
    if "chunk_spans" in d:
        try:
            return Layout.from_spans(bs, _spans(d["chunk_spans"], what), n, hid, rules)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
    end = (head + sum(sizes)) * bs
    if end >= n:
        raise ValueError(f"{what}: the chunks end at token {end} (head {head} + chunks "
                         f"{sum(sizes)} blocks of {bs}), but the prompt has only {n} tokens: "
                         "a chunk lies outside the prompt, or no question (scaffold tail) "
                         "follows the last chunk")
    return Layout(bs, head, tuple(sizes), n, hid, rules=rules)   # Layout checks hidden's range


def director_to_wire(tags) -> str:
    """[(output index, tag text or token ids)] -> the wire's JSON string."""
    return json.dumps([[int(at), t if isinstance(t, str) else [int(x) for x in t]]
                       for at, t in tags], separators=(",", ":"))


def parse_director(value, n_chunks: int) -> list[tuple[int, str | list[int]]]:
    """[(output index, tag text or token ids)] from the wire, sorted; tag texts must parse as
    DA tags naming only the layout's chunks. Raises ValueError naming the bad entry."""
    what = EXTRA_DIRECTOR
    script = _json(value, what)
    if not isinstance(script, list):
        raise ValueError(f"{what} must be a JSON list of [output_index, tag] pairs, "
                         f"e.g. [[0, \"<focus C2>\"]], not {_short(script)}")
    out = []
    for k, entry in enumerate(script):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
                and not isinstance(entry[0], bool)):
            raise ValueError(f"{what}[{k}] must be [output_index, tag], not {_short(entry)}")
        at, tag = entry
        if at < 0:
            raise ValueError(f"{what}[{k}]: output index {at} is negative")
        if isinstance(tag, str):
            d = parse_tag(tag, n_chunks)
            if not isinstance(d, Directive | Closing):      # </focus> is the paper's too
                raise ValueError(f"{what}[{k}]: {_short(tag)} is not a DA tag the layout allows: "
                                 f"{d.detail}")
        elif not (isinstance(tag, list) and tag and all(
                isinstance(t, int) and not isinstance(t, bool) for t in tag)):
            raise ValueError(f"{what}[{k}]: the tag must be its text or a non-empty list of "
                             f"token ids, not {_short(tag)}")
        out.append((at, tag))
    return sorted(out, key=lambda e: e[0])
