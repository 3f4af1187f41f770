"""A DA prompt and its geometry in KV blocks.

    [ scaffold head (sink) ][ C1 ][ C2 ] ... [ Cn ][ scaffold tail (the question) ][ response ...
      whole blocks            whole blocks each       starts on a block boundary

Chunks are whole blocks so that hiding a chunk hides whole blocks and nothing else: the block
table is the unit the kernel reads. The head is padded to whole blocks for the same reason; the
tail need not be, since it is always kept and the response simply continues in its last block.
`Layout` holds only block geometry (what the hook needs, small enough to travel in a request's
SamplingParams.extra_args); `DAPrompt` adds the token ids and texts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

BLOCK_SIZE = 32


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
    # (da_lab.training.evaluate). Empty for every real prompt.
    hidden: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.head_blocks < 1:
            raise ValueError("a layout needs block_size >= 1 and at least one head (sink) block")
        if any(b < 1 for b in self.chunk_blocks):
            raise ValueError("every chunk must span at least one whole block")
        if self.prompt_len <= self.tail_start * self.block_size:
            raise ValueError("the prompt must end with a non-empty scaffold tail after the chunks")
        if any(not 1 <= c <= self.n_chunks for c in self.hidden):
            raise ValueError(f"hidden chunks {list(self.hidden)} must be in C1..C{self.n_chunks}")

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_blocks)

    @property
    def tail_start(self) -> int:
        """First logical block of the scaffold tail (the question)."""
        return self.head_blocks + sum(self.chunk_blocks)

    @property
    def response_start(self) -> int:
        """Logical block holding the first response token (may be the tail's last block)."""
        return self.prompt_len // self.block_size

    def chunk_range(self, chunk_id: int) -> range:
        """Logical blocks of chunk `chunk_id` (1-based, as written in `<focus C3>`)."""
        if not 1 <= chunk_id <= self.n_chunks:
            raise KeyError(f"unknown chunk C{chunk_id} (layout has C1..C{self.n_chunks})")
        start = self.head_blocks + sum(self.chunk_blocks[: chunk_id - 1])
        return range(start, start + self.chunk_blocks[chunk_id - 1])

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
        """Name of the region a logical block belongs to (tail wins over response when shared)."""
        if block < self.head_blocks:
            return "scaffold"
        if block < self.tail_start:
            b = block - self.head_blocks
            for cid, n in enumerate(self.chunk_blocks, start=1):
                if b < n:
                    return f"C{cid}"
                b -= n
        if block * self.block_size < self.prompt_len:
            return "tail"
        return "response"

    def to_dict(self) -> dict:
        d = {"block_size": self.block_size, "head_blocks": self.head_blocks,
             "chunk_blocks": list(self.chunk_blocks), "prompt_len": self.prompt_len}
        if self.hidden:
            d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Layout:
        try:
            return cls(int(d["block_size"]), int(d["head_blocks"]),
                       tuple(int(b) for b in d["chunk_blocks"]), int(d["prompt_len"]),
                       tuple(int(c) for c in d.get("hidden", ())))
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
