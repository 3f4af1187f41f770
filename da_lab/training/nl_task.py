"""A natural-language retrieval task in the DA layout, for SmolLM2-135M-Instruct.

One sample is a chat prompt (SmolLM2's own chat template) whose user message holds documents
C1..Cn, prose paragraphs about people (birth year and city, job, books) and towns (founding
year, inhabitants, river, bridges), then a question; and the reply the model should write:

    <|im_start|>system ...how to tag...<|im_end|> <|im_start|>user Here are the documents.
    Document C1: Ilse Brandt. Ilse Brandt was born in 1962. ...   padded to whole 32-token blocks
    ...                                                    8..32 chunks, ~1k..7k tokens
    Question: In which year was Mara Olsen born?<|im_end|> <|im_start|>assistant
    <focus C7> Mara Olsen was born in 1987.<|im_end|>       the target reply

    single (70%)  one entity's attribute              <focus C7> Mara Olsen was born in 1987.
    multi  (15%)  the same attribute of two entities  <focus C2,C9> A ..., and B ....
    local  (15%)  needs no document (repeat a name, add two numbers)  <local> 3 plus 4 is 7.

Near-duplicate distractors: each entity asked about has 1-3 others in other chunks sharing its
first name or surname (towns: its stem, "Bramwick" / "Bramford") whose value of the asked
attribute is close but different; no other entity in the prompt shares that value, so reading
the wrong chunk gives a wrong answer.

Determinism and held-out: sample i of stream s under seed k comes from PCG64 seeded with
SeedSequence([k, s, i]) (`task.rng_for`); stream HELDOUT also draws its entity names from the
held-out third of the name pools (`nl_words.split`), never seen in training.

Answers are checked by `answer_correct`: the reply's first sentence, normalised (`normalise`),
must mention exactly the expected values, in order, among all values of the asked attribute in
the prompt (an exact match on the answer values; prose around them is free, so the base model's
own wording counts too).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from da_lab.core.layout import BLOCK_SIZE, build_prompt
from da_lab.core.prompts import INTRO, SYSTEM  # noqa: F401 - re-exported
from da_lab.core.tags import Directive, Mode, tag_text
from da_lab.training import nl_words as W
from da_lab.training.task import HELDOUT, TRAIN, Sample, rng_for

__all__ = ["TRAIN", "HELDOUT", "EVAL_SEED", "ChatTokens", "tokens", "make_sample", "sample",
           "held_out", "plain_prompt", "normalise", "answer_values", "answer_correct"]

EVAL_SEED = 7_100_001
P_LOCAL, P_MULTI = 0.15, 0.15
CHUNKS = (8, 32)                 # chunks per prompt (inclusive)
CONTEXT = (1024, 7168)           # target prompt tokens (drawn uniformly)
BLOCKS_PER_CHUNK = (2, 7)
MAX_PROMPT = 7680                # leaves room for the reply in 8,192 positions

SENTINEL = "\x00DA-USER\x00"


class ChatTokens:
    """SmolLM2's tokenizer and chat template, read from a model folder (no transformers)."""

    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer

        folder = Path(folder)
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        cfg = json.loads((folder / "tokenizer_config.json").read_text())
        self.template = cfg["chat_template"]
        self.eos_id = self.tok.token_to_id(cfg["eos_token"])
        self.pad_id = self.tok.token_to_id(cfg["pad_token"])
        self.bos_id = None                      # SmolLM2's template starts with <|im_start|>
        self.filler_id = self.encode("\n")[0]
        self._frames: dict = {}

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The chat template, rendered as transformers renders it (sandboxed jinja2)."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(self.template).render(
            messages=messages, add_generation_prompt=add_generation_prompt)

    def frame(self, system: str | None) -> tuple[str, str]:
        """(text before, text after) the user message's content in a chat prompt."""
        if system in self._frames:
            return self._frames[system]
        msgs = ([{"role": "system", "content": system}] if system is not None else [])
        text = self.render(msgs + [{"role": "user", "content": SENTINEL}])
        before, after = text.split(SENTINEL)
        self._frames[system] = before, after
        return before, after


