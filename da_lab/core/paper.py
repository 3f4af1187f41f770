"""The paper's prompt (Ho et al. 2026, arXiv 2609.02737, Section 2.1 and Appendix F) in its plain
text form, built the way its reference implementation `declarative-attention` 0.0.8 builds it,
without torch (the paper's own rendering, the context as a get_magic_chunk tool-call transcript
through the model's chat template, is core/paper_tools.py; both share the segmenter here):

    <system prompt>

    Magic Chunk 1:
    <segment 1>

    Magic Chunk 2:
    ...
    Question:
    <question>

    Instructions:
    <the three modes explained>

    Response:

Chunks are token spans of the prompt, unpadded: `paper_prompt` returns a DAPrompt whose Layout
comes from `Layout.from_spans`. One long text is cut by `segment_context` at the coarsest
natural boundary (paragraph, line, sentence, clause, word) into segments of about 2,048 tokens
(2,560 at most). tests/test_reference_protocol.py holds both equal to the reference's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from da_lab.core.layout import BLOCK_SIZE, DAPrompt, Layout

SYSTEM_PROMPT = "You are a helpful assistant."
INSTRUCTIONS = """Answer the question above using the magic chunks.
Reason through the magic chunks using three modes:
- <global> (default): all magic chunks are visible. Use to plan which magic chunk to examine next.
- <focus magic_chunks="K">: only magic chunk K is visible. Use to extract verbatim facts.
- <local>: no magic chunks are visible. Use to plan and synthesize facts already extracted.
Use at least one <focus> block, end with a <local> block committing to the final answer,
and wrap the final answer in <answer>...</answer>."""
TARGET_TOKENS, MAX_TOKENS = 2048, 2560
# The boundaries a too-long unit is split at, coarsest first.
SPLIT_PATTERNS = (r"\n\n+", r"\n", r"[.!?]\s+", r"[;:,]\s+", r"\s+")

Encode = Callable[[str], list[int]]


def count_tokens(text: str, encode: Encode | None = None) -> int:
    """Tokens in `text`; without a tokenizer, the reference's estimate of 4 characters each."""
    return len(encode(text)) if encode is not None else max(1, len(text) // 4)


def _split_after(text: str, pattern: str) -> list[str]:
    bounds = [0, *(m.end() for m in re.finditer(pattern, text)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


def _units(text: str, encode: Encode | None, max_tokens: int) -> list[str]:
    """`text` cut into units of at most max_tokens where a boundary allows it."""
    out, todo = [], [text]
    while todo:                      # a stack, not recursion: a long text has many levels
        unit = todo.pop()
        if count_tokens(unit, encode) > max_tokens:
            for pattern in SPLIT_PATTERNS:
                pieces = _split_after(unit, pattern)
                if len(pieces) > 1:
                    todo.extend(reversed(pieces))
                    break
            else:
                out.append(unit)
            continue
        out.append(unit)
    return out


def segment_context(text: str, encode: Encode | None = None, target_tokens: int = TARGET_TOKENS,
                    max_tokens: int = MAX_TOKENS) -> list[str]:
    """Lossless segments of `text` (their concatenation is `text`): units over max_tokens are
    split at the coarsest boundary, and adjacent units merge up to target_tokens."""
    if not text.strip():
        return ["<empty_context>"]
    segments, current, n = [], "", 0
    for unit in _units(text, encode, max_tokens):
        k = count_tokens(unit, encode)
        if current and n + k > target_tokens:
            segments.append(current)
            current, n = unit, k
        else:
            current, n = current + unit, n + k
    if current:
        segments.append(current)
    return segments


def format_prompt(question: str, context: str | Sequence[str], encode: Encode | None = None,
                  system_prompt: str = SYSTEM_PROMPT, instructions: str = INSTRUCTIONS,
                  frame: tuple[str, str] = ("", "")):
    """(prompt, spans): the prompt as token ids (text without `encode`) and each Magic Chunk's
    span [start, end) in tokens (characters). `context` is one text to segment, or the
    chunks themselves. Each piece is encoded on its own, as the reference does. `frame`: text
    before and after the whole prompt (a chat model's turn around it as the user message)."""
    chunks = segment_context(context, encode) if isinstance(context, str) else list(context)
    # No system line when a chat model's own system message carries it (system_prompt="").
    pieces = [frame[0] + (f"{system_prompt.strip()}\n\n" if system_prompt.strip() else "")]
    for k, chunk in enumerate(chunks, start=1):
        pieces[-1] += f"Magic Chunk {k}:\n"
        pieces += [chunk, "\n\n"]
    pieces[-1] += (f"Question:\n{question.strip()}\n\nInstructions:\n{instructions.strip()}"
                   "\n\nResponse:" + frame[1])
    prompt: list[int] | str = [] if encode is not None else ""
    spans = []
    for i, piece in enumerate(pieces):
        start = len(prompt)
        prompt += list(encode(piece)) if encode is not None else piece
        if i % 2:
            spans.append((start, len(prompt)))
    return prompt, spans


def paper_prompt(encode: Encode, question: str, context: str | Sequence[str], *,
                 block_size: int = BLOCK_SIZE, bos_id: int | None = None,
                 system_prompt: str = SYSTEM_PROMPT, instructions: str = INSTRUCTIONS,
                 frame: tuple[str, str] = ("", ""), rules: str = "reference") -> DAPrompt:
    """The reference's plain-text form of the paper's prompt as a DAPrompt: token ids (a BOS
    first when given) and a Layout of unpadded chunk spans, its tags read by `rules` (the
    reference's stack by default). `encode` must not add special tokens; `frame` as in
    format_prompt. The paper's own rendering, a tool-call transcript through the model's chat
    template, is core/paper_tools.py."""
    chunks = segment_context(context, encode) if isinstance(context, str) else list(context)
    if not chunks:
        raise ValueError("the paper's prompt needs at least one document (Magic Chunk)")
    ids, spans = format_prompt(question, chunks, encode, system_prompt, instructions, frame)
    shift = 0 if bos_id is None else 1
    ids = ([bos_id] if bos_id is not None else []) + ids
    empty = [k for k, (a, b) in enumerate(spans, start=1) if a == b]
    if empty:
        raise ValueError(f"Magic Chunk {empty[0]} is empty: give every chunk some text")
    layout = Layout.from_spans(block_size, [(a + shift, b + shift) for a, b in spans], len(ids),
                               rules=rules)
    return DAPrompt(layout, ids, system_prompt, tuple(chunks), question,
                    {"protocol": "paper", "form": "plain", "rules": rules})
