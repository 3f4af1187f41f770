"""Llama-shaped models with dummy weights, built locally (nothing is downloaded).

`llama-1b-dummy` has Llama-3.2-1B's shape (16 layers, hidden 2048, 32 query / 8 KV heads of 64)
with the lab's 1,024-token tokenizer instead of 128k (its embeddings are the only part that
shrinks). Its weights are seeded random normals written as safetensors, so vLLM and the
transformers oracle read the very same numbers. Built on the machine that needs it (1.9 GB in
bf16), into the lab's home folder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from da_lab.engine.cache import lab_home
from da_lab.engine.models import tokenizer_json, write_tokenizer_files

SHAPES = {
    "llama-1b-dummy": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                           num_attention_heads=32, num_key_value_heads=8, head_dim=64),
}


def config(name: str, max_position_embeddings: int = 16384) -> dict:
    vocab = tokenizer_json()["model"]["vocab"]
    # initializer_range 0.04 (not Llama's 0.02): random weights then give logit gaps well
    # above bf16 noise, so the oracle can compare most positions.
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": len(vocab), "max_position_embeddings": max_position_embeddings,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
            "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"],
            "pad_token_id": vocab["<pad>"], "initializer_range": 0.04, **SHAPES[name]}


def build(name: str = "llama-1b-dummy", folder: str | Path | None = None, seed: int = 0,
          device: str | None = None) -> Path:
    """Write the model folder once (a finished folder has DONE); return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(folder) if folder else lab_home() / "models" / name
    if (folder / "DONE").exists():
        return folder
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = config(name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=name + ".", dir=folder.parent))
    try:
        torch.manual_seed(seed)
        with torch.device(device):
            model = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.bfloat16)
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        write_tokenizer_files(tmp, cfg)
        (tmp / "DONE").write_text(f"seed={seed}\n")
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
