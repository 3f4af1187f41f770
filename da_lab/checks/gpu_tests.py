"""DA on the GPU, checked: every model x model runner x graph mode against the oracle.

    python -m da_lab.checks.gpu_tests [--out bench/results/gpu-tests-<date>.json]
    python -m da_lab.checks.gpu_tests --device cpu      # CPU smoke: tiny model, float32

needs vLLM (0.26) and a CUDA GPU for the real run; `make test` never runs it. Each case runs in
its own process (engine.child; the runner is chosen by VLLM_USE_V2_MODEL_RUNNER before vLLM
starts), all cases at once on the one GPU. A case:
  1. starts a Lab (GPU: bf16; eager, or the default compiled mode with FULL_AND_PIECEWISE CUDA
     graphs), checks that the runner class is the one asked for;
  2. runs three seed-scenario requests together, the director writing
     <focus C3,C7> -> <local> -> <global>, <focus C5> alone, and <local 1>, the paper's
     protocol on Magic Chunks, and the shared_prefix scenario (checks/shared_prefix.py): four
     readers of the seed corpus, each its own question and FOCUS, added once the first one's
     prefill has cached the corpus; their step records must show one physical copy of the
     corpus in every row and FOCUS kernel row, and no later reader recomputing it;
  3. a compiled case then replays the eager case's token streams by teacher forcing
     (engine/teacher.py): the director writes every eager token, and the compiled model's own
     greedy choice is compared with the eager one at every position, not only up to the first
     divergence;
  4. replays each request through transformers with the hook's per-position mask history
     (da_lab.checks.oracle) twice: in float32 (the exact reference) and in bfloat16 (the
     engine's own precision). A position the engine chose differently from the float32
     reference counts as a mismatch only where that reference's top-2 gap is at least
     --threshold *and* the bfloat16 reference disagrees with the engine too *and* the engine's
     own top-2 gap (logprobs=2) is above two bfloat16 steps (verdict.ENGINE_TIE): where the
     engine's own logits tie, its choice is a rounding coin flip, counted as `engine_ties`.
     Each case reports how close to a tie its disagreements were (per reference): this
     argmax rule stays as `argmax_passed`; the case's verdict is the logprob rule
     (checks/logprob_verdict.py), which a mask one block off must fail.
The unmasked reference must differ somewhere, or the case proves nothing and fails.

Hybrid models (issue 55; not in the default --models): `--models gemma4-dummy,qwen35-dummy`
(models/hybrid_dummy.py: Gemma-4-shaped sliding + global layers on TRITON_ATTN, Qwen-3.5-shaped
Gated DeltaNet + full attention on FlashAttention 3), the same scenarios, runners and graph
modes; their references mask the global layers only (checks/oracle.py). The mask history's
kept block ids are read in the layout's block units (`prompt.layout.block_size`).

`--grouped-read focus|all` (issue 59): every case's Lab runs the grouped read (hook/grouped.py;
a compiled case with PIECEWISE graphs: `--graphs eager,piecewise`), the readers of
shared_prefix.OVERLAPPING join the shared-prefix readers (their kept chunks overlap), every
grouped layer is also run the plain way and compared (DA_LAB_GROUPED_CHECK=1), the rule's
fixed cost is 0 (DA_LAB_GROUPED_FIXED_US=0: with the measured one no small case groups), and a
case passes only if steps were grouped, none was refused, and |grouped - plain| < GROUPED_TOL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

from da_lab.checks import logprob_verdict as lv
from da_lab.checks import shared_prefix
from da_lab.checks.verdict import compare_graphs, score
from da_lab.models import hybrid_dummy

MODELS = ("tiny", "llama-1b-dummy")
HYBRID_MODELS = hybrid_dummy.TEST_MODELS     # --models gemma4-dummy,qwen35-dummy
RUNNERS = ("v1", "v2")
GRAPHS = ("eager", "full_and_piecewise")
GRAPH_CHOICES = (*GRAPHS, "piecewise")     # piecewise: compiled, attention outside the graphs
# The CPU smoke: the tiny model, eager, twice; the second case is teacher-forced against the
# first, as a compiled case is against its eager one on the GPU (it must agree everywhere).
CPU_CASES = (("tiny", "v1", "eager"), ("tiny", "v1", "eager_again"))
REFERENCES = ("float32", "bfloat16")
SCENARIOS = {
    "focus_local_global": [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")],
    "focus_only": [(2, "<focus C5>")],
    "local_1": [(3, "<local 1>")],
    # The paper's protocol: Magic Chunk prompt of unpadded spans, a closing tag back to global.
    "paper_spans": [(1, '<focus magic_chunks="3">'), (20, "</focus>"), (30, "<local>")],
}
PAPER = {"paper_spans"}         # scenarios on the paper's prompt (lab.paper_prompt)
# Many readers, one corpus (issue 43): its requests, each over the seed corpus + its question.
SHARED_PREFIX = shared_prefix.READERS


def prompts(lab, grouped: str | None = None) -> dict:
    """Each scenario's prompt: the seed scenario's, or the same records as Magic Chunks;
    and each shared-prefix reader's (with the grouped read, the overlapping readers' too)."""
    from da_lab.core.layout import seed_texts

    seed = lab.seed_prompt()
    paper = lab.paper_prompt("What is the value of key 31?", seed_texts()[1])
    return {**{name: paper if name in PAPER else seed for name in SCENARIOS},
            **shared_prefix.prompts(lab),
            **(shared_prefix.prompts(lab, shared_prefix.OVERLAPPING) if grouped else {})}


def model_folder(name: str) -> Path:
    if name == "tiny":
        from da_lab.models.tiny import model_path

        return model_path("da-tiny-v1")
    if name in HYBRID_MODELS:
        return hybrid_dummy.build(name)
    from da_lab.models.dummy import build

    return build(name)


def _wait_for(path: Path, timeout: float) -> dict:
    """The eager case's result document, once it is written (the cases run in parallel)."""
    t_end = time.time() + timeout
    while time.time() < t_end:
        if path.exists():
            try:
                return json.loads(path.read_text())
            except ValueError:
                pass                    # being written
        time.sleep(1)
    raise TimeoutError(f"no eager result at {path} after {timeout:.0f} s")


