"""Diagram 1's data: the model skeleton and what vLLM put in each slot at load time.

Read from the loaded nn.Module in the worker, never assumed: the attention backend and impl of
each attention layer, the LinearMethod of each linear layer, the implementation each CustomOp
dispatched to (native torch vs a platform kernel), the compilation passes in effect, and the
config values that decided them.
"""

from __future__ import annotations


def _cls(obj) -> str:
    return type(obj).__name__ if obj is not None else None


def _custom_op(mod) -> dict:
    fwd = getattr(mod, "_forward_method", None)
    name = getattr(fwd, "__name__", None) or getattr(getattr(fwd, "__wrapped__", None),
                                                     "__name__", str(fwd))
    return {"class": _cls(mod), "dispatch": name,
            "kernel": name is not None and name != "forward_native"}


def _linear(mod) -> dict:
    return {"class": _cls(mod), "linear_method": _cls(getattr(mod, "quant_method", None))}


def _slot(name: str, mod) -> dict | None:
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.attention import Attention  # 0.26 ... 0.33 (needs.py)
    from vllm.model_executor.layers.linear import LinearBase
    if isinstance(mod, Attention):
        return {"slot": "attention", "class": _cls(mod),
                "backend": mod.attn_backend.get_name(), "impl": _cls(mod.impl),
                "head_size": mod.head_size, "num_heads": mod.num_heads,
                "num_kv_heads": mod.num_kv_heads,
                "sliding_window": getattr(mod, "sliding_window", None),
                "kv_cache_dtype": getattr(mod, "kv_cache_dtype", None)}
    if isinstance(mod, LinearBase):
        return {"slot": "linear", **_linear(mod)}
    if isinstance(mod, CustomOp):
        d = {"slot": "custom_op", **_custom_op(mod)}
        if "RMSNorm" in d["class"]:
            # Llama calls norm(x, residual) for every norm but the very first: with the kernel
            # path that is one fused add+RMSNorm; natively a torch add, then the norm.
            d["fused_residual"] = d["kernel"] and not name.endswith("layers.0.input_layernorm")
        return d
    if "Embedding" in _cls(mod) or "ParallelLMHead" in _cls(mod):
        return {"slot": "embedding", **_linear(mod)}
    return None


def skeleton(runner) -> dict:
    """The loaded model, bottom to top, with each slot's injected implementation."""
    model = runner.get_model()
    mc = runner.model_config
    hf = mc.hf_text_config
    cc = runner.vllm_config.compilation_config
    pc = cc.pass_config
    slots = []
    for name, mod in model.named_modules():
        s = _slot(name, mod)
        if s is not None:
            slots.append({"name": name, **s})
    fusions = {k: v for k, v in vars(pc).items()
               if (k.startswith("fuse_") or k.startswith("enable_")) and isinstance(v, bool)}
    return {
        "model": mc.model, "architecture": (getattr(hf, "architectures", None) or [None])[0],
        "model_class": _cls(model),
        "config": {"hidden_size": hf.hidden_size, "num_layers": hf.num_hidden_layers,
                   "num_heads": hf.num_attention_heads,
                   "num_kv_heads": getattr(hf, "num_key_value_heads", None),
                   "head_size": mc.get_head_size(), "vocab_size": hf.vocab_size,
                   "sliding_window": getattr(hf, "sliding_window", None),
                   "dtype": str(mc.dtype).replace("torch.", ""),
                   "quantization": mc.quantization,
                   "max_model_len": mc.max_model_len},
        "compilation": {"mode": str(cc.mode), "cudagraph_mode": str(cc.cudagraph_mode),
                        "custom_ops": list(cc.custom_ops),
                        "enabled_custom_ops": sorted(cc.enabled_custom_ops),
                        "disabled_custom_ops": sorted(cc.disabled_custom_ops),
                        "fusions": fusions},
        "runner": f"{type(runner).__module__}.{type(runner).__qualname__}",
        "slots": slots,
    }
