"""The natural-language DA task's prompt format and answer rule, for SmolLM2-135M-Instruct.

A prompt is SmolLM2's own chat template: a system message saying how to tag, then the user
message "Here are the documents." + one chunk per document ("Document Ck: <text>", padded to
whole 32-token blocks) + "Question: ..."; the reply the model writes is the tag, then one
sentence:

    <|im_start|>system ...how to tag...<|im_end|> <|im_start|>user Here are the documents.
    Document C1: Harrow Bridge\nThe bridge spans 412 m. ...      padded to whole blocks
    ...
    Question: How long is Harrow Bridge?<|im_end|> <|im_start|>assistant
    <focus C1> Harrow Bridge is 412 m long.<|im_end|>

`user_prompt` builds it (the one function that does: nl_gen's training samples, notebook 06
and `da-lab eval --prompts` use it); `nl_gen` generates the samples.

Answers are checked by `answer_correct`: the reply's first sentence, normalised (`normalise`),
must mention exactly the expected values, in order, among the prompt's candidate values (the
asked attribute's values in every document, or a prompt file's `answer` + `wrong`); an exact
match on the values, so prose around them is free and the base model's own wording counts too.
A value word inside a phrase the reply restates from the question is not a mention ("textiles"
in "The sector of Kovac Textiles is telecoms."); `eval_rescore` applies a changed rule to a
committed eval document.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from da_lab.core.layout import BLOCK_SIZE, DAPrompt, build_prompt
from da_lab.core.prompts import INTRO, SYSTEM
from da_lab.training.data.task import Sample

__all__ = ["ChatTokens", "tokens", "clean_document", "user_prompt", "plain_prompt",
           "normalise", "answer_values", "answer_correct", "holders", "foreign_words"]

MAX_PROMPT = 7680                # leaves room for the reply in 8,192 positions
SENTINEL = "\x00DA-USER\x00"


class ChatTokens:
    """A chat model's tokenizer and chat template, read from a model folder (no transformers):
    SmolLM2's (<|im_start|> turns) or Gemma 3's (<start_of_turn> turns, <bos> first)."""

    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer

        folder = Path(folder)
        self.folder = folder
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        cfg = json.loads((folder / "tokenizer_config.json").read_text())
        self.template = cfg["chat_template"]
        self.eos_id = self.tok.token_to_id(cfg["eos_token"])
        self.pad_id = self.tok.token_to_id(cfg["pad_token"])
        # Both templates write their start themselves (<|im_start|>; <bos><start_of_turn>):
        # prompts are encoded without special tokens, and no BOS is added apart.
        self.bos_id = None
        # Room for a reply in the model's positions (SmolLM2: 8,192 - 512 = MAX_PROMPT).
        self.max_prompt = int(cfg.get("model_max_length") or MAX_PROMPT + 512) - 512
        self.filler_id = self.encode("\n")[0]
        self._frames: dict = {}
        self._turn: tuple[str, str] | None = None

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The chat template, rendered as transformers renders it (sandboxed jinja2)."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise ValueError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        bos = self.tok.id_to_token(self.tok.token_to_id("<bos>")) if self.tok.token_to_id(
            "<bos>") is not None else ""
        return env.from_string(self.template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos)

    def frame(self, system: str | None) -> tuple[str, str]:
        """(text before, text after) the user message's content in a chat prompt."""
        if system in self._frames:
            return self._frames[system]
        msgs = ([{"role": "system", "content": system}] if system is not None else [])
        text = self.render(msgs + [{"role": "user", "content": SENTINEL}])
        before, after = text.split(SENTINEL)
        self._frames[system] = before, after
        return before, after

    def turn(self) -> tuple[str, str]:
        """(text after a reply's end-of-turn token and before the next user message, text
        after that message up to the next reply): a follow-up question's given frame.
        SmolLM2: ("\\n<|im_start|>user\\n", "<|im_end|>\\n<|im_start|>assistant\\n")."""
        if self._turn is None:
            a, b = SENTINEL + "A", SENTINEL + "B"
            text = self.render([{"role": "user", "content": "x"},
                                {"role": "assistant", "content": a},
                                {"role": "user", "content": b}])
            eos = self.tok.id_to_token(self.eos_id)
            between = text.split(a, 1)[1].split(b, 1)[0]
            if not between.startswith(eos):
                raise ValueError(f"{self.folder}: the chat template does not end a reply with "
                                 f"its eos token {eos!r}")
            self._turn = between[len(eos):], text.split(b, 1)[1]
        return self._turn


