"""The paper's prompt as the paper renders it (Ho et al. 2026, arXiv 2609.02737, §2.1-2.2 and
Appendix F): the context as a simulated tool-use transcript through the model's own chat
template and tool-declaration format.

    system     "You are a helpful assistant."            the attention sink's content (§B)
    (tools)    get_magic_chunk, declared wherever the template declares tools
    user       "Retrieve the document one magic chunk at a time ..."     the bootstrap turn
    assistant  a get_magic_chunk call {"magic_chunk": k}         } once per segment k = 1..N
    tool       "Magic Chunk k:\\n" + segment k                     } (no tool is ever run)
    user       "Question:\\n..." + "Instructions:\\n" + the DA instructions (core/paper.py)
    assistant  (the generation prompt: the model's reply starts here)

Chunk Ck is the tokens of segment k's text inside its tool response: its heading, the turn
delimiters, the tool calls, the system turn and the last user turn stay visible in every mode
(the scaffold, §B: the first 16 tokens are the sink, the question and instructions the tail, then
the response). The spans come from the rendered text, never from guessing: the transcript is
rendered twice, once with letter-only markers around each segment, and the marked render less
its markers must equal the plain one (a template that escapes its tool content, e.g. with
`| tojson`, escapes the markers' letters to themselves); the char spans between the markers are
then mapped to tokens through the tokenizer's offset mapping of the whole rendered text, a token
that holds any of a segment's characters belonging to its chunk (rounded outward, as blocks are).
Where no offsets are to be had (a server's tokenizer, client/prompt.py), the text is encoded
piece by piece between the span edges instead, as the reference encodes its plain prompt.

`render` is any function (messages, tools or None) -> the rendered text with the generation
prompt; `hf_render` makes one from a transformers tokenizer (its own chat template, or another
given) with the paper's thinking mode off (§4: "We disable thinking mode for all models").
Pure: no transformers import here (core stays below the rooms that load models).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from da_lab.core.layout import BLOCK_SIZE, DAPrompt, Layout
from da_lab.core.paper import INSTRUCTIONS, SYSTEM_PROMPT, paper_prompt, segment_context

TOOL_NAME = "get_magic_chunk"
TOOL = {"type": "function", "function": {
    "name": TOOL_NAME,
    "description": ("Retrieve one magic chunk of the document. Magic chunks are arbitrary "
                    "retrieval units: they do not align with the document's own sections or "
                    "chapters."),
    "parameters": {"type": "object", "properties": {"magic_chunk": {
        "type": "integer", "description": "The magic chunk's number, from 1."}},
        "required": ["magic_chunk"]}}}
BOOTSTRAP = ("Retrieve the document one magic chunk at a time with get_magic_chunk, then answer "
             "my question about it.")
HEADING = "Magic Chunk {k}:\n"
SINK_TOKENS = 16                # §B: the prompt's first 16 tokens are always attended
FORMS = ("tools", "plain")
# Around each segment in the marked render: letters only, so no template escapes them.
_MARKS = ("QQDAMAGICCHUNKBEGINQQ", "QQDAMAGICCHUNKENDQQ")

Render = Callable[[list, "list | None"], str]
Offsets = Callable[[str], "tuple[list[int], list[tuple[int, int]]]"]


def messages(question: str, chunks: Sequence[str], *, system_prompt: str = SYSTEM_PROMPT,
             instructions: str = INSTRUCTIONS, marks: tuple[str, str] = ("", "")) -> list[dict]:
    """The transcript's chat messages (OpenAI form, tool-call arguments as a dict)."""
    out = [{"role": "system", "content": system_prompt.strip()},
           {"role": "user", "content": BOOTSTRAP}]
    for k, chunk in enumerate(chunks, start=1):
        call = f"call_{k}"
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": TOOL_NAME, "arguments": {"magic_chunk": k}}}]})
        out.append({"role": "tool", "tool_call_id": call, "name": TOOL_NAME,
                    "content": HEADING.format(k=k) + marks[0] + chunk + marks[1]})
    out.append({"role": "user", "content": f"Question:\n{question.strip()}\n\n"
                                           f"Instructions:\n{instructions.strip()}"})
    return out


