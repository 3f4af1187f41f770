"""Benchmark: DA inside `vllm serve`, measured by vLLM's own serving benchmark, in one run.

    python -m da_lab.bench.timing.serve_gpu --out bench/results/serve-h200-DATE.json \\
        [--model llama-8b-dummy] [--input-len 65536] [--output-len 512] [--concurrency 8]

Two servers on the same machine, one after the other, each serving the same workload that
`vllm bench serve` (vllm.benchmarks.serve: the random dataset, --ignore-eos, every request in
flight at once) sends:
    stock server (VLLM_PLUGINS=none, vLLM exactly as installed):
        stock            prompts of --input-len tokens
        stock_kept       prompts as long as what FOCUS keeps (head + C2 + C7 + tail)
    DA server (`da-lab serve`: the hook and the endpoint plugin loaded):
        plugin_plain     prompts of --input-len, no layout: what every non-DA user pays
        da_global        the layout, no tag: the hook's own cost
        da_global_tag    the layout and the director's <global> at output 0 (keeps every block;
                         its first token is text, as da_focus's is: see serve-h200-2026-12-01.md)
        da_focus         the layout and the director's <focus C2,C7> at output 0
                         (`python -m da_lab.bench.served`: the --extra-body of every request)
Each row keeps vLLM's own result (output tok/s, TTFT, TPOT, ITL percentiles); the ratios the
issue asks for are computed from them at the end. Prefill is untouched by DA, so TTFT and the
TPOT share of the prefills that stall decodes are reported beside the decode-only ITL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KEEP = ("completed", "duration", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "total_input_tokens",
        "total_output_tokens", "failed")


def _wait(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1.0)
    raise RuntimeError(f"the server was not ready after {timeout:.0f} s")


def _server(kind: str, args, port: int, log: Path) -> subprocess.Popen:
    """Start a stock or DA server for args.model; the same vLLM options for both."""
    from da_lab.serve.launch import command, server_env

    ns = argparse.Namespace(model=args.model, host="127.0.0.1", port=port)
    # No prefix caching: every run measures prefill and decode of its own prompts.
    opts = ["--max-model-len", str(args.max_model_len), "--gpu-memory-utilization", "0.9",
            "--max-num-seqs", str(max(args.concurrency, 8)), "--no-enable-prefix-caching",
            *args.vllm_args]
    import torch

    cmd = command(ns, opts, cuda=torch.cuda.is_available())
    env = server_env()
    env.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    if kind == "stock":
        env["VLLM_PLUGINS"] = "none"          # no general plugin at all: vLLM as installed
        env.pop("DA_LAB_SERVE", None)
    print(f"[{kind} server] {' '.join(cmd[1:])}", flush=True)
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _bench(args, port: int, input_len: int, extra: dict | None, out: Path) -> dict:
    """One `vllm bench serve` run (vLLM's module, called as its CLI calls it:
    da_lab/engine/bench_serve.py)."""
    from da_lab.serve.launch import model_folder

    folder, _ = model_folder(args.model)
    cli = ["--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--model", folder,
           "--tokenizer", folder, "--dataset-name", "random", "--random-input-len",
           str(input_len), "--random-output-len", str(args.output_len), "--random-range-ratio",
           "0", "--num-prompts", str(args.num_prompts), "--max-concurrency",
           str(args.concurrency), "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl",
           "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out.parent),
           "--result-filename", out.name, "--seed", str(args.seed), "--save-detailed"]
    if extra is not None:
        cli += ["--extra-body", json.dumps(extra)]
    before = _engine_itl(port)
    subprocess.run([sys.executable, "-m", "da_lab.engine.bench_serve", *cli], check=True)
    res = json.loads(out.read_text())
    row = {k: res.get(k) for k in KEEP}
    row.update(_stream_shape(res))
    row.update(_itl_delta(before, _engine_itl(port)))
    return row


def _stream_shape(res: dict) -> dict:
    """How many tokens each streamed chunk carried: vLLM merges a request's outputs when the
    API server's stream falls behind, and bench serve's ITL is per chunk, not per token."""
    chunks = [len(x) + 1 for x in res.get("itls") or []]      # + the first token's chunk
    toks = res.get("output_lens") or []
    if not chunks or len(chunks) != len(toks):
        return {}
    return {"chunks_per_request": round(sum(chunks) / len(chunks), 1),
            "tokens_per_chunk": round(sum(toks) / max(1, sum(chunks)), 2)}


def _engine_itl(port: int) -> dict | None:
    """vLLM's own vllm:inter_token_latency_seconds histogram (engine-core timestamps per
    token, so unaffected by how the stream was chunked), summed over its label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    names = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    found: dict = {}                 # older vLLMs name the same histogram the second way
    for fam in text_string_to_metric_families(text):
        if fam.name.removesuffix("_seconds") + "_seconds" not in names:
            continue
        out = found.setdefault(fam.name.removesuffix("_seconds"),
                               {"sum": 0.0, "count": 0.0, "le": {}})
        for smp in fam.samples:
            if smp.name.endswith("_sum"):
                out["sum"] += smp.value
            elif smp.name.endswith("_count"):
                out["count"] += smp.value
            elif smp.name.endswith("_bucket"):
                le = float(smp.labels["le"])
                out["le"][le] = out["le"].get(le, 0.0) + smp.value
    return next((found[n.removesuffix("_seconds")] for n in names
                 if n.removesuffix("_seconds") in found), None)


