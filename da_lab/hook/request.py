"""One DA request's state inside the worker: its layout, tag machine, decoded text, mask
history, director script. Plain data: vLLM never appears here; `book.RequestBook` keeps one
`RequestState` per request, `step.Step` reads and advances it once per step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from da_lab.core.layout import Layout
from da_lab.core.mask import kept_blocks, partially_kept
from da_lab.core.tags import TagStream
from da_lab.hook import director


@dataclass
class RequestState:
    req_id: str
    da_id: str
    layout: Layout
    stream: TagStream
    decoder: object                   # tokenizers.decoders.DecodeStream
    n_seen: int = 0                   # output tokens already fed to the stream
    text: str = ""                    # decoded response so far
    last_seq_len: int = 0
    max_seq_len: int = 0              # the most positions ever computed (recompute detection)
    recomputing: bool = False         # the last step recomputed positions computed before
    ever_masked: bool = False
    events: list[dict] = field(default_factory=list)
    # One entry per step: (first query position, seq_len, kept logical blocks or None = all).
    mask_history: list[tuple[int, int, np.ndarray | None]] = field(default_factory=list)
    _kept_key: tuple = (None, -1, -1)
    _kept: np.ndarray | None = None
    _partial: np.ndarray | None = None   # of _kept: blocks also holding hidden tokens, or None
    _dir_dict: tuple = (None, None)
    script: list = field(default_factory=list)     # director: [(output index, [token ids])]
    captured: list[int] = field(default_factory=list)  # sampled tokens: the hook's own copies
    undecodable: int = 0
    # Set when vLLM recomputed this request (preemption) while it was masked: its later
    # tokens may differ from an uninterrupted run, and the user must be told (Lab, CLI, server).
    recomputed_under_mask: bool = False

    @property
    def prompt_len(self) -> int:
        return self.layout.prompt_len

    def forced_token(self, out_index: int, live: list | None) -> int | None:
        """The director's token at output index `out_index` (request script, then the live
        script the Lab steers with)."""
        t = director.token_at(self.script, out_index) if self.script else None
        if t is None and live:
            t = director.token_at(live, out_index)
        return t

    def kept(self, seq_len: int, query_len: int) -> np.ndarray:
        # The decision only changes with the directive (a new object per trapped tag), the
        # block count or the first query block, so most decode steps reuse the last answer.
        bs = self.layout.block_size
        d, nb, qb = self.stream.directive, -(-seq_len // bs), (seq_len - query_len) // bs
        kd, knb, kqb = self._kept_key
        if d is not kd or nb != knb or qb != kqb:
            self._kept_key = (d, nb, qb)
            self._kept = kept_blocks(d, self.layout, seq_len, query_len)
            # Shared by the decision, the mask history and step records: never written.
            self._kept.flags.writeable = False
            part = partially_kept(d, self.layout, self._kept)
            self._partial = part if len(part) else None
        return self._kept

    def partial(self) -> np.ndarray | None:
        """Of the last kept(): the blocks also holding hidden tokens (None: none)."""
        return self._partial

    def directive_dict(self) -> dict:
        d = self.stream.directive
        if self._dir_dict[0] is not d:
            self._dir_dict = (d, d.to_dict())
        return self._dir_dict[1]