@lru_cache(maxsize=4)
def tokens(folder: str | None = None) -> ChatTokens:
    """A chat model's tokenizer (default: SmolLM2's, the base model's folder, built on first
    use)."""
    if folder is None:
        from da_lab.models.tiny import model_path

        folder = str(model_path("smollm2"))
    return ChatTokens(folder)


# ---------------------------------------------------------------------------------------------
# The prompt

def clean_document(text: str) -> str:
    """A document as the prompt holds it: runs of spaces made one, blank lines dropped, line
    breaks kept (a title on its own line stays on its own line)."""
    lines = (" ".join(line.split()) for line in str(text).splitlines())
    return "\n".join(line for line in lines if line)


def user_prompt(documents: list[str], question: str, tok: ChatTokens | None = None) -> DAPrompt:
    """The DA prompt for plain documents and a question: the chat frame with the DA system
    prompt, "Document Ck: <text>" per document (each padded to whole KV blocks), then
    "Question: ...". The one function that builds this prompt: training samples (nl_gen),
    notebook 06 (nl_demo) and `da-lab eval --prompts` (eval_prompts) all call it."""
    docs = [clean_document(d) for d in documents if d and str(d).strip()]
    if not docs:
        raise ValueError("give at least one document")
    q = " ".join(str(question or "").split())
    if not q:
        raise ValueError("give a question")
    tok = tok or tokens()
    before, after = tok.frame(SYSTEM)
    texts = [f"Document C{k}: {d}\n" for k, d in enumerate(docs, start=1)]
    prompt = build_prompt(tok.encode, before + INTRO, texts, "Question: " + q + after,
                          filler_id=tok.filler_id, bos_id=None, block_size=BLOCK_SIZE)
    _check_length(prompt, tok)
    return prompt


def _check_length(prompt: DAPrompt, tok: ChatTokens) -> None:
    if prompt.layout.prompt_len > tok.max_prompt:
        # (the model's positions less room for a reply)
        raise ValueError(f"the prompt is {prompt.layout.prompt_len} tokens; the model was "
                         f"trained on at most {tok.max_prompt}")


def paper_user_prompt(documents: list[str], question: str,
                      tok: ChatTokens | None = None) -> DAPrompt:
    """The paper's prompt (Ho et al. 2026, core/paper.py) in the chat frame: its system prompt
    as the system message; "Magic Chunk k:" sections of the documents, unpadded, the question
    and the paper's instructions as the user message."""
    from da_lab.core import paper

    docs = [clean_document(d) for d in documents if d and str(d).strip()]
    q = " ".join(str(question or "").split())
    if not docs or not q:
        raise ValueError("give at least one document" if not docs else "give a question")
    tok = tok or tokens()
    prompt = paper.paper_prompt(tok.encode, q, docs, block_size=BLOCK_SIZE, system_prompt="",
                                frame=tok.frame(paper.SYSTEM_PROMPT))
    _check_length(prompt, tok)
    return prompt


def plain_prompt(s: Sample, tok: ChatTokens | None = None) -> list[int]:
    """What a user would send without DA: the model's default system prompt, the documents
    unpadded, the question and "Answer in one sentence." (for the base model's all-blocks
    accuracy)."""
    tok = tok or tokens()
    content = (INTRO + "".join(s.prompt.chunks) + "\nQuestion: " + s.meta["question"]
               + "\nAnswer in one sentence.")
    return tok.encode(tok.render([{"role": "user", "content": content}]))


# ---------------------------------------------------------------------------------------------
# Answers

_TAG = re.compile(r"<\s*(?:focus|local|global)[^>]*>", re.IGNORECASE)


def normalise(text: str) -> str:
    """Lower case, no DA tags, no punctuation (thousands separators dropped), no articles,
    single spaces."""
    t = _TAG.sub(" ", text).lower()
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"[^\w\s]|_", " ", t)
    return " ".join(w for w in t.split() if w not in ("a", "an", "the"))


