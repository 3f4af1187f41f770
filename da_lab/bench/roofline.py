"""The paper's decode-time roofline (Ho et al. 2026, §3 and §C.8) as code, for the paper's own
numbers and for any model config at a kept fraction of its global KV.

A decode step costs three terms, each charged at its own hardware ceiling:
    matmul  2 P FLOPs per token / (peak FLOPS x MFU)                  (compute-bound at scale)
    global  kept global-attention KV bytes / (peak BW x MBU)          (the one DA reduces)
    local   SWA window KV or GDN state bytes / (peak BW x MBU)        (the floor DA can't touch)
The paper charges the matmul as FLOPs, which assumes a batch large enough to amortize the
weight read; at batch 1 or 8 a real step reads every weight once, so `step_time(...,
weights=True)` also gives the matmul term as max(FLOPs time, weight bytes / (BW x MBU)).
Pure: no torch, no vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    name: str
    bw: float          # bytes/s, peak HBM bandwidth
    flops: float       # FLOP/s, dense bf16 peak
    mfu: float = 0.40  # the paper's §C.5: matmul utilization at decode
    mbu: float = 0.70  # the paper's §C.5: bandwidth utilization of a tuned memory-bound kernel

    @property
    def eff_bw(self) -> float:
        return self.bw * self.mbu

    @property
    def eff_flops(self) -> float:
        return self.flops * self.mfu


# The paper's §C.8: one B200, 8 TB/s HBM, 2.25 PFLOPS dense bf16.
B200 = Hardware("B200 (paper §C.8)", 8e12, 2.25e15)
# NVIDIA's H200 SXM datasheet: 4.8 TB/s HBM3e, 989 TFLOPS dense bf16 (1,979 with sparsity).
H200 = Hardware("H200 SXM", 4.8e12, 989e12)
HARDWARE = {"b200": B200, "h200": H200}

# The paper's per-model constants and traces (§5.1, §5.4, §C.8, §C.9): P, b_kv (global KV
# bytes per context token, bf16), s_local (bytes read per step by the efficient layers), and
# per arm the decode steps D and attended tokens A of an average response. Qwen's D is not
# printed; the paper gives DA's steps as 1.31x vanilla's and the global read as 86% of vanilla.
PAPER = {
    "gemma-4-31b": {"P": 31e9, "b_kv": 81_920, "s_local": 838.9e6,
                    "vanilla": {"D": 332, "A": 13.43e6}, "da": {"D": 448, "A": 6.45e6}},
    "qwen-3.6-27b": {"P": 27e9, "b_kv": 65_536, "s_local": 78.45e6, "step_ratio": 1.31,
                     "vanilla": {"A": 22.54e6}, "da": {"A": 15.52e6}},
}


def response_time(P: float, b_kv: float, s_local: float, steps: float, attended: float,
                  hw: Hardware = B200) -> dict:
    """The paper's §C.8 decomposition of one response's decode time, in ms."""
    t = {"matmul_ms": 2 * P * steps / hw.eff_flops * 1e3,
         "global_ms": attended * b_kv / hw.eff_bw * 1e3,
         "local_ms": steps * s_local / hw.eff_bw * 1e3}
    t["total_ms"] = sum(t.values())
    return t


@dataclass(frozen=True)
class ModelCost:
    """A model's roofline constants, from its config (`cost_of`)."""
    params: float              # P: every parameter once (tied embeddings once), as the paper
    weight_bytes: float        # what a weight-bound step reads
    b_kv: float                # global-layer K+V bytes per context token, all global layers
    swa_bytes_per_token: float  # sliding-window layers' K+V bytes per windowed token
    window: int
    state_bytes: float         # linear-attention (GDN) state, all linear layers

    def local_bytes(self, context: int) -> float:
        return self.swa_bytes_per_token * min(self.window, context) + self.state_bytes


