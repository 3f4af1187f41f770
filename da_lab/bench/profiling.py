"""The bench child's byte and time accounting: weight bytes a decode step reads, and the
attention kernels' time from a torch.profiler run."""

from __future__ import annotations

import os
from pathlib import Path

# Kernel / op names counted as attention (case-insensitive substrings), and names that match
# those but are not the attention read (the KV write, metadata planning, RoPE).
ATTN_PATTERNS = ("flash", "fwd_kernel", "flashattn", "attention", "attn", "fmha")
ATTN_EXCLUDE = ("reshape_and_cache", "scheduler_metadata", "rotary", "rope")
CPU_WRAPPERS = ("unified_attention",)    # python-side custom-op wrappers on the CPU path


def device_kind() -> tuple[str, str]:
    """('cuda' | 'cpu', device name), without importing torch or vLLM (the children report the
    name torch gives; this one only picks the defaults)."""
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    return "cuda", line.split(":", 1)[1].strip()
        except OSError:
            pass
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) != "" and Path("/dev/nvidiactl").exists():
        return "cuda", "cuda"
    name = "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "cpu", name


def device_name(torch) -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def class_name(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def weight_bytes(model) -> tuple[int, int]:
    """(all parameter bytes, bytes a decode step reads): the input embedding table is only
    gathered (a few rows), so it is left out of the read unless it is tied to the LM head."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * p.element_size()
    embed = 0
    for name, mod in model.named_modules():
        if name.endswith("embed_tokens"):
            w = getattr(mod, "weight", None)
            head = getattr(getattr(model, "lm_head", None), "weight", None)
            if w is not None and (head is None or head.data_ptr() != w.data_ptr()):
                embed = w.numel() * w.element_size()
            break
    return total, total - embed


def config_params(cfg: dict) -> tuple[int, int]:
    """(parameters, input-embedding parameters) of a Llama config with untied embeddings."""
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    embed = cfg["vocab_size"] * h
    return (2 * embed + h + layers * (h * (nh + 2 * nkv) * hd + nh * hd * h + 3 * h * inter
                                      + 2 * h)), embed


def attention_time(prof, steps: int, cuda: bool) -> dict:
    """Attention kernel time per step from a torch.profiler run over `steps` engine steps."""
    matched, top = {}, []
    for e in prof.key_averages():
        name = e.key
        low = name.lower()
        if cuda:
            # Kernels (and copies) carry self device time; CPU-side events carry none.
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0)
            if not t or t <= 0:
                continue
        else:
            t = e.self_cpu_time_total
            if any(w in low for w in CPU_WRAPPERS):
                continue
        top.append((t, name))
        if any(p in low for p in ATTN_PATTERNS) and not any(x in low for x in ATTN_EXCLUDE):
            matched[name] = matched.get(name, 0.0) + t
    top.sort(reverse=True)
    out = {"attn_kernels": {k: round(v / 1e3 / steps, 4) for k, v in matched.items()},
           "profile_top": [[n, round(t / 1e3 / steps, 4)] for t, n in top[:8]],
           "profile_steps": steps}
    if matched:
        out["attn_ms_per_step"] = round(sum(matched.values()) / 1e3 / steps, 4)
    else:
        out["attn_ms_per_step"] = None
        out["note"] = ("no attention kernel seen by the profiler" + (
            " (CUDA graph replays may hide kernels from it)" if cuda else ""))
    return out
