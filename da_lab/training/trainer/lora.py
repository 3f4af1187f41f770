"""A small LoRA for a transformers Llama or Gemma 3, and its delta file (what `smollm2-da` ships,
and `gemma3-da` will).

Every q/k/v/o/gate/up/down projection becomes W x + alpha/r B(A x), W frozen (Gemma 3: in its
sliding-window layers and its global ones alike; its q/k norms and embeddings stay frozen).
The delta file holds, for each adapted weight (its state-dict name W), `W.lora_A` (r, in) and
`W.lora_B` (out, r), in bf16; `da_lab.models.delta.merge_delta` folds it into the base as
W + alpha/r B A in float32. With r=16 on SmolLM2-135M: 4.9M parameters, 9.8 MB; on Gemma 3
270M 237,312 r parameters: r=32 is 7.6M parameters, 15.2 MB (r=42, the most that fits 20 MB:
19.9 MB).

Saving first rounds the live factors to the file's dtype, so the model in memory after saving is
exactly the one the file describes (the smoke test compares their logits).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _module_class():
    import torch

    class LoRALinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear, rank: int, alpha: float,
                     gen: torch.Generator) -> None:
            super().__init__()
            self.base = base
            self.rank, self.scale = rank, alpha / rank
            dev = base.weight.device
            a = torch.empty(rank, base.in_features)
            # Kaiming-uniform A (as nn.Linear initialises), zero B: the model starts unchanged.
            bound = 1.0 / math.sqrt(base.in_features)
            a.uniform_(-bound, bound, generator=gen)
            self.lora_A = torch.nn.Parameter(a.to(dev))
            self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, rank, device=dev))

        def forward(self, x):
            return self.base(x) + (x @ self.lora_A.t().to(x.dtype)
                                   @ self.lora_B.t().to(x.dtype)) * self.scale

    return LoRALinear


def add_lora(model, rank: int = 16, alpha: float = 32.0, seed: int = 0) -> dict:
    """Freeze the model and wrap its projections; returns {weight name: LoRA module}."""
    import torch

    cls = _module_class()
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = {}
    for name, module in list(model.named_modules()):
        for t in TARGETS:
            child = getattr(module, t, None)
            if isinstance(child, torch.nn.Linear):
                lora = cls(child, rank, alpha, gen)
                setattr(module, t, lora)
                wrapped[f"{name}.{t}.weight"] = lora
    return wrapped


def lora_parameters(wrapped: dict) -> list:
    return [p for m in wrapped.values() for p in (m.lora_A, m.lora_B)]


def save_delta(wrapped: dict, path: Path, *, rank: int, alpha: float, base_sha256: str,
               dtype: str = "bfloat16") -> int:
    """Write the delta file (rounding the live factors to `dtype` first); returns its bytes."""
    import torch
    from safetensors.torch import save_file

    from da_lab.models.delta import DELTA_FORMAT, DELTA_META

    dt = getattr(torch, dtype)
    tensors = {}
    with torch.no_grad():
        for name, m in sorted(wrapped.items()):
            for part in ("lora_A", "lora_B"):
                p = getattr(m, part)
                p.copy_(p.to(dt).to(p.dtype))
                tensors[f"{name}.{part}"] = p.detach().to("cpu", dt).contiguous()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": DELTA_FORMAT, "rank": rank, "alpha": alpha, "targets": list(TARGETS),
            "base_weights_sha256": base_sha256}
    save_file(tensors, str(path), metadata={DELTA_META: json.dumps(meta, sort_keys=True)})
    return path.stat().st_size


def load_delta(wrapped: dict, path: Path) -> dict:
    """Copy a delta file's factors into live LoRA modules (to continue training from it);
    returns the file's metadata. Rank and targets must match the modules."""
    import torch
    from safetensors import safe_open

    from da_lab.models.delta import DELTA_META

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()[DELTA_META])
        with torch.no_grad():
            for name, m in wrapped.items():
                for part in ("lora_A", "lora_B"):
                    p = getattr(m, part)
                    p.copy_(f.get_tensor(f"{name}.{part}").to(p.device, p.dtype))
    return meta
