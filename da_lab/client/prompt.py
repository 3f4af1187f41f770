"""A DA prompt built with a server's own tokenizer and chat template (vLLM's /tokenize and
/detokenize routes), so the client needs neither the model's files nor transformers.

The card's protocol, in the formats the lab's trained models read:
  chat  (the model has a chat template, e.g. SmolLM2-DA): a system message saying how to tag,
        then the user message "Here are the documents.\\n" + chunks ("Document Ck: ...") +
        "Question: ...", as da_lab.training.data.nl_task builds its samples. The template's text
        before and after the user message is found by rendering it around a marker.
  plain (no chat template, e.g. the embedded da-tiny-tags): the scaffold head, the chunks and
        " Question: ... Answer:", as da_lab.training.data.task builds them, after a BOS token.
Each section is tokenized on its own and padded to whole KV blocks with the tokenizer's "\\n"
(core/layout.build_prompt), so chunk boundaries fall exactly on block boundaries; the client
sends the token ids, never the text, so the server can't re-tokenize across them.

The paper's protocol (protocol="paper"), in one of two forms (`form`):
  tools  the paper's own rendering (§2.2): the context as a get_magic_chunk tool-call
         transcript through the server's chat template (core/paper_tools.py), read by the
         paper's rules; the default when that template declares tools (a probe render says)
  plain  the reference's "Magic Chunk k:" text, in the chat frame when there is a template
         (the system prompt as the system message), else after a BOS; read by the reference's
         stack; the default otherwise
Spans are exact: the server renders the transcript (with and without markers around the chunks),
and the pieces between chunk edges are tokenized on their own.
"""

from __future__ import annotations

import json

from da_lab.client.transport import ServerError, Transport, message
from da_lab.core.layout import DAPrompt, build_prompt

MARKER = "DAUSERMARKERX"        # letters only: a pre-tokenizer never merges it with neighbours


def _defaults() -> tuple[str, str, str]:
    """(plain head, chat system prompt, chat intro) of the lab's trained models."""
    from da_lab.core.prompts import HEAD, INTRO, SYSTEM

    return HEAD, SYSTEM, INTRO


def _ids(doc, path: str) -> list[int]:
    ids = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                            and t >= 0 for t in ids):
        raise ServerError(f"{path}: no token ids in the answer (expected "
                          '{"tokens": [ids...]}); not a vLLM server\'s /tokenize')
    return ids


class ServerTokenizer:
    """Tokenize / detokenize / render chat through a vLLM server (the client's Transport:
    its key, time and size limits)."""

    def __init__(self, net: Transport, model: str, chat_template: str | None = None) -> None:
        self.net, self.model = net, model
        self.chat_template = chat_template   # for a model without one (server must trust it)

    def _post(self, path: str, body: dict) -> dict:
        return self.net.json("POST", path, dict(body, model=self.model))[1]

    def encode(self, text: str, special: bool = False) -> list[int]:
        return _ids(self._post("/tokenize", {"prompt": text, "add_special_tokens": special}),
                    "/tokenize")

    def decode(self, ids: list[int]) -> str:
        doc = self._post("/detokenize", {"tokens": ids})
        text = doc.get("prompt") if isinstance(doc, dict) else None
        if not isinstance(text, str):
            raise ServerError('/detokenize: no text in the answer (expected {"prompt": ...})')
        return text

    def render_chat(self, messages: list, tools: list | None) -> str:
        """The server's chat template applied to `messages` (and `tools`), with the generation
        prompt and thinking off, as text (core/paper_tools.Render)."""
        msgs = [dict(m, tool_calls=[_wire_call(c) for c in m["tool_calls"]])
                if m.get("tool_calls") else m for m in messages]
        body = {"model": self.model, "messages": msgs, "add_generation_prompt": True,
                "chat_template_kwargs": {"enable_thinking": False}}
        if tools:
            body["tools"] = tools
        if self.chat_template is not None:
            body["chat_template"] = self.chat_template
        return self.decode(_ids(self.net.json("POST", "/tokenize", body)[1], "/tokenize (chat)"))

    def chat_frame(self, system: str | None) -> tuple[str, str] | None:
        """(text before, text after) the user message in the rendered chat prompt, or None when
        the model has no chat template."""
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": MARKER}]
        body = {"model": self.model, "messages": msgs, "add_generation_prompt": True}
        if self.chat_template is not None:
            body["chat_template"] = self.chat_template
        status, data = self.net.call("POST", "/tokenize", body)
        if status == 400 and "chat template" in message(status, data):
            return None
        if status != 200:
            raise ServerError(f"/tokenize (chat): HTTP {status}: {message(status, data)}")
        import json

        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            raise ServerError("/tokenize (chat): the answer is not JSON") from None
        text = self.decode(_ids(doc, "/tokenize (chat)"))
        if text.count(MARKER) != 1:
            raise ValueError("could not find the user message in the model's chat template")
        before, after = text.split(MARKER)
        return before, after


