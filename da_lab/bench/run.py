"""`da-lab bench`: decode speed of stock vLLM vs the DA hook (GLOBAL / FOCUS / LOCAL), one run.

    da-lab bench [--models llama-8b-dummy,tiny] [--modes stock,focus,global,stock_kept,local]
                 [--contexts 8192,32768,65536] [--batches 1,8] [--decode-steps 64] ...
    da-lab bench --plot bench/results/bench-<run_id>.json      # the plot of an earlier run

One invocation is one run (a `run_id`) measured back to back on this machine. Every (model, mode)
is a child process (`python -m da_lab.bench.worker`, run through da_lab.engine.child) that starts
one engine and measures all its contexts x batches, so a configuration never inherits another's
plugin, compiled graphs or allocator state, and a crash costs only that configuration's rows.
Children run one after another: the next one starts (and imports vLLM) only when the current
one has exited, unless --overlap-import asks otherwise. The modes:

    stock        stock vLLM, no da_lab plugin loaded (VLLM_PLUGINS=none), the full prompt
    stock_kept   stock vLLM on a prompt as long as the prompt blocks FOCUS keeps
    global       the DA hook loaded, no tag: reads every block (hook overhead only)
    focus        the hook under <focus C2,C7>, the two chunks sized so ~15% of blocks are read
    focus_paper  the same at the paper's per-step attention ratio, 0.5 of the blocks (§5.2)
    local        the hook under <local>: scaffold + tail + response only
    global_recording   global with Lab-style recording on (staged rows + a trace file per step)
    global_grouped, focus_grouped   ... with the grouped read (issue 59, hook/grouped.py)
    stock_kept_pairs   --shared: stock, each request its own cut (head + its FOCUS pair)

Per row: decode tokens/s over `--repeats` (default 3) windows of `--decode-steps` pure decode
steps (median, min/max/stdev), the profiler's attention time and where a step's time goes, the
kept fraction of KV blocks (from the hook's records), the ideal speedup from bytes read, and
the paper's roofline for the same model, context, batch and kept fraction (roofline.py). This
module needs neither vLLM nor torch at import; the children do the measuring.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from da_lab.bench.plan import (  # noqa: F401
    DEFAULT_MODES,
    LLAMA_VOCAB,
    MODELS,
    MODES,
    N_CHUNKS,
    STOCK_MODES,
    TAGS,
    model_fields,
    prepare_model,
)
from da_lab.bench.profiling import device_kind as _device
from da_lab.bench.report import (
    add_roofline,
    check_overlap,
    ideal_speedup,
    log_line,
    ratios,
    row_stub,
    sort_key,
    table,
    write_plot,
)
from da_lab.engine.child import ChildProcess
from da_lab.engine.env import engine_name


def _ints(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"da-lab bench: expected comma-separated integers, got {s!r}") from None
    if not out or min(out) < 1:
        raise SystemExit(f"da-lab bench: expected positive integers, got {s!r}")
    return out


def _names(s: str, known: tuple[str, ...], what: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in known]
    if bad or not out:
        raise SystemExit(f"da-lab bench: unknown {what} {bad or s!r} (known: {', '.join(known)})")
    return out


def _run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() % 10000:04d}"


class Child:
    """A (model, mode) child process (engine.child.ChildProcess). Started at construction: it
    imports torch and vLLM, then waits for `go()` before it starts its engine (so with
    --overlap-import the next child's import can overlap this one's run); `finish` waits for it
    and returns its result document, with a row stub for every row it did not report."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.work = Path(tempfile.mkdtemp(prefix="da-bench-"))
        self.out_f, self.go_f = self.work / "out.json", self.work / "go"
        self.write_spec()
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}     # engine.step() is one engine step
        if spec["runner"] in ("v1", "v2"):
            env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if spec["runner"] == "v2" else "0"
        if spec["mode"] in STOCK_MODES:
            env["VLLM_PLUGINS"] = "none"     # load no general plugin: stock vLLM
        self.proc = ChildProcess(["-m", "da_lab.bench.worker", str(self.work / "spec.json"),
                                  str(self.out_f)], out=self.out_f, log=self.work / "child.log",
                                 env=env, defaults={"VLLM_LOGGING_LEVEL": "WARNING"},
                                 what=f"bench child {spec['model']} {spec['mode']}")
        self.t_spawn = self.proc.t_start
        self.t_go = None

    def write_spec(self) -> None:
        (self.work / "spec.json").write_text(json.dumps(dict(self.spec, go_file=str(self.go_f))))

    def go(self) -> None:
        self.t_go = time.time()
        self.go_f.write_text("go\n")

    def kill(self) -> None:
        self.proc.kill()
        shutil.rmtree(self.work, ignore_errors=True)

    def finish(self, timeout: float) -> dict:
        spec = self.spec
        doc, err = self.proc.wait(max(1.0, timeout - (time.time() - self.t_go)))
        if err and err.startswith("child killed"):
            err += " (--max-seconds / --budget-seconds)"
        if err or doc.get("error"):
            doc["log_tail"] = self.proc.log_tail()
        doc["error"] = doc.get("error") or err
        doc["wall_s"] = round(time.time() - self.t_go, 1)
        doc["spawned_before_go_s"] = round(self.t_go - self.t_spawn, 1)
        have = {(r["context"], r["batch"]) for r in doc.get("rows", [])}
        rows = doc.setdefault("rows", [])
        for c in spec["contexts"]:
            for b in spec["batches"]:
                if (c, b) not in have:
                    rows.append(dict(row_stub(spec["model"], c, b, spec["mode"]),
                                     error=doc["error"] or "the child reported no row"))
        shutil.rmtree(self.work, ignore_errors=True)
        return doc


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
    p.add_argument("--repeats", type=int, default=3,
                   help="timed windows of --decode-steps per row (default 3): the row gives "
                        "their median and spread (min, max, stdev)")
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
    p.add_argument("--spans", action="store_true", help="the paper's unpadded chunks: their "
                   "boundaries half a block off the grid (FOCUS keeps shared edge blocks whole)")
    p.add_argument("--shared", type=int, default=0, metavar="Q", help="one prefix-cached "
                   "corpus of CONTEXT tokens + a Q-token question per request; FOCUS per request")
    p.add_argument("--llama-vocab", type=int, default=LLAMA_VOCAB,
                   help="vocab_size of llama-8b-dummy (128256 = Llama 3's, realistic bytes)")
    p.add_argument("--record-trace", action="store_true",
                   help="also run mode global_recording: global with Lab-style recording on")
    p.add_argument("--trace-format", choices=("auto", "parquet", "jsonl.gz"), default="auto",
                   help="global_recording's trace (auto: parquet if pyarrow is installed)")
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
    p.add_argument("--overlap-import", action=argparse.BooleanOptionalAction, default=False,
                   help="import the next child (~10-25 s) while the current one runs (its "
                        "engine waits for the current one's end); rows whose timed steps it "
                        "overlapped get a note (default: off)")
    p.add_argument("--no-plot", action="store_true", help="write no HTML/PNG plot")
    p.add_argument("--cudagraph-mode", default=None, metavar="MODE",
                   help="vLLM's cudagraph_mode for every compiled child (e.g. PIECEWISE, to "
                        "measure what the grouped modes' graph mode costs alone); default: "
                        "vLLM's, PIECEWISE for the grouped modes")


