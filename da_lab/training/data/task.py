"""A seeded synthetic task on which a model learns to write its own DA tags.

One sample is a DA prompt and the response a trained model should write::

    [<s>You are reading a document in chunks. ... ]       scaffold head, 1 block
    [ C1 water 82. C1 house 15. C1 days 7. C1 sun 40. ]    C1: 4 records, padded to 1 block
    ...                                                   C2..C12, 1 block each
     Question: value of days? Answer:                     the scaffold tail (the question)
    <focus C1> days 7</s>                                 the target response

Each record is "C<k> <key> <value>.": the key is one token of the lab's tokenizer
(da_lab/assets/tokenizer.json), a word from KEY_WORDS; the chunk id and the value (1..99) are one
token each. Every key appears once in a prompt. Near-duplicate distractors sit in other chunks:
keys spelled almost like a queried key (`day` for `days`, `men` for `man`, `father` for `mother`).

The response first names where to look, then answers (key and value), then ends with </s>:
    single (80%)  "value of days?"       -> "<focus C1> days 7"
    multi  (10%)  "values of days sea?"  -> "<focus C1,C9> days 7 sea 40"   (keys in chunk order)
    local  (10%)  "say 82."              -> "<local> 82"                    (needs no chunk)

Learnability: the chunk label sits right before each key and the value right after it, and
the answer repeats the key first, so the value is the classic induction copy ("days" seen
before "7": after "days" write "7") and the tag a copy of the token before the key asked.
A first version with two-token keys (word + number, distractors sharing one of the two) and
answers without the key did not learn at all in 6000 steps on an H200. With one question per
prompt the signal is two tokens per 430-token sample; training therefore also uses *drills*
(`turns` > 1): the response goes on with "<global>" (every block visible again), another
question (given, not learned), its tag and answer, several times, each turn under exactly the
mask the DA hook would apply. Evaluation only ever asks one question.

Prompts go through `da_lab.core.layout.build_prompt`, so chunks are whole KV blocks (32 tokens) and
the `Layout` travels to the DA hook as is. With 12 chunks a prompt is 422-427 tokens.

Determinism: sample i of stream s under seed k comes from numpy's PCG64 seeded with
SeedSequence([k, s, i]); training draws from stream TRAIN, held-out evaluation from HELDOUT, so
the two never share a random stream whatever the seeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from da_lab import ASSETS
from da_lab.core.layout import BLOCK_SIZE, DAPrompt, build_prompt
from da_lab.core.prompts import HEAD  # noqa: F401 - re-exported
from da_lab.core.tags import Directive, Mode, tag_text

TRAIN, HELDOUT = 0, 1          # random streams (see the module docstring)
EVAL_SEED = 7_000_001          # default held-out seed for `da-lab eval`

N_CHUNKS = 12
RECORDS_PER_CHUNK = 4
P_LOCAL = 0.10
P_MULTI = 0.10


# Keys: single tokens (with their leading space) of the shipped tokenizer, none of them a word
# of the scaffold or the question.
KEY_WORDS = tuple("""
water house sea sun city school food land earth paper room hand head eyes feet night light air
line page story picture mother father children boy boys men man world country home animals life
year years day days time times sound word words point top side form name number play study change
example thing things place part parts work people miles ways way kind end sentence answer white
second today others great small large old new young good best better big long little high hard
sure whole different important left right near far next last
""".split())
# Values: numbers that are one token with a leading space (" 7", " 47"; not 21, 31, ... 91).
NUMBERS = tuple([*range(1, 10), *(n for n in range(10, 100) if n % 10 != 1 or n == 11)])


def _edit_distance(a: str, b: str) -> int:
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, d[0] = d[:], i
        for j, cb in enumerate(b, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (ca != cb))
    return d[-1]


def _near(a: str, b: str) -> bool:
    """Spelled almost alike: within edit distance 2, or sharing a 3-letter prefix."""
    return a != b and (_edit_distance(a, b) <= 2 or (len(a) >= 4 and len(b) >= 4
                                                     and a[:3] == b[:3]))


# Only keys that have a near duplicate among the keys, so every question has distractors.
while True:
    _kept = tuple(w for w in KEY_WORDS if any(_near(w, u) for u in KEY_WORDS))
    if _kept == KEY_WORDS:
        break
    KEY_WORDS = _kept
NEAR = tuple(tuple(j for j, u in enumerate(KEY_WORDS) if _near(w, u)) for w in KEY_WORDS)


@dataclass(frozen=True)
class Sample:
    prompt: DAPrompt
    response_ids: list[int]        # tag + answer + </s>: what the model should write
    tag: str                       # "<focus C3>", "<focus C3,C9>", "<local>"
    directive: Directive
    answer: str                    # "days 7", "days 7 sea 40", "82": the text after the tag
    kind: str                      # "single" | "multi" | "local"
    tag_close: int                 # output index of the token that closes the tag ('>')
    keys: tuple = ()               # queried ((key, chunk, value), ...)
    meta: dict = field(default_factory=dict)
    # Drill samples (training only) hold several question turns in the response; these say
    # which response tokens are the model's to write (the rest, the later questions, are
    # given) and every tag in it: ((output index of its '>', Directive), ...).
    loss_mask: tuple[bool, ...] = ()
    tags: tuple = ()

    @property
    def ids(self) -> list[int]:
        return self.prompt.token_ids + self.response_ids

    @property
    def all_tags(self) -> tuple:
        return self.tags or ((self.tag_close, self.directive),)

    @property
    def written(self) -> tuple[bool, ...]:
        return self.loss_mask or (True,) * len(self.response_ids)


class Tokens:
    """The shipped tokenizer, with a piece cache: the task's texts are single-spaced, and the
    byte-level pre-tokenizer never joins across a space, so encoding the space-led pieces one by
    one gives exactly `Tokenizer.encode` (a test checks it) at a fraction of the cost."""

    def __init__(self, path: str | Path | None = None) -> None:
        from tokenizers import Tokenizer

        if path is None:
            path = ASSETS / "tokenizer.json"
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        self.tok = Tokenizer.from_file(str(path))
        self.bos_id = self.tok.token_to_id("<s>")
        self.eos_id = self.tok.token_to_id("</s>")
        self.pad_id = self.tok.token_to_id("<pad>")
        self.filler_id = self.encode_exact("\n")[0]
        self._piece = lru_cache(maxsize=65536)(self.encode_exact)

    def encode_exact(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in re.split(r"(?= )", text):
            if piece:
                out += self._piece(piece)
        return out

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)


@lru_cache(maxsize=4)
def tokens(path: str | None = None) -> Tokens:
    return Tokens(path)


def rng_for(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream, index])))


def _record(chunk: int, key: str, value: int) -> str:
    return f" C{chunk} {key} {value}."


def _multi_chunks(rng: np.random.Generator, n_chunks: int, k_range: tuple[int, int]) -> list[int]:
    """k sorted distinct 0-based chunks, no three of them consecutive (so the canonical tag
    is a plain list, `<focus C2,C3,C7>`, never a range); k drawn from k_range."""
    lo, hi = k_range
    k_max = max(2, min(hi, (2 * n_chunks + 2) // 3))
    k = int(rng.integers(min(lo, k_max), k_max + 1))
    while True:
        cs = sorted(int(c) for c in rng.choice(n_chunks, size=k, replace=False))
        if not any(cs[i + 2] == cs[i] + 2 for i in range(len(cs) - 2)):
            return cs


def _place_distractors(rng: np.random.Generator, keys: list[int], chunk_of: list[int],
                       q: list[int]) -> None:
    """Near-duplicate distractors: up to 2-4 keys spelled like each queried key, moved into
    records of other chunks (swapping keys keeps every key unique). Edits `keys` in place."""
    n_rec = len(keys)
    slot = {k: i for i, k in enumerate(keys)}
    fixed = set(q)
    for r in q:
        near = [int(j) for j in rng.permutation(NEAR[keys[r]])]
        want = int(rng.integers(2, 5))
        for j in near:
            if want == 0:
                break
            others = [i for i in range(n_rec)
                      if chunk_of[i] != chunk_of[r] and i not in fixed]
            if not others:
                break
            i = others[int(rng.integers(len(others)))]
            if j in slot:                       # already in the prompt: move it to record i
                if slot[j] in fixed:
                    continue
                a = slot[j]
                keys[a], keys[i] = keys[i], keys[a]
                slot[keys[a]], slot[keys[i]] = a, i
            else:                               # not in the prompt: it replaces record i's key
                del slot[keys[i]]
                keys[i] = j
                slot[j] = i
            fixed.add(i)
            want -= 1


@dataclass
class _Records:
    """One prompt's records: key and value indices, and the 0-based chunk of each."""
    keys: list[int]
    values: list[int]
    chunk_of: list[int]

    def question(self, rng: np.random.Generator, kind: str,
                 q: list[int]) -> tuple[str, str, Directive]:
        """(question text, answer text, directive) of one turn."""
        keys, values, chunk_of = self.keys, self.values, self.chunk_of
        if kind == "single":
            r = q[0]
            return (f" Question: value of {KEY_WORDS[keys[r]]}? Answer:",
                    f"{KEY_WORDS[keys[r]]} {NUMBERS[values[r]]}",
                    Directive(Mode.FOCUS, chunks=(chunk_of[r] + 1,)))
        if kind == "multi":
            # Keys side by side, in chunk order: the i-th pair written is the i-th key asked.
            return (f" Question: values of {' '.join(KEY_WORDS[keys[r]] for r in q)}? Answer:",
                    " ".join(f"{KEY_WORDS[keys[r]]} {NUMBERS[values[r]]}" for r in q),
                    Directive(Mode.FOCUS, chunks=tuple(chunk_of[r] + 1 for r in q)))
        said = NUMBERS[int(rng.integers(len(NUMBERS)))]
        return f" Question: say {said}. Answer:", str(said), Directive(Mode.LOCAL)