def drive(lab, prompt: dict, max_tokens: int, grouped: str | None = None) -> tuple[dict, dict]:
    """The scenarios together on `lab` (`prompt`: each one's); (per-request results, facts).
    The first shared-prefix reader runs one step alone (its prefill caches the corpus), then
    everything else joins. `grouped`: the Lab runs the grouped read; the overlapping readers
    join too, and the facts say what the grouped read did."""
    # The logprob verdict's top-k at each position; its top-2 gap serves the argmax verdict.
    readers = {**SHARED_PREFIX, **(shared_prefix.OVERLAPPING if grouped else {})}
    tags = {**SCENARIOS, **{name: t for name, (_, t) in readers.items()}}
    first, *rest = readers
    lab.session.grouped.history.clear()

    def add(name: str) -> str:
        return lab.add_request(prompt[name], tags=tags[name], max_tokens=max_tokens,
                               logprobs=lv.TOPK)

    da_ids = {first: add(first)}
    recs = [lab.step()]
    da_ids.update({name: add(name) for name in [*SCENARIOS, *rest]})
    while lab.has_unfinished():
        recs.append(lab.step())
    max_unseen = max((r.tokens_unseen or 0) for rec in recs for r in rec.requests)
    readers = {name: [r for rec in recs if (r := rec.request(da_ids[name])) is not None
                      and r.hooked] for name in SHARED_PREFIX}
    shared = shared_prefix.sharing(readers, shared_prefix.corpus_blocks(prompt[first]))
    reqs = {}
    for name, da_id in da_ids.items():
        st, r = lab.request_state(da_id), lab.requests[da_id]
        reqs[name] = {"tokens": r["token_ids"], "forced": sorted(r["forced"]),
                      "history": _history(st), "prompt_len": len(prompt[name].token_ids),
                      "topk": [lv.engine_topk(lp) for lp in r.get("logprobs", [])],
                      "engine_gap": [_top2_gap(lp) for lp in r.get("logprobs", [])],
                      "events": [e["kind"] for e in st.events],
                      "masked_steps": sum(k is not None for _, _, k in st.mask_history)}
    facts = {"steps": len(recs), "max_tokens_unseen": max_unseen, "shared_prefix": shared}
    if grouped:
        facts["grouped"] = shared_prefix.grouped_verdict(lab.session.grouped.history, grouped,
                                                         lab.device)
    return reqs, facts