_ABBREV = re.compile(r"(?:^|\s)(?:Dr|Mr|Mrs|Ms|Prof|St|Mt|No|Jr|Sr|vs|approx|ca)\.$")


def _first_sentence(reply: str) -> str:
    """Up to the first full stop (or ! ?) followed by a space, or a line break; "Dr." and
    similar abbreviations do not end a sentence."""
    text = _TAG.sub(" ", re.split(r"<\|im_end\|>|<end_of_turn>", reply)[0]).strip()
    for m in re.finditer(r"(?<=[.!?])\s|\n", text):
        if m.group(0) == "\n" or not _ABBREV.search(text[: m.start()]):
            return text[: m.start()]
    return text


def holders(texts: list[str], values: list[str]) -> list[int]:
    """The documents (1-based) whose text holds any of the values (normalised, whole words)."""
    keys = [" " + normalise(v) + " " for v in values if normalise(v)]
    return [k for k, t in enumerate(texts, 1) if any(x in " " + normalise(t) + " "
                                                     for x in keys)]


# Words any answer may use that a prompt need not hold (function words, the reply's verbs).
PLAIN_WORDS = frozenset("""
a an the of in on at by for to from with and or but is are was were be been has have had it
its this that which who whom there their they he she his her as not no yes so than then also
about into over under per each every one two three i you we can do does did will would
""".split())


def _restated(norm: str, start: int, c: str, question: str, values: set[str]) -> bool:
    """Is the hit of c at `start` part of a phrase the reply restates from the question (a
    value word inside the entity's name: "textiles" in "Kovac Textiles"; the 5 of "25 divided
    by 5")? Such a phrase runs from the hit over function words to the first other word on one
    side, and the question holds it too. A value word ends the search: a list the question asks
    to reorder is not restated."""
    before, after = norm[:start].split(), norm[start + len(c):].split()
    for side, left in ((before[::-1], True), (after, False)):      # nearest word first
        k = next((k for k, w in enumerate(side) if w not in PLAIN_WORDS), None)
        if k is None or side[k] in values:
            continue
        span = side[:k + 1]
        phrase = " ".join(span[::-1] + [c]) if left else " ".join([c] + span)
        if f" {phrase} " in question:
            return True
    return False


def answer_values(reply: str, s: Sample) -> list[str]:
    """The values of the asked attribute that the reply's first sentence mentions, in order
    (whole words, normalised; a longer value wins over one inside it; a value word inside a
    phrase restated from the question, such as the entity's name, is not a mention)."""
    norm = " " + normalise(_first_sentence(reply)) + " "
    question = " " + normalise(s.meta.get("question") or "") + " "
    values = {w for c in s.meta["candidates"] for w in c.split()}
    hits = []
    for c in s.meta["candidates"]:
        for m in re.finditer(r"(?<= )" + re.escape(c) + r"(?= )", norm):
            if not _restated(norm, m.start(), c, question, values):
                hits.append((m.start(), -len(c), c))
    out, end = [], -1
    for start, neg, c in sorted(hits):
        if start >= end:
            out.append(c)
            end = start - neg
    return out


def answer_correct(reply: str, s: Sample) -> bool:
    """Exact match of the normalised answer values (see the module docstring)."""
    return answer_values(reply, s) == list(s.keys)


def foreign_words(answer: str, s: Sample) -> list[str]:
    """The words (3+ letters) of the answer's first sentence that are in neither the prompt's
    documents nor its question nor PLAIN_WORDS: words a reply borrowed from somewhere else (a
    training template's "inhabitants" in an answer about a recipe)."""
    def words(t: str) -> set[str]:
        return set(re.findall(r"[a-z]{3,}", t.lower()))

    def stem(w: str) -> str:          # "serves" / "serve", "opened" / "open": the same word
        return re.sub(r"(?:ing|ed|es|s|e)$", "", w) if len(w) > 4 else w

    have = words(" ".join(s.meta.get("documents") or s.prompt.chunks)) | words(
        s.meta["question"])
    stems = {stem(w) for w in have}
    return sorted(w for w in words(_first_sentence(answer)) - have - PLAIN_WORDS
                  if stem(w) not in stems)