def _itl_delta(a: dict | None, b: dict | None) -> dict:
    """The run's engine-side ITL: exact mean (sum/count) and a median interpolated within
    vLLM's histogram buckets (coarse: 10, 25, 50, 75, 100 ms ...)."""
    if not a or not b or b["count"] <= a["count"]:
        return {}
    n = b["count"] - a["count"]
    cum = sorted((le, b["le"][le] - a["le"].get(le, 0.0)) for le in b["le"])
    median, lo, below = None, 0.0, 0.0
    for le, c in cum:
        if c >= n / 2:
            hi = le if le != float("inf") else lo
            median = lo + (hi - lo) * ((n / 2 - below) / max(c - below, 1e-9))
            break
        lo, below = le, c
    return {"engine_itl_tokens": int(n),
            "engine_mean_itl_ms": round((b["sum"] - a["sum"]) / n * 1e3, 2),
            "engine_median_itl_ms": None if median is None else round(median * 1e3, 1)}


def _kept_len(args) -> int:
    from da_lab.bench.plan import bench_layout, kept_prompt_len

    layout = bench_layout(args.input_len - 64, 32, response_tokens=args.output_len // 2)
    return kept_prompt_len(layout)


def _ratios(rows: dict) -> dict:
    def r(a, b, key, inverse=False):
        x, y = rows.get(a, {}).get(key), rows.get(b, {}).get(key)
        if not x or not y:
            return None
        return round(y / x if inverse else x / y, 3)

    def over_repeats(name, key):
        vals = sorted(v[key] for k, v in rows.items()
                      if (k == name or k.startswith(name + "_r")) and v.get(key))
        return vals[len(vals) // 2] if vals else None     # the median run (upper, if even)

    plain, stock = over_repeats("plugin_plain", "output_throughput"), \
        over_repeats("stock", "output_throughput")
    return {
        "focus_vs_global_median_itl": r("da_focus", "da_global", "median_itl_ms", True),
        # both write a tag (text) at output 0: the same first-token detokenizer cost
        "focus_vs_global_tag_median_itl": r("da_focus", "da_global_tag", "median_itl_ms", True),
        "focus_vs_global_tag_engine_mean_itl": r("da_focus", "da_global_tag",
                                                 "engine_mean_itl_ms", True),
        "focus_vs_stock_kept_median_itl": r("da_focus", "stock_kept", "median_itl_ms", True),
        "focus_vs_global_engine_mean_itl": r("da_focus", "da_global", "engine_mean_itl_ms",
                                             True),
        "focus_vs_global_engine_median_itl": r("da_focus", "da_global",
                                               "engine_median_itl_ms", True),
        "focus_vs_stock_kept_engine_mean_itl": r("da_focus", "stock_kept",
                                                 "engine_mean_itl_ms", True),
        "focus_vs_global_output_tok_s": r("da_focus", "da_global", "output_throughput"),
        "focus_vs_global_mean_tpot": r("da_focus", "da_global", "mean_tpot_ms", True),
        "plugin_plain_vs_stock_output_tok_s": r("plugin_plain", "stock", "output_throughput"),
        "plugin_plain_vs_stock_output_tok_s_median_of_repeats":
            round(plain / stock, 3) if plain and stock else None,
        "plugin_plain_vs_stock_median_itl": r("plugin_plain", "stock", "median_itl_ms", True),
        "global_vs_stock_median_itl": r("da_global", "stock", "median_itl_ms", True),
        "global_vs_stock_engine_mean_itl": r("da_global", "stock", "engine_mean_itl_ms", True),
    }


def _phase(kind: str, runs: list, args, work: Path, port: int) -> dict:
    log = work / f"{kind}-server.log"
    proc = _server(kind, args, port, log)
    rows = {}
    try:
        t0 = time.monotonic()
        _wait(f"http://127.0.0.1:{port}", proc, args.ready_timeout)
        rows["_start_s"] = round(time.monotonic() - t0, 1)
        for name, length, extra in runs:
            print(f"[{kind} server] {name}: {length}-token prompts", flush=True)
            rows[name] = _bench(args, port, length, extra, work / f"{name}.json")
            rows[name]["input_len"] = length
            print(f"  {name}: {json.dumps(rows[name])}", flush=True)
        if kind == "da":      # the DA series on the server's own /metrics after the runs
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                rows["_metrics"] = [ln for ln in r.read().decode().splitlines()
                                    if ln.startswith("da_lab:")]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    rows["_server_exit"] = proc.returncode
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-8b-dummy")
    ap.add_argument("--input-len", type=int, default=65536)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-prompts", type=int, default=None, help="default: --concurrency")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1,
                    help="run stock and plugin_plain this many times (their ratio is noisy)")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--only", default="stock,da", help="which servers: stock, da")
    ap.add_argument("--runs", default=None,
                    help="only these runs of the servers' lists, e.g. da_global,da_focus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vllm-arg", dest="vllm_args", action="append", default=[],
                    help="one more `vllm serve` option for both servers (repeatable)")
    ap.add_argument("--work", default="/tmp/serve_bench")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="merge earlier --only runs (e.g. the stock and the DA server, run in "
                         "separate calls) into --out, with the ratios over all their rows")
    args = ap.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out, argv)
    args.num_prompts = args.num_prompts or args.concurrency
    args.max_model_len = args.max_model_len or args.input_len + args.output_len + 256
    from da_lab.bench.served import extra_body
    from da_lab.serve.launch import free_port

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    kept = _kept_len(args)
    body = {m: extra_body(args.input_len, args.output_len, m)
            for m in ("global", "focus", "global_tag")}
    rows: dict = {}
    again = [f"_r{i + 1}" for i in range(1, args.repeats)]
    phases = {"stock": [("stock", args.input_len, None), ("stock_kept", kept, None),
                        *[("stock" + r, args.input_len, None) for r in again]],
              "da": [("plugin_plain", args.input_len, None),
                     *[("plugin_plain" + r, args.input_len, None) for r in again],
                     ("da_global", args.input_len, body["global"]),
                     ("da_global_tag", args.input_len, body["global_tag"]),
                     ("da_focus", args.input_len, body["focus"])]}
    if args.runs:
        want = set(args.runs.split(","))
        phases = {k: [r for r in v if r[0] in want] for k, v in phases.items()}
    servers = {}
    for kind in args.only.split(","):
        got = _phase(kind, phases[kind], args, work, free_port("127.0.0.1"))
        servers[kind] = {"start_s": got.pop("_start_s", None), "exit": got.pop("_server_exit"),
                         "da_metrics": got.pop("_metrics", None)}
        rows.update(got)
    doc = {"command": "python -m da_lab.bench.timing.serve_gpu " + " ".join(argv or sys.argv[1:]),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "machine": platform.node(), "model": args.model, "input_len": args.input_len,
           "kept_len": kept, "output_len": args.output_len, "concurrency": args.concurrency,
           "num_prompts": args.num_prompts, "extra_body": body, "servers": servers,
           "rows": rows, "ratios": _ratios(rows), "wall_s": round(time.time() - t0, 1),
           "env": {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "DA_LAB"))}}
    try:
        import torch
        doc["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        import vllm
        doc["vllm"] = vllm.__version__
    except Exception as e:         # the document is still worth writing
        doc["device_error"] = repr(e)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"ratios": doc["ratios"], "servers": servers}, indent=1))
    return 0


def combine(paths: list[str], out: str, argv) -> int:
    docs = [json.loads(Path(p).read_text()) for p in paths]
    doc = dict(docs[0], rows={}, servers={}, parts=[d["command"] for d in docs],
               command="python -m da_lab.bench.timing.serve_gpu " + " ".join(argv or sys.argv[1:]),
               wall_s=round(sum(d.get("wall_s", 0) for d in docs), 1))
    for d in docs:
        doc["rows"].update(d["rows"])
        doc["servers"].update(d["servers"])
    doc["ratios"] = _ratios(doc["rows"])
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"ratios": doc["ratios"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