def _top2_gap(logprobs: dict) -> float | None:
    """rank-1 minus rank-2 logprob of one position (= their logit difference)."""
    top = sorted((lp for lp in logprobs.values() if lp.rank in (1, 2)), key=lambda x: x.rank)
    return round(top[0].logprob - top[1].logprob, 4) if len(top) == 2 else None


def _teacher_force(lab, prompt, reqs: dict, eager: dict) -> None:
    """Each request's eager token stream replayed on this engine: its own greedy choice at
    every position (engine/teacher.py)."""
    from da_lab.engine.teacher import forced_logprobs, top1

    for name, r in reqs.items():
        e = (eager.get("requests") or {}).get(name)
        if e is not None:
            r["eager_tokens"] = e["tokens"]
            da_id = f"teacher-{name}"
            lps = forced_logprobs(lab, prompt[name], e["tokens"], request_id=da_id, k=lv.TOPK)
            r["forced_argmax"] = [top1(lp) for lp in lps]
            r["forced_topk"] = [lv.engine_topk(lp) for lp in lps]
            r["forced_history"] = _history(lab.request_state(da_id))


def _history(st) -> list:
    return [(a, b, None if k is None else [int(x) for x in k]) for a, b, k in st.mask_history]


def run_case(model: str, runner: str, graphs: str, max_tokens: int = 40,
             eager_from: str | None = None, wait_s: float = 480,
             grouped: str | None = None) -> dict:
    """One case in this process: engine run (and teacher forcing against the eager case's
    streams when `eager_from` names its result), then the references (engine shut down)."""
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if runner == "v2" else "0"
    import torch

    from da_lab.engine import access
    from da_lab.engine.lab import Lab

    cuda = torch.cuda.is_available()
    path = str(model_folder(model))
    t0 = time.perf_counter()
    # runner=None: the Lab only sets the env var; we check the class ourselves and report it.
    # A fixed KV cache on the GPU: no memory profiling for the parallel cases to race.
    # Hybrid models: their block size, prompt room and vLLM 0.26 arguments (hybrid_dummy).
    extra = hybrid_dummy.lab_kwargs(model) if model in HYBRID_MODELS else {}
    sizes = {"num_blocks": 160, "max_model_len": 2048, **extra}
    llm_kw: dict = {}                 # LLM keywords: the KV cache's bytes, the graph mode
    if cuda:
        llm_kw["kv_cache_memory_bytes"] = 1 << 30
    if graphs == "piecewise":
        llm_kw["compilation_config"] = {"cudagraph_mode": "PIECEWISE"}
    lab = Lab(path, **sizes, eager=graphs not in ("full_and_piecewise", "piecewise"),
              grouped_read=grouped, **llm_kw)
    info = {"runner_class": lab.runner_class, "runner_ran": lab.runner_kind,
            "cudagraph_mode": lab.graph_mode(), "backend": lab.session.backend,
            "engine_start_s": round(time.perf_counter() - t0, 1), "engine": lab.engine_name,
            "device": lab.device,
            "async_scheduling": bool(access.vllm_config(lab.llm).scheduler_config.async_scheduling)}
    try:
        prompt = prompts(lab, grouped)
        reqs, facts = drive(lab, prompt, max_tokens, grouped)
        info.update(facts)
        if eager_from:
            _teacher_force(lab, prompt, reqs, _wait_for(Path(eager_from), wait_s))
    finally:
        lab.shutdown()
    del lab
    if cuda:
        torch.cuda.empty_cache()
    shape = lv.references(path, prompt, reqs, "cuda" if cuda else "cpu", REFERENCES)
    # The Lab's dtype="auto": bfloat16 on a GPU, float32 on the CPU.
    return {"model": model, "runner": runner, "graphs": graphs, **info, **shape,
            "engine_dtype": "bfloat16" if cuda else "float32", "requests": reqs}


