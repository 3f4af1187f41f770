"""Hybrid models with dummy weights for the GPU checks and the benchmark, built locally
(nothing is downloaded): the paper's two families (Ho et al. 2026, §4), shrunk for the
oracle on the GPU, or at full size as config.json only for the benchmark (vLLM makes the
weights, load_format="dummy").

GPU checks (checks/gpu_tests.py; real random weights that vLLM and the oracle both read):
    gemma4-dummy   Gemma4ForCausalLM, 6 layers (5 sliding x 128 tokens : 1 global), Gemma 4's
                   two head sizes (sliding 4 KV heads x 256, global 1 KV head x 512 with
                   keys = values), so vLLM 0.26 runs it on TRITON_ATTN (FlashAttention 3 takes
                   head sizes <= 256) and the global group gets 2x the sliding groups' block
                   size (its per-token page is half theirs), as Gemma-4-31B's does.
    qwen35-dummy   Qwen3_5ForConditionalGeneration (text only: language_model_only), 4 layers
                   (3 Gated DeltaNet : 1 full attention). vLLM 0.26 registers no text-only
                   Qwen 3.5 class (Qwen3_5ForCausalLM is 0.32+), and its Qwen3NextForCausalLM
                   needs MoE layers, whose kernels (_moe_C) the GPU bundle leaves out.
Benchmark (da-lab bench; config.json only):
    gemma4-31b-dummy, qwen36-27b-dummy  (their sources beside the numbers below)
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

from da_lab.models.cache import lab_home
from da_lab.models.lab_tokenizer import tokenizer_json, write_tokenizer_files

GEMMA4 = "gemma4-dummy"
QWEN35 = "qwen35-dummy"
TEST_MODELS = (GEMMA4, QWEN35)
KERNEL_ALIGN = 16       # FlashAttention / Triton kernel blocks: MultipleOf(16) in vLLM 0.26


def _special(vocab: dict) -> dict:
    return {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"],
            "pad_token_id": vocab["<pad>"]}


# transformers 5.17+ (the GPU machine's) marks a Gemma 4 config heterogeneous (its global layers'
# head_dim and KV heads differ) and refuses `config.head_dim`, which vLLM 0.26 reads to size
# the model ("AmbiguousGlobalPerLayerAttributeError", bench/results/
# bench-hybrid-gemma4-h100-2026-12-07-probe.json). vLLM takes the global layers' sizes from
# global_head_dim / num_global_key_value_heads (engine_kwargs), so the global value is right.
ALLOW_GLOBAL = {"allow_global_per_layer_attribute_access": True}


def gemma4_config() -> dict:
    vocab = tokenizer_json()["model"]["vocab"]
    return {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
            "vocab_size": len(vocab), "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
            "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 256,
            "global_head_dim": 512, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
            "sliding_window": 128, "final_logit_softcapping": 30.0,
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": len(vocab), "num_kv_shared_layers": 0,
            "max_position_embeddings": 16384, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16", **ALLOW_GLOBAL,
            **_special(vocab)}


def qwen35_config() -> dict:
    vocab = tokenizer_json()["model"]["vocab"]
    text = {"model_type": "qwen3_5_text", "vocab_size": len(vocab), "hidden_size": 256,
            "intermediate_size": 512, "num_hidden_layers": 4,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 256,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "mamba_ssm_dtype": "float32", "max_position_embeddings": 16384,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, **_special(vocab)}
    vision = {"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
              "out_hidden_size": 256}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text, "vision_config": vision, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", **_special(vocab)}


CONFIGS = {GEMMA4: gemma4_config, QWEN35: qwen35_config}


def text_config(cfg: dict) -> dict:
    return cfg.get("text_config", cfg)


def attention_block_size(cfg: dict, block_size: int, kv_bytes: int = 2) -> int:
    """The global layers' KV block size vLLM 0.26 will run a model at, given --block-size.

    GDN (mamba) hybrids: Platform._align_hybrid_block_size raises the block size until one
    attention page holds one GDN state (conv + recurrent, the recurrent in mamba_ssm_dtype),
    in multiples of the kernel alignment (16). Sliding-window hybrids whose global layers hold
    fewer bytes per token than the sliding ones (Gemma 4: 4 KV heads x 512 vs 16 x 256):
    unify_kv_cache_spec_page_size multiplies the global group's block size by the ratio."""
    t = text_config(cfg)
    kinds = t.get("layer_types") or []
    full_tok = 2 * t["num_key_value_heads"] * t["head_dim"] * kv_bytes
    if "linear_attention" in kinds:
        page = gdn_state_bytes(t, kv_bytes)
        need = KERNEL_ALIGN * math.ceil(page / (KERNEL_ALIGN * full_tok))
        return max(block_size, need)
    if "sliding_attention" in kinds and t.get("global_head_dim"):
        glob = 2 * (t.get("num_global_key_value_heads") or t["num_key_value_heads"]) \
            * t["global_head_dim"] * kv_bytes
        sliding = full_tok
        return block_size * max(1, sliding // glob) if sliding % glob == 0 else block_size
    return block_size


def gdn_state_bytes(t: dict, elt: int = 2) -> int:
    """One GDN layer's state: the short-convolution state (conv_dim x (kernel - 1), model dtype)
    and the recurrent state (value heads x key dim x value dim, mamba_ssm_dtype)."""
    kd, vd = t["linear_key_head_dim"], t["linear_value_head_dim"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    conv = (2 * nk * kd + nv * vd) * (t["linear_conv_kernel_dim"] - 1) * elt
    ssm = 4 if t.get("mamba_ssm_dtype") == "float32" else elt
    return conv + nv * kd * vd * ssm


def lab_kwargs(name: str) -> dict:
    """What a Lab needs for a GPU check model beyond the defaults: the block size vLLM will
    run its global layers at (the layout must be in those units), room for the seed prompt
    at that block size, and engine arguments for vLLM 0.26 (engine_kwargs).

    Gemma 4: transformers 5.17 moves global_head_dim / num_global_key_value_heads into
    per_layer_config (they are no attributes of the loaded config), but vLLM 0.26's gemma4.py
    reads them with getattr(config, "global_head_dim", head_dim): without hf_overrides it
    would build the global layers with the sliding head size."""
    cfg = CONFIGS[name]()
    out: dict = {}
    if name == QWEN35:
        # One attention page must hold one GDN state: vLLM raises the block size to this
        # (computed with the float32 recurrent state, so vLLM never raises it further); the
        # seed prompt of 2-block chunks is then ~3,800 tokens.
        out.update(block_size=attention_block_size(cfg, 16), max_model_len=8192)
    if name == GEMMA4:
        # Every group takes its blocks from one pool, and vLLM's start-up check counts a
        # sliding group's need as min(window + batched tokens, max_model_len): 5 x 2048 / 16
        # blocks + the global group's 2048 / 32 at the default max_model_len.
        out["num_blocks"] = 1024
    return {**out, **engine_kwargs(cfg)}


def build(name: str, folder: str | Path | None = None, seed: int = 0,
          device: str | None = None) -> Path:
    """Write a GPU check model's folder once (random weights in bf16, a finished folder has
    DONE); return it. Weights from transformers' own class, then replaced by seeded numbers
    (models/hybrid.seeded_weights) so every machine writes the same ones."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from da_lab.models.hybrid import seeded_weights

    folder = Path(folder) if folder else lab_home() / "models" / name
    if (folder / "DONE").exists():
        return folder
    cfg = CONFIGS[name]()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=name + ".", dir=folder.parent))
    try:
        torch.manual_seed(seed)
        config = AutoConfig.for_model(cfg["model_type"], **{
            k: v for k, v in cfg.items() if k not in ("model_type", "torch_dtype")})
        if name == QWEN35:
            from transformers import Qwen3_5ForConditionalGeneration as cls
        else:
            cls = AutoModelForCausalLM
        model = cls.from_config(config) if cls is AutoModelForCausalLM else cls(config)
        state = {k: torch.from_numpy(v) for k, v in
                 seeded_weights(model.state_dict(), 20261216 + seed).items()}
        model.load_state_dict(state, strict=True)
        model.to(device or "cpu").to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
        saved = json.loads((tmp / "config.json").read_text())
        # The keys vLLM 0.26 reads as attributes, kept beside transformers' own form.
        text_key = "text_config" if "text_config" in saved else None
        (text_config(saved) if text_key else saved).update(
            {k: v for k, v in text_config(cfg).items() if k not in text_config(saved)})
        (tmp / "config.json").write_text(json.dumps(saved, indent=2))
        write_tokenizer_files(tmp, text_config(cfg))
        (tmp / "DONE").write_text(f"seed={seed}\n")
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


# ---- benchmark models: config.json only (vLLM's load_format="dummy") -----------------------
# Every number names its source. G: google/gemma-4-31B's config.json (text_config, as public
# copies of it show); Q: Qwen/Qwen3.6-27B's config.json (text_config); P: the paper (Ho et al.
# 2026): §B (Gemma's 1,024-token window), §C.8 (60 layers of which 10 global; Qwen's 48 GDN
# layers), §C.9 (b_kv = 2 x 10 x 4 x 512 x 2 = 81,920 B and 2 x 16 x 4 x 256 x 2 = 65,536 B).
GEMMA4_31B = "gemma4-31b-dummy"
QWEN36_27B = "qwen36-27b-dummy"
BENCH_MODELS = (GEMMA4_31B, QWEN36_27B)
GEMMA4_31B_TEXT = {
    "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
    "hidden_size": 5376, "intermediate_size": 21504,                      # G
    "num_hidden_layers": 60,                                               # G, P §C.8
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,  # G; P: 10 global
    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,  # G (sliding)
    "global_head_dim": 512, "num_global_key_value_heads": 4,               # G, P §C.9
    "attention_k_eq_v": True,                                              # G, P §C.9
    "sliding_window": 1024,                                                # G, P §B
    "vocab_size": 262144, "tie_word_embeddings": True,                     # G
    "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh",   # G
    "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,           # G (no PLE)
    "rms_norm_eps": 1e-6,                                                  # G
    "rope_parameters": {"full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                           "partial_rotary_factor": 0.25},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},  # G
    "torch_dtype": "bfloat16", **ALLOW_GLOBAL,
}
QWEN36_27B_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": 5120, "intermediate_size": 17408,                      # Q
    "num_hidden_layers": 64,                                               # Q
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],          # Q: interval 4
    "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,  # Q, P §C.9
    "attn_output_gate": True,                                              # Q
    "linear_num_key_heads": 16, "linear_num_value_heads": 48,              # Q
    "linear_key_head_dim": 128, "linear_value_head_dim": 128,             # Q
    "linear_conv_kernel_dim": 4,                                           # Q
    "mamba_ssm_dtype": "float32",                                          # Q
    "vocab_size": 248320, "tie_word_embeddings": False,                    # Q
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,                   # Q
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
                        "partial_rotary_factor": 0.25},                    # Q (text positions)
}
QWEN36_27B_TEXT["layer_types"] = QWEN36_27B_TEXT["layer_types"] * 16     # 48 GDN + 16 full


def bench_config(name: str, positions: int, special: dict) -> dict:
    """config.json of a benchmark model allowing `positions` tokens, with the lab tokenizer's
    special ids (the embedding keeps the real vocabulary's size: realistic bytes)."""
    if name == GEMMA4_31B:
        return dict(GEMMA4_31B_TEXT, max_position_embeddings=positions, **special)
    if name == QWEN36_27B:
        text = dict(QWEN36_27B_TEXT, max_position_embeddings=positions, **special)
        # Qwen 3.6 ships as Qwen3_5ForConditionalGeneration; run text-only
        # (language_model_only), the vision tower is never built. Its config: transformers'
        # Qwen3_5VisionConfig defaults (Qwen/Qwen3.5-27B's), out_hidden_size = the text width.
        return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                "text_config": text, "vision_config": {"out_hidden_size": 5120},
                "tie_word_embeddings": False, "torch_dtype": "bfloat16", **special}
    raise ValueError(f"unknown hybrid bench model {name!r} (known: {', '.join(BENCH_MODELS)})")


def engine_kwargs(cfg: dict) -> dict:
    """vLLM 0.26 arguments a hybrid config needs (see lab_kwargs): Gemma 4's global head
    attributes, Qwen 3.5's text-only start."""
    t = text_config(cfg)
    out: dict = {}
    if t.get("global_head_dim"):
        out["hf_overrides"] = {"global_head_dim": t["global_head_dim"],
                               "num_global_key_value_heads": t.get(
                                   "num_global_key_value_heads") or t["num_key_value_heads"]}
    if cfg.get("model_type") == "qwen3_5":
        out["language_model_only"] = True
    return out
