"""The director: scripted tags for models that don't write their own.

A v1 logits processor that, at a chosen output position, forces the token ids of a tag. The tag
then sits in the model's own output stream and the hook traps it exactly like a model-written
one: the director never changes the mode beside the stream.

GPU note (vLLM 0.26): any custom logits processor, even one installed as a
`vllm.logits_processors` entry point, silently moves the engine from the V2 to the v1 model
runner. So this class is passed per engine (`LLM(logits_processors=[Director])`) only when a
lab wants scripted tags, is never registered globally, and every run records its runner class.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from .state import EXTRA_DIRECTOR


class Director(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        # row -> (script [(output index, [token ids])...], live output-token list of that row)
        self.rows: dict[int, tuple[list, list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for i in batch_update.removed:
            self.rows.pop(i, None)
        for i, params, _prompt, output_ids in batch_update.added:
            script = (params.extra_args or {}).get(EXTRA_DIRECTOR) if params else None
            if script:
                self.rows[i] = ([(int(at), [int(t) for t in ids]) for at, ids in script],
                                output_ids)
            else:
                self.rows.pop(i, None)
        for a, b, how in batch_update.moved:
            ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
            if ra is not None:
                self.rows[b] = ra
            if rb is not None and how == MoveDirectionality.SWAP:
                self.rows[a] = rb

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, (script, output_ids) in self.rows.items():
            n = len(output_ids)
            for at, ids in script:
                if at <= n < at + len(ids):
                    forced = ids[n - at]
                    logits[row].fill_(float("-inf"))
                    logits[row, forced] = 0.0
                    break
        return logits