@lru_cache(maxsize=4)
def tokens(folder: str | None = None) -> ChatTokens:
    """SmolLM2's tokenizer (the base model's folder, built on first use)."""
    if folder is None:
        from da_lab.engine.models import model_path

        folder = str(model_path("smollm2"))
    return ChatTokens(folder)


# ---------------------------------------------------------------------------------------------
# Entities

@lru_cache(maxsize=2)
def _pools(heldout: bool) -> dict:
    return {"first": W.split(W.FIRST_NAMES, heldout), "last": W.split(W.SURNAMES, heldout),
            "stem": W.split(W.TOWN_STEMS, heldout)}


def _value(rng, attr: str, near: str | None = None) -> str:
    """A value of an attribute; with `near`, a different one close to it."""
    pools = {"city": W.CITIES, "job": W.JOBS, "river": W.RIVERS}
    spans = {"year": (1940, 2005, 4), "books": (15, 480, 20), "founded": (1100, 1950, 25),
             "population": (1200, 96000, 3000), "bridges": (2, 30, 3)}
    if attr in pools:
        pool = [v for v in pools[attr] if v != near]
        return pool[int(rng.integers(len(pool)))]
    lo, hi, d = spans[attr]
    if near is None:
        return str(int(rng.integers(lo, hi)))
    step = int(rng.integers(1, d + 1)) * (1 if rng.random() < 0.5 else -1)
    v = int(near) + step
    return str(v if lo <= v < hi else int(near) - step)


def _name(rng, kind: str, pools: dict, like: str | None = None) -> str:
    """A random name; with `like`, a near duplicate of it (a shared first name, surname or
    town stem)."""
    def pick(pool):
        return pool[int(rng.integers(len(pool)))]

    if kind == "town":
        if like is not None:
            stem = next(s for s in pools["stem"] if like.startswith(s))
            return stem + pick([x for x in W.TOWN_SUFFIXES if like != stem + x])
        return pick(pools["stem"]) + pick(W.TOWN_SUFFIXES)
    if like is None:
        return f"{pick(pools['first'])} {pick(pools['last'])}"
    first, last = like.split(" ")
    if rng.random() < 0.5:
        return f"{first} {pick([x for x in pools['last'] if x != last])}"
    return f"{pick([x for x in pools['first'] if x != first])} {last}"


def _entity(rng, kind: str, name: str) -> dict:
    attrs = [a for (k, a) in W.ATTRS if k == kind]
    return {"kind": kind, "name": name, "values": {a: _value(rng, a) for a in attrs}}


def _entities(rng, n: int, targets: int, kind: str | None, attr: str | None,
              pools: dict) -> list:
    """n entities with distinct names: `targets` of `kind` first, then 1-3 near duplicates of
    each (the value of `attr` close but different), then random ones. No entity outside the
    targets shares a target's value of `attr`."""
    ents, names = [], set()

    def add(k: str, like: str | None = None) -> dict | None:
        for _ in range(50):
            name = _name(rng, k, pools, like)
            if name not in names:
                names.add(name)
                ents.append(_entity(rng, k, name))
                return ents[-1]
        return None

    for _ in range(targets):
        add(kind)
    for t in list(ents):
        for _ in range(int(rng.integers(1, 4))):
            e = add(kind, like=t["name"])
            if e is not None:
                e["values"][attr] = _value(rng, attr, near=t["values"][attr])
    while len(ents) < n:
        add("person" if rng.random() < 0.6 else "town")
    ents = ents[:n]
    taken = {t["values"][attr] for t in ents[:targets]} if attr else set()
    for e in ents[targets:]:
        while e["kind"] == kind and e["values"][attr] in taken:
            e["values"][attr] = _value(rng, attr)
    return ents


