"""A DA prompt and its geometry in KV blocks.

Two kinds of layout, one class. The design card's: chunks are whole blocks

    [ scaffold head (sink) ][ C1 ][ C2 ] ... [ Cn ][ scaffold tail (the question) ][ response ...
      whole blocks            whole blocks each       starts on a block boundary

so hiding a chunk hides whole blocks and nothing else (the head is padded for the same reason;
the tail need not be). The paper's (Ho et al. 2026): chunks are token spans anywhere in the
prompt, unpadded (`Layout.from_spans`); a block is kept when any token it holds is visible, so a
block a hidden chunk shares with visible text is read whole ("rounded outward"). Everything
outside the chunks (system prompt, question, instructions, response) is visible in every mode.
`Layout` holds only geometry (what the hook needs, small enough to travel in a request's
SamplingParams.extra_args); `DAPrompt` adds the token ids and texts.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from da_lab.core.directive import RULES

BLOCK_SIZE = 32
# What one layout may carry, so one request's work per engine step stays bounded (the hook
# recomputes its kept blocks at every block boundary and directive change): at most MAX_CHUNKS
# chunks (card blocks or paper spans: 4,096 one-block chunks of a 128k prompt at block size 32
# is far below it), and `hidden` names each chunk at most once. Refused in the constructor,
# so the server's edge, the hook and the Lab all refuse a layout past them.
MAX_CHUNKS = 1 << 16


@dataclass(frozen=True)
class Region:
    name: str       # "scaffold", "C1".."Cn", "tail", "response"
    kind: str       # "scaffold" | "chunk" | "tail" | "response"
    start: int      # first logical block
    stop: int       # one past the last logical block (response: open-ended, stop = -1)


@dataclass(frozen=True)
class Layout:
    block_size: int
    head_blocks: int
    chunk_blocks: tuple[int, ...]
    prompt_len: int
    # Chunks FOCUS never keeps, even when a tag names them: the eval's hidden-chunk ablation
    # (da_lab.training.eval.evaluate). Empty for every real prompt.
    hidden: tuple[int, ...] = ()
    # The paper's chunks: token spans [start, end) of C1..Cn, in order, disjoint. Empty for the
    # card's whole-block chunks; set by from_spans, which derives head_blocks and chunk_blocks.
    spans: tuple[tuple[int, int], ...] = ()
    # How the request's tag machine reads closing tags and <global> (directive.RULES): the
    # reference's stack, or the paper's §2.3 rules. Protocol, not geometry, but it travels with
    # the layout so that every door (Lab, server, trace) carries it.
    rules: str = "reference"

    def __post_init__(self) -> None:
        if self.rules not in RULES:
            raise ValueError(f"rules must be one of {', '.join(RULES)}, not {self.rules!r}")
        if len(self.chunk_blocks) > MAX_CHUNKS:
            raise ValueError(f"a layout carries at most {MAX_CHUNKS:,} chunks, not "
                             f"{len(self.chunk_blocks):,}")
        if len(self.hidden) > len(self.chunk_blocks) or \
                len(set(self.hidden)) != len(self.hidden):
            raise ValueError(f"hidden names each chunk at most once ({len(self.hidden):,} "
                             f"entries for {len(self.chunk_blocks):,} chunks)")
        if self.spans:
            self._check_spans()
        else:
            if self.block_size < 1 or self.head_blocks < 1:
                raise ValueError("a layout needs block_size >= 1 and at least one head (sink) "
                                 "block")
            if any(b < 1 for b in self.chunk_blocks):
                raise ValueError("every chunk must span at least one whole block")
            if self.prompt_len <= self.tail_start * self.block_size:
                raise ValueError("the prompt must end with a non-empty scaffold tail after the "
                                 "chunks")
        if any(not 1 <= c <= self.n_chunks for c in self.hidden):
            raise ValueError(f"hidden chunks {list(self.hidden)} must be in C1..C{self.n_chunks}")

    def _check_spans(self) -> None:
        if self.block_size < 1 or self.prompt_len < 1:
            raise ValueError("a layout needs block_size >= 1 and a prompt of at least one token")
        end = 0
        for cid, (a, b) in enumerate(self.spans, start=1):
            if not end <= a < b <= self.prompt_len:
                where = "overlaps the chunk before it" if a < end else (
                    "is empty" if a >= b else f"lies outside the prompt ({self.prompt_len} "
                    "tokens)")
                raise ValueError(f"chunk C{cid} span [{a}, {b}) {where}: spans must be "
                                 "non-empty, in order, disjoint and inside the prompt")
            end = b

    @classmethod
    def from_spans(cls, block_size: int, spans, prompt_len: int, hidden=(),
                   rules: str = "reference") -> Layout:
        """The paper's layout: chunk Ck is tokens [start, end) of the prompt, unpadded."""
        if len(spans) > MAX_CHUNKS:
            raise ValueError(f"a layout carries at most {MAX_CHUNKS:,} chunks, not "
                             f"{len(spans):,}")
        spans = tuple((int(a), int(b)) for a, b in spans)
        if not spans:
            raise ValueError("a layout needs at least one chunk span")
        head = spans[0][0] // block_size if block_size >= 1 else 0
        touched = tuple(-(-b // block_size) - a // block_size for a, b in spans) \
            if block_size >= 1 else ()
        return cls(block_size, head, touched, prompt_len, tuple(hidden), spans, rules)

    def at_block_size(self, block_size: int) -> Layout:
        """The same chunks on an engine whose KV blocks hold `block_size` tokens. The paper's
        spans are re-rounded (a smaller block rounds them out less); the card's whole-block
        chunks stay whole blocks, so the new size must divide the old one."""
        if block_size == self.block_size:
            return self
        if block_size < 1:
            raise ValueError(f"a block size must be at least 1, not {block_size}")
        if self.spans:
            return Layout.from_spans(block_size, self.spans, self.prompt_len, self.hidden,
                                     self.rules)
        if self.block_size % block_size:
            raise ValueError(f"the card's layout pads its chunks to {self.block_size}-token "
                             f"blocks, and {block_size} does not divide {self.block_size}")
        k = self.block_size // block_size
        return Layout(block_size, self.head_blocks * k, tuple(n * k for n in self.chunk_blocks),
                      self.prompt_len, self.hidden, rules=self.rules)

    @property
    def unaligned(self) -> bool:
        """Chunks are token spans (the paper's prompt), not whole blocks."""
        return bool(self.spans)

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_blocks)

    @cached_property
    def chunk_spans(self) -> tuple[tuple[int, int], ...]:
        """Token spans [start, end) of C1..Cn (whole blocks for the card's layouts). Built once
        per layout: chunk_range and the mask read it for every chunk."""
        if self.spans:
            return self.spans
        out, b = [], self.head_blocks
        for n in self.chunk_blocks:
            out.append((b * self.block_size, (b + n) * self.block_size))
            b += n
        return tuple(out)

    @cached_property
    def hidden_set(self) -> frozenset[int]:
        """`hidden` as a set: the mask asks it once per focused chunk."""
        return frozenset(self.hidden)

    @cached_property
    def chunk_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(first block, one past the last block) of C1..Cn as int64 arrays, rounded outward:
        chunk_range of every chunk at once, for the mask's vectorised work."""
        spans = np.asarray(self.chunk_spans, dtype=np.int64).reshape(-1, 2)
        starts, stops = spans[:, 0] // self.block_size, -(-spans[:, 1] // self.block_size)
        starts.flags.writeable = stops.flags.writeable = False
        return starts, stops

    @property
    def tail_start(self) -> int:
        """First logical block after the chunks' blocks (the question starts in it)."""
        if self.spans:
            return self.spans[-1][1] // self.block_size
        return self.head_blocks + sum(self.chunk_blocks)

    @property
    def response_start(self) -> int:
        """Logical block holding the first response token (may be the tail's last block)."""
        return self.prompt_len // self.block_size

    @cached_property
    def free_blocks(self) -> np.ndarray:
        """Prompt blocks holding a token outside every chunk: visible in every mode."""
        bs, n = self.block_size, -(-self.prompt_len // self.block_size)
        free_tok = np.zeros(n * bs, dtype=bool)
        free_tok[: self.prompt_len] = True
        for a, b in self.chunk_spans:
            free_tok[a:b] = False
        free = np.flatnonzero(free_tok.reshape(n, bs).any(axis=1)).astype(np.int32)
        free.flags.writeable = False
        return free

    def chunk_range(self, chunk_id: int) -> range:
        """Logical blocks holding chunk `chunk_id` (1-based, as in `<focus C3>`), rounded
        outward: a block that holds any of its tokens."""
        if not 1 <= chunk_id <= self.n_chunks:
            raise KeyError(f"unknown chunk C{chunk_id} (layout has C1..C{self.n_chunks})")
        starts, stops = self.chunk_bounds
        return range(int(starts[chunk_id - 1]), int(stops[chunk_id - 1]))

    def regions(self) -> list[Region]:
        out = [Region("scaffold", "scaffold", 0, self.head_blocks)]
        for cid in range(1, self.n_chunks + 1):
            r = self.chunk_range(cid)
            out.append(Region(f"C{cid}", "chunk", r.start, r.stop))
        prompt_blocks = -(-self.prompt_len // self.block_size)
        out.append(Region("tail", "tail", self.tail_start, prompt_blocks))
        out.append(Region("response", "response", self.response_start, -1))
        return out

    def region_of(self, block: int) -> str:
        """Name of the region a logical block belongs to: a chunk when it holds any of the
        chunk's tokens (the first such chunk), else scaffold before the chunks, tail after them
        in the prompt, response past it."""
        bs = self.block_size
        spans = self.chunk_spans
        # Spans are in order and disjoint, so their ends rise: the first ending past the
        # block's start is the only candidate.
        k = bisect.bisect_right(self._span_ends, block * bs)
        if k < len(spans) and spans[k][0] < (block + 1) * bs:
            return f"C{k + 1}"
        if spans and block * bs < spans[0][0]:
            return "scaffold"
        if block * bs < self.prompt_len:
            return "tail"
        return "response"

    @cached_property
    def _span_ends(self) -> list[int]:
        return [b for _, b in self.chunk_spans]

    def to_dict(self) -> dict:
        if self.spans:
            d = {"block_size": self.block_size, "chunk_spans": [list(s) for s in self.spans],
                 "prompt_len": self.prompt_len}
        else:
            d = {"block_size": self.block_size, "head_blocks": self.head_blocks,
                 "chunk_blocks": list(self.chunk_blocks), "prompt_len": self.prompt_len}
        if self.hidden:
            d["hidden"] = list(self.hidden)
        if self.rules != "reference":
            d["rules"] = self.rules
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Layout:
        try:
            hidden = tuple(int(c) for c in d.get("hidden", ()))
            rules = d.get("rules", "reference")
            if "chunk_spans" in d:
                return cls.from_spans(int(d["block_size"]), d["chunk_spans"],
                                      int(d["prompt_len"]), hidden, rules)
            return cls(int(d["block_size"]), int(d["head_blocks"]),
                       tuple(int(b) for b in d["chunk_blocks"]), int(d["prompt_len"]), hidden,
                       rules=rules)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a DA layout: {d!r} ({e})") from None


@dataclass(frozen=True)
class DAPrompt:
    layout: Layout
    token_ids: list[int]
    head: str
    chunks: tuple[str, ...]
    tail: str
    meta: dict = field(default_factory=dict)


def build_prompt(encode: Callable[[str], list[int]], head: str, chunks: Sequence[str],
                 tail: str, *, filler_id: int, bos_id: int | None = None,
                 block_size: int = BLOCK_SIZE, chunk_blocks: int | None = None) -> DAPrompt:
    """Tokenize each section and pad it with `filler_id` to whole blocks.

    `encode` must not add special tokens. With `chunk_blocks` given, every chunk gets exactly
    that many blocks (a chunk whose text is longer is an error, never silently cut); otherwise
    each chunk gets as many blocks as its text needs.
    """
    def padded(ids: list[int], n_blocks: int | None, what: str) -> list[int]:
        need = -(-len(ids) // block_size) if n_blocks is None else n_blocks
        if len(ids) > need * block_size:
            raise ValueError(f"{what} is {len(ids)} tokens, more than its {need} blocks of "
                             f"{block_size} hold")
        return ids + [filler_id] * (max(need, 1) * block_size - len(ids))

    head_ids = ([bos_id] if bos_id is not None else []) + encode(head)
    ids = padded(head_ids, None, "the scaffold head")
    head_blocks = len(ids) // block_size
    sizes = []
    for i, text in enumerate(chunks, start=1):
        c = padded(encode(text), chunk_blocks, f"chunk C{i}")
        sizes.append(len(c) // block_size)
        ids += c
    tail_ids = encode(tail)
    if not tail_ids:
        raise ValueError("the scaffold tail (the question) must not be empty")
    ids += tail_ids
    layout = Layout(block_size, head_blocks, tuple(sizes), len(ids))
    return DAPrompt(layout, ids, head, tuple(chunks), tail)


def seed_texts(n_chunks: int = 12, records_per_chunk: int = 4) -> tuple[str, list[str], str]:
    """The seed scenario's texts: a scaffold, 12 chunks of key -> value records, a question."""
    head = ("You are reading a document in chunks. Each chunk has records. "
            "Answer the question using only the relevant chunk.")
    chunks = []
    for c in range(1, n_chunks + 1):
        recs = [f"Record C{c}: key {c * 10 + r} has value {(c * 37 + r * 11) % 100}."
                for r in range(records_per_chunk)]
        chunks.append(" ".join(recs))
    tail = " Question: What is the value of key 31? Answer:"
    return head, chunks, tail