def step_time(cost: ModelCost, hw: Hardware, context: float, batch: int = 1,
              kept: float = 1.0, weights: bool = False) -> dict:
    """One decode step of `batch` sequences at `context` tokens, `kept` of the global KV read,
    in ms. weights=True: the matmul term is at least the weight read (a small batch)."""
    matmul = batch * 2 * cost.params / hw.eff_flops
    if weights:
        matmul = max(matmul, cost.weight_bytes / hw.eff_bw)
    t = {"matmul_ms": matmul * 1e3,
         "global_ms": batch * kept * context * cost.b_kv / hw.eff_bw * 1e3,
         "local_ms": batch * cost.local_bytes(int(context)) / hw.eff_bw * 1e3}
    t["total_ms"] = sum(t.values())
    return {k: round(v, 6) for k, v in t.items()}


def _text(cfg: dict) -> dict:
    return cfg.get("text_config", cfg)


def _attn_params(t: dict, h: int, nkv: int, hd: int, k_eq_v: bool) -> int:
    nh = t["num_attention_heads"]
    gate = 2 if t.get("attn_output_gate", t.get("model_type", "").startswith("qwen3_")) else 1
    return h * nh * hd * gate + h * nkv * hd * (1 if k_eq_v else 2) + nh * hd * h


def _gdn_params(t: dict, h: int) -> int:
    kd, vd = t["linear_key_head_dim"], t["linear_value_head_dim"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    conv_dim = 2 * nk * kd + nv * vd
    return (h * (2 * nk * kd + 2 * nv * vd) + h * 2 * nv + conv_dim * t["linear_conv_kernel_dim"]
            + nv * vd * h)


def cost_of(cfg: dict, elt: int = 2) -> ModelCost:
    """Roofline constants of a Llama, Gemma 3/4 or Qwen3-Next/3.5 config (dense MLPs), with
    `elt`-byte weights and KV; the GDN recurrent state in the config's mamba_ssm_dtype (what
    vLLM 0.26 stores). Norms and biases are left out (< 0.1% of the bytes)."""
    t = _text(cfg)
    h, L = t["hidden_size"], t["num_hidden_layers"]
    kinds = t.get("layer_types") or ["full_attention"] * L
    hd = t.get("head_dim") or h // t["num_attention_heads"]
    nkv = t["num_key_value_heads"]
    k_eq_v = bool(t.get("attention_k_eq_v"))
    g_hd = t.get("global_head_dim") or hd
    g_nkv = (t.get("num_global_key_value_heads") or nkv) if k_eq_v else nkv
    mlp = 3 * h * t["intermediate_size"]
    params = b_kv = swa = state = 0
    for kind in kinds:
        if kind == "full_attention":
            params += _attn_params(t, h, g_nkv, g_hd, k_eq_v) + mlp
            b_kv += 2 * g_nkv * g_hd * elt
        elif kind == "sliding_attention":
            params += _attn_params(t, h, nkv, hd, False) + mlp
            swa += 2 * nkv * hd * elt
        elif kind == "linear_attention":
            params += _gdn_params(t, h) + mlp
            kd, vd = t["linear_key_head_dim"], t["linear_value_head_dim"]
            nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
            ssm = 4 if t.get("mamba_ssm_dtype") == "float32" else elt
            state += ((2 * nk * kd + nv * vd) * (t["linear_conv_kernel_dim"] - 1) * elt
                      + nv * kd * vd * ssm)
        else:
            raise ValueError(f"cost_of: unknown layer kind {kind!r}")
    tied = t.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
    params += t["vocab_size"] * h * (1 if tied else 2)
    return ModelCost(params=params, weight_bytes=params * elt, b_kv=b_kv,
                     swa_bytes_per_token=swa, window=int(t.get("sliding_window") or 0),
                     state_bytes=state)


def roofline_fields(cost: ModelCost, context: float, batch: int, kept: float) -> dict:
    """A bench row's roofline columns: the paper's estimate (FLOPs-charged matmul) on the
    paper's B200 and on an H200, and the H200 with the weight read as the matmul floor."""
    out = {f"roofline_{k}": step_time(cost, hw, context, batch, kept)
           for k, hw in HARDWARE.items()}
    out["roofline_h200_weights"] = step_time(cost, H200, context, batch, kept, weights=True)
    return out
