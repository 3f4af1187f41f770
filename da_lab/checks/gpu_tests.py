"""DA on the GPU, checked: every model x model runner x graph mode against the oracle.

    python -m da_lab.checks.gpu_tests [--out bench/results/gpu-tests-<date>.json]

needs vLLM (0.26) and a CUDA GPU; `make test` never runs it. Each case runs in its own process
(the runner is chosen by VLLM_USE_V2_MODEL_RUNNER before vLLM starts), all cases at once on the
one GPU. A case:
  1. starts a Lab on the GPU (bf16; eager, or the default compiled mode with FULL_AND_PIECEWISE
     CUDA graphs), checks that the runner class is the one asked for;
  2. runs three seed-scenario requests together, the director writing
     <focus C3,C7> -> <local> -> <global>, <focus C5> alone, and <local 1>;
  3. replays each request through transformers in float32 with the hook's per-position mask
     history (da_lab.checks.oracle) and compares the engine's greedy tokens wherever the reference's
     top-2 logit gap is at least --threshold (bf16 near-ties are counted, not compared).
The unmasked reference must differ somewhere, or the case proves nothing and fails.
Compiled mode is then compared with eager the same way (positions above the threshold).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import date, datetime, timezone
from pathlib import Path

MODELS = ("tiny", "llama-1b-dummy")
RUNNERS = ("v1", "v2")
GRAPHS = ("eager", "full_and_piecewise")
SCENARIOS = {
    "focus_local_global": [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")],
    "focus_only": [(2, "<focus C5>")],
    "local_1": [(3, "<local 1>")],
}


def model_folder(name: str) -> Path:
    if name == "tiny":
        from da_lab.engine.models import model_path

        return model_path("da-tiny-v1")
    from da_lab.engine.dummy_models import build

    return build(name)


def run_case(model: str, runner: str, graphs: str, max_tokens: int = 40) -> dict:
    """One case in this process: engine run, then the oracle (engine shut down first)."""
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if runner == "v2" else "0"
    import torch

    from da_lab.engine.lab import Lab
    from da_lab.checks.oracle import check, load_reference

    path = str(model_folder(model))
    t0 = time.perf_counter()
    # runner=None: the Lab only sets the env var; we check the class ourselves and report it.
    lab = Lab(path, num_blocks=160, max_model_len=2048, eager=(graphs == "eager"),
              kv_cache_memory_bytes=1 << 30)   # fixed: no memory profiling to race
    start_s = time.perf_counter() - t0
    info = {"runner_class": lab.runner_class, "runner_ran": lab.runner_kind,
            "cudagraph_mode": lab._graph_mode(), "backend": lab.tracker.backend,
            "engine_start_s": round(start_s, 1),
            "async_scheduling": bool(lab.engine.vllm_config.scheduler_config.async_scheduling)}
    prompt = lab.seed_prompt()
    rids = {name: lab.add_request(prompt, tags=tags, max_tokens=max_tokens)
            for name, tags in SCENARIOS.items()}
    steps = 0
    max_unseen = 0
    while lab.has_unfinished():
        rec = lab.step()
        steps += 1
        for r in rec.requests:
            max_unseen = max(max_unseen, r.get("tokens_unseen", 0))
    reqs = {}
    for name, rid in rids.items():
        st = lab.request_state(rid)
        r = lab.requests[rid]
        reqs[name] = {"tokens": r["token_ids"], "forced": sorted(r["forced"]),
                      "history": [(a, b, None if k is None else [int(x) for x in k])
                                  for a, b, k in st.mask_history],
                      "events": [e["kind"] for e in st.events],
                      "masked_steps": sum(k is not None for _, _, k in st.mask_history)}
    info["steps"] = steps
    info["max_tokens_unseen"] = max_unseen
    lab.shutdown()
    del lab
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    ref = load_reference(path, device="cuda" if torch.cuda.is_available() else "cpu")
    for name, r in reqs.items():
        res = check(ref, prompt.token_ids, r["tokens"], r["history"], prompt.layout.block_size,
                    set(r["forced"]))
        r["ref_masked"] = res.masked_tokens
        r["ref_unmasked"] = res.unmasked_tokens
        r["gap"] = [round(g, 4) for g in res.top2_gap]
    return {"model": model, "runner": runner, "graphs": graphs, **info, "requests": reqs}


def score(case: dict, threshold: float) -> dict:
    """Compare engine vs masked reference where the gap is >= threshold."""
    compared = ties = mism = unmasked_diff = masked_steps = 0
    where = []
    for name, r in case["requests"].items():
        forced = set(r["forced"])
        masked_steps += r["masked_steps"]
        for i, tok in enumerate(r["tokens"]):
            if i in forced:
                continue
            if r["ref_unmasked"][i] != tok:
                unmasked_diff += 1
            if r["gap"][i] < threshold:
                ties += 1
                continue
            compared += 1
            if r["ref_masked"][i] != tok:
                mism += 1
                where.append(f"{name}@{i}")
    ok_runner = case["runner_ran"] == case["runner"]
    passed = ok_runner and mism == 0 and compared > 0 and unmasked_diff > 0 and masked_steps > 0
    return {"passed": passed, "tokens_compared": compared, "near_ties": ties,
            "mismatches": mism, "mismatch_at": where[:20],
            "unmasked_reference_differs_at": unmasked_diff, "masked_steps": masked_steps,
            "runner_as_asked": ok_runner}


def compare_graphs(eager: dict, graphs: dict, threshold: float) -> dict:
    """Compiled vs eager tokens, wherever the (eager run's) reference gap is >= threshold."""
    compared = diff = 0
    for name, r in eager["requests"].items():
        g = graphs["requests"].get(name)
        if g is None:
            continue
        for i, (a, b) in enumerate(zip(r["tokens"], g["tokens"])):
            if i in set(r["forced"]) or r["gap"][i] < threshold:
                continue
            if r["tokens"][:i] != g["tokens"][:i]:      # diverged at an earlier near-tie
                break
            compared += 1
            diff += a != b
    return {"eager_tokens_compared": compared, "eager_mismatches": diff}


def child(args) -> int:
    try:
        out = run_case(args.case[0], args.case[1], args.case[2])
    except Exception as e:          # noqa: BLE001 - a broken case is reported, not lost
        import traceback

        out = {"model": args.case[0], "runner": args.case[1], "graphs": args.case[2],
               "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
    Path(args.case_out).write_text(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.checks.gpu_tests", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="result JSON (default bench/results/gpu-tests-<date>.json)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--threshold", type=float, default=0.25,
                    help="top-2 logit gap under which a position is a near-tie (default 0.25)")
    ap.add_argument("--timeout", type=int, default=540, help="seconds per case")
    ap.add_argument("--raw", help="folder for each case's raw JSON (tokens, gaps, histories)")
    ap.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--case-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        return child(args)

    import torch
    import vllm

    out = Path(args.out or f"bench/results/gpu-tests-{date.today().isoformat()}.json")
    raw = Path(args.raw) if args.raw else out.with_suffix("")
    raw.mkdir(parents=True, exist_ok=True)
    models = args.models.split(",")
    for m in models:                 # build once, before the cases race for it
        model_folder(m)
    cases = [(m, r, g) for m in models for r in args.runners.split(",")
             for g in args.graphs.split(",")]
    t0 = time.perf_counter()
    procs = []
    for m, r, g in cases:
        # Own compile cache per case: the cases compile at the same time.
        env = dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr",
                   VLLM_CACHE_ROOT=f"/tmp/da_lab_vllm_cache/{m}-{r}-{g}")
        f = raw / f"{m}-{r}-{g}.json"
        f.unlink(missing_ok=True)
        log = open(raw / f"{m}-{r}-{g}.log", "w")
        procs.append((f, log, subprocess.Popen(
            [sys.executable, "-m", "da_lab.checks.gpu_tests", "--case", m, r, g, "--case-out", str(f)],
            stdout=log, stderr=subprocess.STDOUT, env=env)))
    results = []
    for (m, r, g), (f, log, p) in zip(cases, procs):
        try:
            p.wait(timeout=max(1, args.timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        if f.exists():
            case = json.loads(f.read_text())
        else:
            tail = (raw / f"{m}-{r}-{g}.log").read_text()[-3000:]
            case = {"model": m, "runner": r, "graphs": g, "error": f"no result (rc "
                    f"{p.returncode}); log tail: {tail}"}
        results.append(case)
    by_key = {(c["model"], c["runner"], c["graphs"]): c for c in results}
    rows = []
    for c in results:
        row = {"model": c["model"], "runner": c["runner"], "graphs": c["graphs"]}
        if "error" in c:
            row.update(passed=False, tokens_compared=0, near_ties=0, error=c["error"][-1500:])
        else:
            row.update(score(c, args.threshold))
            row.update({k: c[k] for k in ("runner_class", "cudagraph_mode", "backend",
                                          "async_scheduling", "max_tokens_unseen",
                                          "engine_start_s", "steps")})
            e = by_key.get((c["model"], c["runner"], "eager"))
            if c["graphs"] != "eager" and e is not None and "error" not in e:
                cmp = compare_graphs(e, c, args.threshold)
                row.update(cmp)
                row["passed"] = row["passed"] and cmp["eager_mismatches"] == 0
        rows.append(row)
    doc = {"device": torch.cuda.get_device_name(), "vllm": vllm.__version__,
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": "python -m da_lab.checks.gpu_tests " + " ".join(argv or sys.argv[1:]),
           "threshold": args.threshold, "wall_s": round(time.perf_counter() - t0, 1),
           "cases": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    for r in rows:
        print(f"{r['model']:16} {r['runner']:3} {r['graphs']:19} "
              f"{'PASS' if r['passed'] else 'FAIL'} compared={r['tokens_compared']} "
              f"near_ties={r['near_ties']} {r.get('error', '')[:300]}")
    print(f"wrote {out}")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