def _paragraph(rng, ent: dict, label: int, cap: int, tok: ChatTokens) -> str:
    """A title, the entity's facts in shuffled order, and prose fillers inserted while the text
    stays within about `cap` tokens (counted sentence by sentence: the pre-tokenizer splits
    before a space, so the counts add up); the chunk is later padded to whole blocks."""
    n = ent["name"]
    facts = []
    for a, v in ent["values"].items():
        variants = W.ATTRS[(ent["kind"], a)][0]
        text = variants[int(rng.integers(len(variants)))]
        facts.append(text.format(n=n, v=v, art=W.article(v)))
    facts = [facts[i] for i in rng.permutation(len(facts))]
    fillers = W.PERSON_FILLERS if ent["kind"] == "person" else W.TOWN_FILLERS
    # A title (the entity's name right after the chunk's label), as documents have: the tag
    # is then a copy of the label before the name the question asks about.
    head = f"Document C{label}: {n}."
    used = len(tok.encode(head)) + 1 + sum(len(tok.encode(" " + f)) for f in facts)
    for i in rng.permutation(len(fillers)):
        text = fillers[i].format(n=n)
        cost = len(tok.encode(" " + text))
        if used + cost > cap:
            break
        used += cost
        pos = int(rng.integers(1, len(facts) + 1))
        facts.insert(pos, text)
    return head + " " + " ".join(facts) + "\n"


# ---------------------------------------------------------------------------------------------
# Questions and samples

def _question(rng, kind: str, ents: list, chunk_of: list, attr_key, pools: dict):
    """(question, reply sentence, directive, expected values, candidate values)."""
    if kind == "local":
        if rng.random() < 0.5:
            v = _name(rng, "person", pools)
            return (W.LOCAL_ECHO[0].format(v=v), W.LOCAL_ECHO[1].format(v=v),
                    Directive(Mode.LOCAL), [v], [v])
        x, y = (int(a) for a in rng.integers(2, 21, size=2))
        q, r = (t.format(x=x, y=y, v=x + y) for t in W.LOCAL_SUM)
        return q, r, Directive(Mode.LOCAL), [str(x + y)], [str(x + y)]
    ekind, attr = attr_key
    _, question, reply, plural = W.ATTRS[attr_key]
    t = ents[:2] if kind == "multi" else ents[:1]
    vals = [e["values"][attr] for e in t]
    clauses = [reply.format(n=e["name"], v=e["values"][attr], art=W.article(e["values"][attr]))
               for e in t]
    if kind == "multi":
        q = plural.format(a=t[0]["name"], b=t[1]["name"])
        r = clauses[0][:-1] + ", and " + clauses[1]
    else:
        q, r = question.format(n=t[0]["name"]), clauses[0]
    cands = sorted({e["values"][attr] for e in ents if e["kind"] == ekind})
    d = Directive(Mode.FOCUS, chunks=tuple(chunk_of[i] for i in range(len(t))))
    return q, r, d, vals, cands


