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

from .state import EXTRA_DIRECTOR, EXTRA_ID

# da_id -> that request's script, shared with the rows below: `Lab.steer` appends to it while
# the request runs (in-process engines only), so a user's button ends up in the model's stream.
LIVE: dict[str, list] = {}


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
            extra = (params.extra_args or {}) if params else {}
            if EXTRA_ID not in extra and EXTRA_DIRECTOR not in extra:
                self.rows.pop(i, None)
                continue
            script = LIVE.setdefault(str(extra[EXTRA_ID]), []) if EXTRA_ID in extra else []
            for at, ids in extra.get(EXTRA_DIRECTOR) or ():
                if (int(at), [int(t) for t in ids]) not in script:   # a resumed request
                    script.append((int(at), [int(t) for t in ids]))
            self.rows[i] = (script, output_ids)
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