def _drill_question(rng: np.random.Generator, recs: _Records, free: list[int], n_chunks: int,
                    p_local: float, p_multi: float,
                    multi_keys: tuple[int, int]) -> tuple[str, list[int]]:
    """The kind and records of a drill turn's question, among records not asked yet."""
    u = rng.random()
    k2 = "local" if u < p_local else "multi" if u < p_local + p_multi else "single"
    if k2 == "multi" and n_chunks >= 2:
        cs = _multi_chunks(rng, n_chunks, multi_keys)
        q2 = []
        for c in cs:
            opts = [i for i in free if recs.chunk_of[i] == c]
            if opts:
                q2.append(opts[int(rng.integers(len(opts)))])
        k2 = "multi" if len(q2) >= 2 else "single"
        return k2, (q2 if k2 == "multi" else q2[:1])
    if k2 != "local":
        return "single", [free[int(rng.integers(len(free)))]] if free else []
    return k2, []


def _drill(rng: np.random.Generator, recs: _Records, tok: Tokens, asked: set[int],
           response: list[int], loss: list[bool], tags: list, turns: int, n_chunks: int,
           p_local: float, p_multi: float, multi_keys: tuple[int, int]) -> None:
    """Drill turns: "<global>" opens every block again, then another question (given), its
    tag and answer (learned). Extends `response`, `loss` and `tags` in place."""
    n_rec = len(recs.keys)
    for _ in range(1, turns):
        free = [i for i in range(n_rec) if i not in asked]
        k2, q2 = _drill_question(rng, recs, free, n_chunks, p_local, p_multi, multi_keys)
        if k2 == "single" and not q2:
            break
        asked.update(q2)
        text, ans, d = recs.question(rng, k2, q2)
        given = tok.encode(" <global>" + text)
        tags.append((len(response) + len(tok.encode(" <global>")) - 1, Directive()))
        response += given
        loss += [False] * len(given)
        t_ids = tok.encode(tag_text(d))
        tags.append((len(response) + len(t_ids) - 1, d))
        a_ids = t_ids + tok.encode(" " + ans)
        response += a_ids
        loss += [True] * len(a_ids)