def _size(rng, n_chunks, context) -> tuple[int, int]:
    """(chunks, token cap per chunk) for a drawn context length."""
    lo, hi = (n_chunks, n_chunks) if isinstance(n_chunks, int) else (n_chunks or CHUNKS)
    clo, chi = (context, context) if isinstance(context, int) else (context or CONTEXT)
    target = int(rng.integers(clo, chi + 1))
    b_lo, b_hi = BLOCKS_PER_CHUNK
    n_lo = max(lo, -(-target // (BLOCK_SIZE * b_hi)))
    n_hi = min(hi, max(n_lo, target // (BLOCK_SIZE * b_lo)))
    n = int(rng.integers(min(n_lo, hi), n_hi + 1))
    # ~128 tokens of scaffold, ~16 of padding per chunk on average.
    return n, max(48, (target - 128) // n - 16)


def make_sample(rng: np.random.Generator, *, heldout: bool = False, kind: str | None = None,
                n_chunks: int | tuple[int, int] | None = None,
                context: int | tuple[int, int] | None = None,
                tok: ChatTokens | None = None) -> Sample:
    """One sample from `rng`: `kind` forces single / multi / local (else drawn); n_chunks and
    context (target prompt tokens) are numbers or (lo, hi) ranges (defaults CHUNKS,
    CONTEXT); `heldout` draws entity names from the held-out pools."""
    tok = tok or tokens()
    pools = _pools(heldout)
    if kind is None:
        u = rng.random()
        kind = "local" if u < P_LOCAL else "multi" if u < P_LOCAL + P_MULTI else "single"
    if kind not in ("single", "multi", "local"):
        raise ValueError(f"unknown kind {kind!r}")
    n, cap = _size(rng, n_chunks, context)
    if kind == "multi" and n < 2:
        kind = "single"
    keys = list(W.ATTRS)
    attr_key = None if kind == "local" else keys[int(rng.integers(len(keys)))]
    targets = {"local": 0, "single": 1, "multi": 2}[kind]
    ents = _entities(rng, n, targets, attr_key and attr_key[0], attr_key and attr_key[1], pools)
    chunk_of = [int(c) + 1 for c in rng.permutation(n)]
    q, reply, directive, vals, cands = _question(rng, kind, ents, chunk_of, attr_key, pools)
    before, after = tok.frame(SYSTEM)
    order = sorted(range(n), key=lambda i: chunk_of[i])
    while True:
        texts = [_paragraph(rng, ents[i], chunk_of[i], cap, tok) for i in order]
        prompt = build_prompt(tok.encode, before + INTRO, texts, "Question: " + q + after,
                              filler_id=tok.filler_id, bos_id=None, block_size=BLOCK_SIZE)
        if prompt.layout.prompt_len <= MAX_PROMPT or cap <= 48:
            break
        cap = max(48, int(cap * 0.9))
    tag = tag_text(directive)
    tag_ids = tok.encode(tag)
    response = tag_ids + tok.encode(" " + reply) + [tok.eos_id]
    ekind_attr = attr_key or (None, None)
    holders = sorted(chunk_of[i] for i, e in enumerate(ents) if e["kind"] == ekind_attr[0]
                     and e["values"][ekind_attr[1]] in vals)
    meta = {"question": q, "attr": attr_key[1] if attr_key else ("echo" if "name" in q
                                                                 else "sum"),
            "values": vals, "candidates": [normalise(c) for c in cands], "n_chunks": n,
            "names": [e["name"] for e in ents], "targets": [e["name"] for e in ents[:targets]],
            "holders": holders, "heldout": heldout}
    return Sample(prompt, response, tag, directive, reply, kind, len(tag_ids) - 1,
                  tuple(normalise(v) for v in vals), meta)


def sample(seed: int, index: int, stream: int = TRAIN, **kw) -> Sample:
    """Sample `index` of a stream; stream HELDOUT also uses the held-out names."""
    return make_sample(rng_for(seed, stream, index), heldout=stream == HELDOUT, **kw)


def held_out(n: int, seed: int = EVAL_SEED, **kw) -> list[Sample]:
    return [sample(seed, i, HELDOUT, **kw) for i in range(n)]


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


def _first_sentence(reply: str) -> str:
    text = _TAG.sub(" ", reply.split("<|im_end|>")[0]).strip()
    return re.split(r"(?<=[.!?])\s|\n", text, maxsplit=1)[0]


def answer_values(reply: str, s: Sample) -> list[str]:
    """The values of the asked attribute that the reply's first sentence mentions, in order
    (whole words, normalised; a longer value wins over one inside it)."""
    norm = " " + normalise(_first_sentence(reply)) + " "
    hits = []
    for c in s.meta["candidates"]:
        for m in re.finditer(r"(?<= )" + re.escape(c) + r"(?= )", norm):
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