def _wire_call(call: dict) -> dict:
    """A tool call in the OpenAI wire form: its arguments as a JSON string (vLLM turns them
    back into the dict a chat template reads)."""
    f = call["function"]
    args = f["arguments"] if isinstance(f["arguments"], str) else json.dumps(f["arguments"])
    return dict(call, function=dict(f, arguments=args))


def build(tok: ServerTokenizer, chunks: list[str], question: str, *, block_size: int,
          system: str | None = None, protocol: str = "card", form: str | None = None,
          rules: str | None = None) -> DAPrompt:
    """The DA prompt for `chunks` and `question` in the model's format (see the docstring).
    `form` and `rules`: the paper's protocol only (None: the tool transcript when the server's
    chat template declares tools, else the plain text; each form's own rules)."""
    if not chunks:
        raise ValueError("a DA prompt needs at least one chunk")
    if protocol == "paper":
        return _paper(tok, chunks, question, block_size, system, form, rules)
    if form is not None or rules is not None:
        raise ValueError("form and rules belong to the paper's protocol (protocol='paper')")
    if protocol != "card":
        raise ValueError(f"protocol must be card or paper, not {protocol!r}")
    head_plain, system_default, intro = _defaults()
    frame = tok.chat_frame(system if system is not None else system_default)
    filler = tok.encode("\n")
    if len(filler) != 1:
        raise ValueError("the tokenizer has no single-token newline to pad chunks with")
    if frame is not None:
        before, after = frame
        head, tail, bos = before + intro, "Question: " + question + after, None
        # Chunks read "Document Ck: ..." as in training: the tag names what the model saw.
        chunks = [c if c.startswith(f"Document C{i}:") else f"Document C{i}: {c.strip()}\n"
                  for i, c in enumerate(chunks, start=1)]
    else:
        head, tail = (system if system is not None else head_plain), (
            " Question: " + question + " Answer:")
        with_bos = tok.encode("", special=True)
        bos = with_bos[0] if len(with_bos) == 1 else None
    return build_prompt(tok.encode, head, chunks, tail, filler_id=filler[0], bos_id=bos,
                        block_size=block_size)


def _paper(tok: ServerTokenizer, chunks: list[str], question: str, block_size: int,
           system: str | None, form: str | None, rules: str | None) -> DAPrompt:
    from da_lab.core import paper, paper_tools

    system = system if system is not None else paper.SYSTEM_PROMPT
    frame = tok.chat_frame(system)
    if paper_tools.choose_form(tok.render_chat if frame is not None else None, form) == "tools":
        return paper_tools.tool_prompt(tok.render_chat, question, chunks, encode=tok.encode,
                                       block_size=block_size, rules=rules or "paper",
                                       system_prompt=system)
    rules = rules or "reference"
    if frame is not None:           # the chat model's system message carries the system prompt
        return paper.paper_prompt(tok.encode, question, chunks, block_size=block_size,
                                  system_prompt="", frame=frame, rules=rules)
    with_bos = tok.encode("", special=True)
    return paper.paper_prompt(tok.encode, question, chunks, block_size=block_size,
                              bos_id=with_bos[0] if len(with_bos) == 1 else None,
                              system_prompt=system, rules=rules)