def tool_support(render: Render) -> str | None:
    """None when `render`'s template declares tools and renders the calls and the tool
    responses; otherwise why not, in words."""
    probe = messages("Which?", ["QQPROBESEGMENTQQ"])
    # A call's argument nothing else in the probe holds: is the call itself rendered?
    probe[2]["tool_calls"][0]["function"]["arguments"] = {"magic_chunk": 7919}
    try:
        with_tools = render(probe, [TOOL])
    except Exception as e:  # noqa: BLE001 - a template that can't render tools says why
        return f"rendering a tool transcript failed ({type(e).__name__}: {e})"
    try:
        without = render(probe, None)
    except Exception:  # noqa: BLE001 - needing the tools to render is support enough
        without = None
    if with_tools == without:
        return "its chat template ignores the tools it is given (no tool declaration)"
    if with_tools.count("QQPROBESEGMENTQQ") != 1:
        return "its chat template does not render a tool response's content once"
    if "7919" not in with_tools:
        return "its chat template does not render the assistant's tool calls"
    return None


def locate(render: Render, question: str, chunks: Sequence[str], *,
           system_prompt: str = SYSTEM_PROMPT,
           instructions: str = INSTRUCTIONS) -> tuple[str, list[tuple[int, int]]]:
    """(the rendered transcript, each segment's char span [start, end) in it)."""
    texts = [question, system_prompt, instructions, *chunks]
    if any(m in t for m in _MARKS for t in texts):
        raise ValueError("the prompt's text holds the renderer's own marker; change the text")
    kw = {"system_prompt": system_prompt, "instructions": instructions}
    plain = render(messages(question, chunks, **kw), [TOOL])
    marked = render(messages(question, chunks, marks=_MARKS, **kw), [TOOL])
    begin, end = _MARKS
    if marked.count(begin) != len(chunks) or marked.count(end) != len(chunks):
        raise ValueError(f"the chat template rendered {marked.count(begin)} of {len(chunks)} "
                         "tool responses: it must render each magic chunk once")
    if marked.replace(begin, "").replace(end, "") != plain:
        raise ValueError("the chat template renders a tool response differently depending on "
                         "its text (it trims or rewrites it), so the chunks' spans can't be "
                         "read off the render: use form='plain'")
    spans, pos, removed = [], 0, 0
    for _ in chunks:
        a = marked.index(begin, pos)
        b = marked.index(end, a)
        if begin in marked[a + len(begin):b]:
            raise ValueError("the chat template reorders the tool responses")
        start = a - removed
        removed += len(begin)
        spans.append((start, b - removed))
        removed += len(end)
        pos = b + len(end)
    return plain, spans


def token_spans(text: str, char_spans: Sequence[tuple[int, int]], *,
                offsets: Offsets | None = None,
                encode: Callable[[str], list[int]] | None = None):
    """(token ids of `text`, each char span as a token span [start, end)). With `offsets` the
    whole text is tokenized once and a token holding any char of a span belongs to it; with
    only `encode`, the pieces between span edges are encoded on their own."""
    if offsets is not None:
        ids, offs = offsets(text)
        starts = [a for a, _ in offs]
        ends = [b for _, b in offs]
        if starts != sorted(starts) or ends != sorted(ends):
            raise ValueError("the tokenizer's offset mapping is not in order")
        return list(ids), [(bisect.bisect_right(ends, a), bisect.bisect_left(starts, b))
                           for a, b in char_spans]
    if encode is None:
        raise ValueError("token_spans needs a tokenizer's offsets or its encode")
    ids: list[int] = []
    spans, last = [], 0
    for a, b in char_spans:
        ids += encode(text[last:a])
        start = len(ids)
        ids += encode(text[a:b])
        spans.append((start, len(ids)))
        last = b
    return ids + list(encode(text[last:])), spans