def pick_kind(rng: np.random.Generator, kind: str | None, n_chunks: int, p_local: float,
               p_multi: float) -> str:
    if kind is None:
        u = rng.random()
        kind = "local" if u < p_local else "multi" if u < p_local + p_multi else "single"
    if kind not in ("single", "multi", "local"):
        raise ValueError(f"unknown kind {kind!r}")
    return "single" if kind == "multi" and n_chunks < 2 else kind


def make_sample(rng: np.random.Generator, *, n_chunks: int = N_CHUNKS,
                records_per_chunk: int = RECORDS_PER_CHUNK, p_local: float = P_LOCAL,
                p_multi: float = P_MULTI, kind: str | None = None,
                multi_keys: tuple[int, int] = (2, 2), turns: int = 1,
                tok: Tokens | None = None) -> Sample:
    """One sample from `rng`. `kind` forces single / multi / local (else drawn); a multi
    question asks for k keys in k different chunks, k drawn from `multi_keys` (lo, hi).

    turns > 1 makes a training drill: after the first answer the response goes on with
    "<global>" and another question (given, not learned), its tag and answer, and so on, so one
    prompt trains several retrievals, each under exactly the mask the hook would apply."""
    tok = tok or tokens()
    n_rec = n_chunks * records_per_chunk
    if n_chunks < 1 or records_per_chunk < 1 or n_rec > len(KEY_WORDS):
        raise ValueError(f"a task needs 1..{len(KEY_WORDS)} records in at least one chunk")
    kind = pick_kind(rng, kind, n_chunks, p_local, p_multi)
    # Distinct keys (indices into KEY_WORDS) and values (indices into NUMBERS) for each record.
    keys = [int(k) for k in rng.choice(len(KEY_WORDS), size=n_rec, replace=False)]
    values = [int(v) for v in rng.integers(0, len(NUMBERS), size=n_rec)]
    recs = _Records(keys, values, [i // records_per_chunk for i in range(n_rec)])
    chunk_of = recs.chunk_of

    # The queried records: one (single), k in k different chunks (multi), none (local).
    if kind == "multi":
        q = [c * records_per_chunk + int(rng.integers(records_per_chunk))
             for c in _multi_chunks(rng, n_chunks, multi_keys)]
    elif kind == "single":
        q = [int(rng.integers(n_rec))]
    else:
        q = []
    _place_distractors(rng, keys, chunk_of, q)
    chunks = []
    for c in range(n_chunks):
        ids = range(c * records_per_chunk, (c + 1) * records_per_chunk)
        chunks.append("".join(_record(c + 1, KEY_WORDS[keys[i]], NUMBERS[values[i]])
                              for i in ids))

    tail, answer, directive = recs.question(rng, kind, q)
    prompt = build_prompt(tok.encode, HEAD, chunks, tail, filler_id=tok.filler_id,
                          bos_id=tok.bos_id, block_size=BLOCK_SIZE, chunk_blocks=1)
    tag = tag_text(directive)
    tag_ids = tok.encode(tag)
    response = tag_ids + tok.encode(" " + answer)
    loss = [True] * len(response)
    tags = [(len(tag_ids) - 1, directive)]
    _drill(rng, recs, tok, set(q), response, loss, tags, turns, n_chunks, p_local, p_multi,
           multi_keys)
    response.append(tok.eos_id)
    loss.append(True)
    qkeys = tuple((KEY_WORDS[keys[r]], chunk_of[r] + 1, NUMBERS[values[r]]) for r in q)
    records = [(chunk_of[i] + 1, KEY_WORDS[keys[i]], NUMBERS[values[i]]) for i in range(n_rec)]
    drill = turns > 1
    return Sample(prompt, response, tag, directive, answer, kind, len(tag_ids) - 1, qkeys,
                  {"n_chunks": n_chunks, "records_per_chunk": records_per_chunk,
                   "records": records, "turns": len([t for t in tags if t[1].mode is not
                                                     Mode.GLOBAL])},
                  tuple(loss) if drill else (), tuple(tags) if drill else ())


def sample(seed: int, index: int, stream: int = TRAIN, **kw) -> Sample:
    """Sample `index` of a stream: the same arguments give the same sample everywhere."""
    return make_sample(rng_for(seed, stream, index), **kw)


def held_out(n: int, seed: int = EVAL_SEED, **kw) -> list[Sample]:
    """n held-out samples (stream HELDOUT, never drawn by training)."""
    return [sample(seed, i, HELDOUT, **kw) for i in range(n)]


def first_tag(text: str, n_chunks: int | None = None):
    """(Directive or None, offset just after the first tag's '>') of a response text; the
    directive is None when the first tag is malformed or names an unknown chunk, and the
    offset is None when the text holds no tag at all."""
    from da_lab.core.tags import EventKind, TagStream

    for ev in TagStream(n_chunks=n_chunks).feed(text):
        if ev.kind is EventKind.TAG_TRAPPED:
            return ev.directive, ev.offset
        if ev.kind in (EventKind.MALFORMED_TAG, EventKind.UNKNOWN_CHUNK):
            return None, ev.offset
    return None, None