def _settings(args) -> tuple[dict, str]:
    """The run's settings from the arguments (device defaults filled in), and the device name."""
    models = _names(args.models, MODELS, "model")
    modes = _names(args.modes, MODES, "mode")
    if args.record_trace and "global_recording" not in modes:
        modes.append("global_recording")
    if args.repeats < 1:
        raise SystemExit(f"da-lab bench: --repeats must be at least 1, got {args.repeats}")
    contexts, batches = _ints(args.contexts), sorted(set(_ints(args.batches)), reverse=True)
    dev, dev_name = _device()
    cuda = dev == "cuda"
    steps = args.decode_steps or (64 if cuda else 16)
    bs = args.block_size or (16 if cuda else 32)
    mnbt = args.max_num_batched_tokens or (32768 if cuda else 8192)
    # Room after the longest prompt: the warm-up, timed (every repeat) and profiled steps of
    # every batch size (requests are reused from the largest batch down), and the decode steps
    # early requests take while later ones still prefill.
    lag = max(batches) * (-(-max(contexts) // mnbt) + 1)
    per_batch = args.warmup_steps + steps * args.repeats + args.profile_steps + 2
    extra = 64 + len(batches) * per_batch + lag
    return {"models": models, "modes": modes, "contexts": contexts,
            "batches": sorted(batches), "decode_steps": steps, "repeats": args.repeats,
            "warmup_steps": args.warmup_steps, "profile_steps": args.profile_steps,
            "block_size": bs,
            "runner": args.runner if args.runner != "auto" else ("v2" if cuda else "v1"),
            "eager": args.eager if args.eager is not None else not cuda,
            "dtype": args.dtype or ("bfloat16" if cuda else "float32"),
            "max_model_len": max(contexts) + args.shared + -(-extra // bs) * bs,
            "max_num_batched_tokens": mnbt,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "focus_fraction": args.focus_fraction, "focus_tag": TAGS["focus"],
            "n_chunks": N_CHUNKS, "seed": args.seed, "overlap_import": bool(args.overlap_import),
            "llama_vocab": args.llama_vocab, "kv_cache": args.kv_cache, "spans": args.spans,
            "shared": args.shared, "cudagraph_mode": args.cudagraph_mode}, \
        dev_name


def _plan(settings: dict, args) -> list[dict]:
    """One child spec per (model, mode), in run order; model folders prepared here."""
    s, plan = settings, []
    for model in s["models"]:
        path = prepare_model(model, s["max_model_len"], args.llama_vocab)
        if (path / "SOURCE").exists():
            s[f"{model}_source"] = (path / "SOURCE").read_text().strip()
        for mode in s["modes"]:
            plan.append({"model": model, "model_path": str(path), "mode": mode,
                         "contexts": s["contexts"], "batches": sorted(s["batches"], reverse=True),
                         "max_num_seqs": max(s["batches"]), "trace_format": args.trace_format,
                         **model_fields(model, path, s["block_size"]),
                         **{k: s[k] for k in ("decode_steps", "repeats", "warmup_steps",
                                              "profile_steps", "runner", "eager",
                                              "dtype", "max_model_len", "max_num_batched_tokens",
                                              "gpu_memory_utilization", "focus_fraction", "seed",
                                              "kv_cache", "spans", "shared",
                                              "cudagraph_mode")}})
    return plan


def _take(doc: dict, res: dict, spec: dict, dev_name: str, first: bool) -> None:
    """Fold one child's result into the run's document and log its rows."""
    model, mode = spec["model"], spec["mode"]
    doc["children"].append(dict({k: v for k, v in res.items() if k != "rows"},
                                model=model, mode=mode))
    if res.get("runner") and res["runner"] not in doc["runner"]:
        doc["runner"].append(res["runner"])
    if res.get("device") and (first or doc["device"] == dev_name):
        doc["device"] = res["device"]
    if res.get("vllm"):
        doc["vllm"] = res["vllm"]
    for r in res["rows"]:
        r["ideal_speedup"] = None if (r.get("error") or r.get("skipped")) else ideal_speedup(r)
        add_roofline(r, spec)
        doc["rows"].append(r)
        sp = r.get("decode_tok_s_spread") or {}
        log_line(f"    {model} {mode} ctx {r['context']} batch {r['batch']}: " + (
            r.get("error") or r.get("skipped") or
            f"{r['decode_tok_s']} tok/s (min {sp.get('min')}, max {sp.get('max')}), attn "
            f"{r['attn_ms_per_step']} ms/step, kept {r['kept_block_fraction']}, ideal "
            f"x{r['ideal_speedup']}"))
    ok = [r for r in res["rows"] if r.get("decode_tok_s")]
    log_line(f"{model} {mode}: {len(ok)}/{len(res['rows'])} rows in {res['wall_s']} s (import "
         f"{res.get('import_s')} s, engine start {res.get('engine_start_s')} s)"
         + (f"; ERROR {res['error']}" if res.get("error") else ""))


def _run_children(plan: list[dict], doc: dict, args, dev_name: str, out: Path,
                  t_start: float) -> None:
    """The children one after another (the next one spawned early only with
    --overlap-import); the document is rewritten after each, so a partial run survives a
    kill."""
    overlap = doc["settings"]["overlap_import"]
    nxt = Child(plan[0]) if plan else None
    for i, spec in enumerate(plan):
        cur, nxt = nxt, None
        left = None if args.budget_seconds is None else \
            args.budget_seconds - (time.perf_counter() - t_start)
        if left is not None and left < 30:
            log_line(f"{spec['model']} {spec['mode']}: skipped, the run's --budget-seconds is "
                     "used up")
            cur.kill()
            doc["rows"] += [dict(row_stub(spec["model"], c, b, spec["mode"]),
                                 skipped="--budget-seconds used up")
                            for c in spec["contexts"] for b in sorted(spec["batches"])]
        else:
            timeout = args.max_seconds if left is None else min(args.max_seconds, left)
            cur.spec["max_seconds"] = timeout
            cur.write_spec()
            log_line(f"[{i + 1}/{len(plan)}] {spec['model']} {spec['mode']}: go (limit "
                 f"{timeout:.0f} s)")
            cur.go()
            if overlap and i + 1 < len(plan):
                nxt = Child(plan[i + 1])    # imports torch + vLLM while `cur` runs, then waits
            _take(doc, cur.finish(timeout + 20), spec, dev_name, first=(i == 0))
        if nxt is None and i + 1 < len(plan):
            nxt = Child(plan[i + 1])        # `cur` has exited: nothing overlaps its windows
        doc["ratios"] = ratios(doc["rows"])
        doc["wall_s"] = round(time.perf_counter() - t_start, 1)
        out.write_text(json.dumps(doc, indent=1))


def _plot_only(path: Path) -> int:
    try:
        doc = json.loads(path.read_text())
        if not (isinstance(doc, dict) and isinstance(doc.get("rows"), list)):
            raise ValueError("not a `da-lab bench` result (no \"rows\" list)")
        paths = write_plot(doc, path)
    except (OSError, ValueError, KeyError, TypeError) as e:    # JSONDecodeError is a ValueError
        why = (e.strerror if isinstance(e, OSError) and e.strerror else
               f"a row has no field {e}" if isinstance(e, KeyError) else
               f"not JSON ({e})" if isinstance(e, json.JSONDecodeError) else e)
        print(f"da-lab: --plot {path}: {why}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


def cmd_bench(args) -> int:
    if args.plot:
        return _plot_only(Path(args.plot))
    t_start = time.perf_counter()
    settings, dev_name = _settings(args)
    run_id = _run_id()
    out = Path(args.out) if args.out else Path("bench/results") / f"bench-{run_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"run_id": run_id, "command": "da-lab " + " ".join(sys.argv[1:]),
           "device": dev_name, "vllm": engine_name(), "runner": [],
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "settings": settings, "children": [], "rows": [], "ratios": []}
    plan = _plan(settings, args)
    s = settings
    log_line(f"run {run_id}: {len(plan)} children ({', '.join(s['models'])} x "
         f"{', '.join(s['modes'])}), contexts {s['contexts']}, batches {s['batches']}, "
         f"{s['repeats']} x {s['decode_steps']} decode steps, block size {s['block_size']}, "
         f"runner {s['runner']}, {'eager' if s['eager'] else 'compiled + graphs'}")
    _run_children(plan, doc, args, dev_name, out, t_start)
    check_overlap(doc)
    doc["rows"].sort(key=sort_key)
    doc["ratios"] = sorted(ratios(doc["rows"]), key=lambda x: sort_key(dict(x, mode="")))
    doc["wall_s"] = round(time.perf_counter() - t_start, 1)
    out.write_text(json.dumps(doc, indent=1))
    print(table(doc), flush=True)
    log_line(f"wrote {out} ({doc['wall_s']} s)")
    if not args.no_plot:
        try:
            for p in write_plot(doc, out):
                log_line(f"wrote {p}")
        except ImportError as e:      # e.g. no plotly on the GPU machine
            log_line(f"no plot ({e}); `da-lab bench --plot {out}` makes it where plotly is")
    return 0
