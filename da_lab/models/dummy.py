"""Llama-shaped models with dummy weights, built locally (nothing is downloaded).

`llama-1b-dummy` has Llama-3.2-1B's shape (16 layers, hidden 2048, 32 query / 8 KV heads of 64)
with the lab's 1,024-token tokenizer instead of 128k (its embeddings are the only part that
shrinks). Its weights are seeded random normals written as safetensors, so vLLM and the
transformers oracle read the very same numbers. Built on the machine that needs it (1.9 GB in
bf16), into the lab's home folder.

`llama-8b-dummy` (the benchmarks' and the served runs' model) is only a config.json with
Llama-3-8B's shapes beside the lab's tokenizer: vLLM makes its weights (load_format="dummy").
`prepare_model` also gives the tiny model a folder allowing 128k+ positions, tiny-hybrid the
same for da-tiny-hybrid, and writes the hybrid benchmark models' config.json
(gemma4-31b-dummy, qwen36-27b-dummy: models/hybrid_dummy.py, each number's source beside it).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

from da_lab.models.cache import lab_home
from da_lab.models.hybrid_dummy import BENCH_MODELS, bench_config
from da_lab.models.tiny import tokenizer_json, write_tokenizer_files

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


# Llama-3-8B shapes (dummy weights: nothing is downloaded; vLLM's load_format="dummy").
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "torch_dtype": "bfloat16", "initializer_range": 0.02,
}
LLAMA_VOCAB = 128256


def bench_home() -> Path:
    return lab_home() / "bench_models"


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def prepare_model(name: str, max_len: int, vocab: int = LLAMA_VOCAB) -> Path:
    """A local model folder for `name` whose config allows `max_len` positions.

    tiny: the lab's embedded model (weights linked, not copied) with max_position_embeddings
    raised, since the bench goes past its 8k. llama-8b-dummy: a config.json with Llama-3-8B
    shapes and the lab's tokenizer files; the engine loads it with load_format="dummy".
    """
    from da_lab.models.tiny import build_tiny_model

    tiny = build_tiny_model()
    positions = max(131072, 1 << math.ceil(math.log2(max(max_len, 2))))
    if name == "tiny-hybrid":
        from da_lab.models.hybrid import build

        tiny = build()          # da-tiny-hybrid: its weights linked like the tiny model's
    folder = bench_home() / name
    folder.mkdir(parents=True, exist_ok=True)
    tok_files = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
    for f in tok_files:
        _write_if_changed(folder / f, (tiny / f).read_text())
    cfg = json.loads((tiny / "config.json").read_text())
    if name in ("tiny", "tiny-hybrid"):
        cfg["max_position_embeddings"] = positions
        src = {f.name for f in tiny.iterdir() if f.suffix == ".safetensors"}
        for f in folder.iterdir():          # weights of an earlier default tiny model
            if f.suffix == ".safetensors" and (f.name not in src or f.resolve() !=
                                               (tiny / f.name).resolve()):
                f.unlink()
        for n in sorted(src):
            link = folder / n
            if not link.exists():
                try:
                    link.symlink_to(tiny / n)
                except OSError:
                    shutil.copyfile(tiny / n, link)
        (folder / "SOURCE").write_text(str(tiny) + "\n")
    elif name == "llama-8b-dummy":
        special = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
        cfg = dict(LLAMA_8B, vocab_size=vocab, max_position_embeddings=positions, **special)
    elif name in BENCH_MODELS:
        special = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
        cfg = bench_config(name, positions, special)
    else:
        raise ValueError(f"unknown bench model {name!r} (known: tiny, tiny-hybrid, "
                         f"llama-8b-dummy, {', '.join(BENCH_MODELS)})")
    _write_if_changed(folder / "config.json", json.dumps(cfg, indent=2, sort_keys=True))
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    if tc.get("model_max_length") != positions:
        tc["model_max_length"] = positions
        _write_if_changed(folder / "tokenizer_config.json", json.dumps(tc, indent=2))
    return folder