def child(args) -> int:
    from da_lab.engine.child import write_doc

    m, r, g = args.case
    try:
        out = run_case(m, r, g, eager_from=args.eager_from, grouped=args.grouped_read)
    except Exception as e:          # noqa: BLE001 - a broken case is reported, not lost
        import traceback

        out = {"model": m, "runner": r, "graphs": g, "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc()[-4000:]}
    write_doc(args.case_out, out)
    return 0


def _cases(args) -> list[tuple[str, str, str]]:
    if args.device == "cpu":
        return list(CPU_CASES)
    models = args.models.split(",")
    return [(m, r, g) for m in models for r in args.runners.split(",")
            for g in args.graphs.split(",")]


def _run_cases(cases, raw: Path, args) -> list[dict]:
    """Every case in its own child, all at once; each result document (or its error)."""
    from da_lab.engine.child import ChildProcess

    for m in dict.fromkeys(c[0] for c in cases):       # build once, before the cases race
        model_folder(m)
    t0 = time.perf_counter()
    procs = []
    for m, r, g in cases:
        f = raw / f"{m}-{r}-{g}.json"
        f.unlink(missing_ok=True)
        argv = ["-m", "da_lab.checks.gpu_tests", "--case", m, r, g, "--case-out", str(f)]
        if g != "eager":
            argv += ["--eager-from", str(raw / f"{m}-{r}-eager.json")]
        # Own compile cache per case: the cases compile at the same time.
        env = {"VLLM_CACHE_ROOT": f"/tmp/da_lab_vllm_cache/{m}-{r}-{g}"}
        if args.grouped_read:
            argv += ["--grouped-read", args.grouped_read]
            # correctness, not speed: no fixed cost, so the small cases' steps group too
            env.update(DA_LAB_GROUPED_CHECK="1", DA_LAB_GROUPED_FIXED_US="0")
        if args.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        procs.append(ChildProcess(argv, out=f, log=raw / f"{m}-{r}-{g}.log", env=env,
                                  what=f"case {m} {r} {g}"))
    results = []
    for (m, r, g), p in zip(cases, procs, strict=True):
        doc, err = p.wait(timeout=max(1, args.timeout - (time.perf_counter() - t0)))
        if not doc:
            doc = {"model": m, "runner": r, "graphs": g,
                   "error": f"no result ({err}); log tail: {p.log_tail()}"}
        results.append(doc)
    return results


def _rows(results: list[dict], threshold: float) -> list[dict]:
    by_key = {(c["model"], c["runner"], c["graphs"]): c for c in results}
    rows = []
    for c in results:
        row = {"model": c["model"], "runner": c["runner"], "graphs": c["graphs"]}
        if "error" in c:
            row.update(passed=False, tokens_compared=0, near_ties=0, error=c["error"][-1500:])
        else:
            row.update(score(c, threshold))
            row.update({k: c[k] for k in ("runner_class", "cudagraph_mode", "backend",
                                          "async_scheduling", "max_tokens_unseen",
                                          "engine_start_s", "steps")})
            # One physical copy of the corpus, no recompute (absent from runs before it).
            if "shared_prefix" in c:
                row["shared_prefix"] = c["shared_prefix"]
                row["passed"] = row["passed"] and c["shared_prefix"]["passed"]
            if "grouped" in c:          # --grouped-read: it ran, and equalled the plain path
                row["grouped"] = c["grouped"]
                row["passed"] = row["passed"] and c["grouped"]["passed"]
            e = by_key.get((c["model"], c["runner"], "eager"))
            if c["graphs"] != "eager":
                if e is None or "error" in e:
                    row.update(passed=False, error="no eager case to teacher-force against")
                else:
                    cmp = compare_graphs(e, c, threshold)
                    row.update(cmp)
                    row["passed"] = (row["passed"] and cmp["eager_mismatches"] == 0
                                     and cmp["eager_tokens_compared"] > 0)
            lv.judge_case(row, c, e)
        rows.append(row)
    return rows


def _shared_word(facts: dict | None) -> str:
    if facts is None:
        return "-"
    return "ok" if facts["passed"] else "BROKEN"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.checks.gpu_tests", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="result JSON (default bench/results/gpu-tests-<date>.json; "
                                  "with --device cpu: /tmp/gpu-tests-cpu-<date>.json)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: the smoke run (tiny model, float32, eager, teacher-forced "
                         "against itself); cuda: every model x runner x graph mode")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--graphs", default=",".join(GRAPHS),
                    help=f"comma list of {', '.join(GRAPH_CHOICES)}")
    ap.add_argument("--grouped-read", choices=("focus", "all"), default=None,
                    help="run every case with the grouped read (issue 59; compiled cases need "
                         "--graphs eager,piecewise) and check it against the plain path")
    ap.add_argument("--threshold", type=float, default=0.25,
                    help="float32 reference's top-2 logit gap under which a position is a "
                         "near-tie (default 0.25)")
    ap.add_argument("--timeout", type=int, default=540, help="seconds for all cases")
    ap.add_argument("--raw", help="folder for each case's raw JSON (tokens, gaps, histories)")
    ap.add_argument("--rescore", metavar="RAW",
                    help="score the case files of an earlier run (its --raw folder) with this "
                         "version's rules instead of running the cases")
    ap.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--case-out", help=argparse.SUPPRESS)
    ap.add_argument("--eager-from", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        return child(args)
    from da_lab.engine.env import engine_name

    today = date.today().isoformat()
    out = Path(args.out or (f"/tmp/gpu-tests-cpu-{today}.json" if args.device == "cpu"
                            else f"bench/results/gpu-tests-{today}.json"))
    raw = Path(args.raw) if args.raw else out.with_suffix("")
    if not args.rescore:
        raw.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.rescore:
        results = [json.loads((Path(args.rescore) / f"{m}-{r}-{g}.json").read_text())
                   for m, r, g in _cases(args)]
    else:
        results = _run_cases(_cases(args), raw, args)
    rows = _rows(results, args.threshold)
    doc = {"device": next((c["device"] for c in results if c.get("device")), args.device),
           "vllm": engine_name(),
           "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": "python -m da_lab.checks.gpu_tests " + " ".join(argv or sys.argv[1:]),
           "threshold": args.threshold, "references": list(REFERENCES),
           "wall_s": round(time.perf_counter() - t0, 1), "cases": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    for r in rows:
        g32, g16 = r.get("disagreement_gap_fp32") or {}, r.get("disagreement_gap_bf16") or {}
        print(f"{r['model']:16} {r['runner']:3} {r['graphs']:19} "
              f"{'PASS' if r['passed'] else 'FAIL'} compared={r['tokens_compared']} "
              f"near_ties={r['near_ties']} mismatches={r.get('mismatches')} "
              f"engine_ties={r.get('engine_ties', '-')} "
              f"gap fp32 {g32.get('min')}..{g32.get('max')} bf16 {g16.get('min')}.."
              f"{g16.get('max')} teacher-forced={r.get('eager_tokens_compared', '-')}/"
              f"{r.get('eager_mismatches', '-')} "
              f"shared-prefix={_shared_word(r.get('shared_prefix'))} "
              f"grouped={shared_prefix.grouped_word(r.get('grouped'))} "
              f"{lv.summary(r)}"
              f"{r.get('error', '')[:300]}")
    print(f"wrote {out}")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
