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


# ---- where a step's time goes (hybrid models): global attention, the local floor, matmuls ----
# Gated DeltaNet's kernels (vLLM's fla ops, its conv1d, the CPU GDN op): the linear layers'
# floor, matched before the attention names ("cpu_gdn_attention_core" says attention too).
GDN_PATTERNS = ("gated_delta", "fused_recurrent", "causal_conv1d", "gdn", "solve_tril",
                "recompute_w_u", "scaled_dot_kkt", "chunk_local_cumsum", "l2norm")
# Matrix multiplies: cuBLAS(Lt) / nvjet / CUTLASS GEMMs on the GPU, ATen / oneDNN on the CPU
# (matched after attention: FlashAttention 3's kernels are cutlass::device_kernel<flash::...>).
MATMUL_PATTERNS = ("gemm", "nvjet", "cublas", "splitkreduce", "xmma", "matmul", "aten::mm",
                   "aten::addmm", "aten::bmm", "onednn", "dnnl", "mkl")
SPLIT_KEYS = ("global_attention", "local", "attention_unsplit", "matmul", "other")
# Triton attention's second pass (its 3D split-softmax decode path): attention, but its grid is
# (tokens, query heads) for every layer kind alike.
ATTN_SECOND_PASS = ("reduce_segments",)


def layer_heads(cfg: dict) -> dict:
    """What tells a model's attention kernel launches apart: the global and the local layers'
    KV head counts (a Triton / FlashAttention decode grid's second dimension), and the local
    layers' kind ("swa", "gdn" or None)."""
    t = cfg.get("text_config", cfg)
    kinds = set(t.get("layer_types") or ["full_attention"])
    nkv = t.get("num_key_value_heads")
    glob = (t.get("num_global_key_value_heads") or nkv) if t.get("attention_k_eq_v") else nkv
    local = "swa" if "sliding_attention" in kinds else "gdn" if "linear_attention" in kinds \
        else None
    return {"global_kv_heads": glob, "local_kv_heads": nkv if local == "swa" else None,
            "local": local}


def classify(name: str, grid, heads: dict) -> str:
    """One kernel (or CPU op) launch's share: see SPLIT_KEYS. Sliding and global layers run the
    same attention kernel (Triton's kernel_unified_attention on Gemma 4, every layer): told
    apart by the grid's KV-head dimension where their head counts differ, else unsplit."""
    low = name.lower()
    if any(p in low for p in GDN_PATTERNS):
        return "local"
    if any(p in low for p in ATTN_SECOND_PASS):
        return "attention_unsplit" if heads.get("local") == "swa" else "global_attention"
    if any(p in low for p in ATTN_PATTERNS) and not any(x in low for x in ATTN_EXCLUDE):
        if heads.get("local") != "swa":
            return "global_attention"
        g, loc = heads.get("global_kv_heads"), heads.get("local_kv_heads")
        if grid and len(grid) >= 2 and g != loc:
            if grid[1] == g:
                return "global_attention"
            if grid[1] == loc:
                return "local"
        return "attention_unsplit"
    if any(p in low for p in MATMUL_PATTERNS):
        return "matmul"
    return "other"


def _launches(prof, cuda: bool) -> list[tuple[str, tuple | None, float]]:
    """(name, grid, self time in us) of every kernel (CUDA, from the Chrome trace, which alone
    keeps each launch's grid) or CPU op (aggregated: CPU ops carry no grid)."""
    if not cuda:
        return [(e.key, None, e.self_cpu_time_total) for e in prof.key_averages()
                if not any(w in e.key.lower() for w in CPU_WRAPPERS)]
    import json
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        events = json.loads(Path(path).read_text()).get("traceEvents", [])
    finally:
        os.unlink(path)
    return [(ev.get("name", ""), tuple((ev.get("args") or {}).get("grid") or ()) or None,
             float(ev.get("dur") or 0)) for ev in events if ev.get("cat") == "kernel"]


def time_split(prof, steps: int, cuda: bool, heads: dict) -> dict:
    """Per step, ms: global attention, the local floor (SWA kernels or GDN), attention the
    kernels can't attribute, matmuls, everything else."""
    split = dict.fromkeys(SPLIT_KEYS, 0.0)
    for name, grid, us in _launches(prof, cuda):
        split[classify(name, grid, heads)] += us
    return {"time_split_ms": {k: round(v / 1e3 / steps, 4) for k, v in split.items()},
            "time_split_source": "kernels (grid)" if cuda else "CPU ops (self time)"}