def tool_prompt(render: Render, question: str, context: str | Sequence[str], *,
                offsets: Offsets | None = None, encode: Callable[[str], list[int]] | None = None,
                block_size: int = BLOCK_SIZE, rules: str = "paper",
                system_prompt: str = SYSTEM_PROMPT, instructions: str = INSTRUCTIONS,
                sink_tokens: int = SINK_TOKENS) -> DAPrompt:
    """The paper's prompt as a DAPrompt: the rendered transcript's token ids and a span layout
    (read by the paper's rules unless `rules` says otherwise). `encode` (no special tokens)
    segments one long text into chunks by the paper's segmenter and, without `offsets`,
    tokenizes the pieces. Raises ValueError naming what is wrong (see `tool_support`)."""
    why = tool_support(render)
    if why is not None:
        raise ValueError(_no_tools(why))
    chunks = segment_context(context, encode) if isinstance(context, str) else list(context)
    if not chunks:
        raise ValueError("the paper's prompt needs at least one document (Magic Chunk)")
    text, chars = locate(render, question, chunks, system_prompt=system_prompt,
                         instructions=instructions)
    ids, spans = token_spans(text, chars, offsets=offsets, encode=encode)
    empty = [k for k, (a, b) in enumerate(spans, start=1) if a >= b]
    if empty:
        raise ValueError(f"Magic Chunk {empty[0]} is empty: give every chunk some text")
    if spans[0][0] < sink_tokens:
        raise ValueError(f"Magic Chunk 1 starts at token {spans[0][0]}, inside the attention "
                         f"sink (the prompt's first {sink_tokens} tokens, §B): start the "
                         "prompt with a longer system prompt")
    layout = Layout.from_spans(block_size, spans, len(ids), rules=rules)
    return DAPrompt(layout, ids, system_prompt, tuple(chunks), question,
                    {"protocol": "paper", "form": "tools", "rules": rules, "text": text,
                     "char_spans": chars, "sink_tokens": sink_tokens})


def _no_tools(why: str) -> str:
    return (f"the paper's tool-call transcript (form='tools') needs a chat template that "
            f"declares tools, and this one does not: {why}. Use form='plain', the reference's "
            "plain-text \"Magic Chunk N:\" prompt")


def choose_form(render: Render | None, form: str | None) -> str:
    """"tools" or "plain": `form` when given (checked), else "tools" exactly when the chat
    template declares tools (`tool_support`), so that a user with the paper's model and its
    template gets the paper's protocol by default."""
    if form not in (None, *FORMS):
        raise ValueError(f"form must be one of {', '.join(FORMS)} (or None: tools when the "
                         f"chat template declares them), not {form!r}")
    if form == "plain":
        return form
    why = "the model has no chat template" if render is None else tool_support(render)
    if why is None:
        return "tools"
    if form == "tools":
        raise ValueError(_no_tools(why))
    return "plain"


def hf_render(tokenizer, chat_template: str | None = None, **template_kwargs) -> Render | None:
    """A `render` through a transformers tokenizer's apply_chat_template (its own template, or
    `chat_template`); None when it has no template at all."""
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        return None
    kw = {"enable_thinking": False, **template_kwargs}

    def render(msgs: list, tools: list | None) -> str:
        return tokenizer.apply_chat_template(msgs, tools=tools, chat_template=chat_template,
                                             tokenize=False, add_generation_prompt=True, **kw)

    return render


def hf_offsets(tokenizer) -> Offsets | None:
    """A fast tokenizer's (ids, char offsets) of a text, no special tokens added; None for a
    tokenizer that has no offset mapping."""
    if not getattr(tokenizer, "is_fast", False):
        return None

    def offsets(text: str):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    return offsets


def paper_prompt_for(tokenizer, question: str, context: str | Sequence[str], *,
                     form: str | None = None, block_size: int = BLOCK_SIZE,
                     chat_template: str | None = None, rules: str | None = None,
                     system_prompt: str = SYSTEM_PROMPT, instructions: str = INSTRUCTIONS,
                     **template_kwargs) -> DAPrompt:
    """The paper's prompt for a transformers tokenizer, in `form` (choose_form: the tool
    transcript when the chat template declares tools, else the reference's plain text, after
    the tokenizer's BOS). `rules` default to the form's: "paper" for the paper's transcript,
    "reference" for the reference's plain text."""
    def encode(s: str) -> list[int]:
        return list(tokenizer.encode(s, add_special_tokens=False))

    render = hf_render(tokenizer, chat_template, **template_kwargs)
    if choose_form(render, form) == "plain":
        return paper_prompt(encode, question, context, block_size=block_size,
                            bos_id=getattr(tokenizer, "bos_token_id", None),
                            system_prompt=system_prompt, instructions=instructions,
                            rules=rules or "reference")
    return tool_prompt(render, question, context, offsets=hf_offsets(tokenizer), encode=encode,
                       block_size=block_size, rules=rules or "paper",
                       system_prompt=system_prompt, instructions=instructions)
