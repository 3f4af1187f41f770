"""`da-lab selfcheck`: DA verified on this installation, in one PASS/FAIL line naming vLLM,
torch, the device and the model runner.

  1. static: the installed vLLM's sources, read with `ast` (checks/manifest.py), meet every need
     of the adapters for its release, and whether its hook modules are byte-identical to the
     wheel the committed manifest was read from;
  2. oracle: the tiny model in a Lab runs the GPU run's requests (checks/gpu_tests.drive: the
     seed scenario's <focus C3,C7> -> <local> -> <global>, <focus C5>, <local 1>, the paper's
     protocol, four readers of one cached corpus with their own FOCUS), replayed through
     transformers with the hook's per-position masks. CPU (float32): every token the model
     chose equals the masked reference's. GPU (bfloat16): the tie-aware verdict of the GPU run
     (checks/verdict.py: a disagreement counts where both references disagree and neither the
     reference's nor the engine's own top-2 gap is a near-tie). The unmasked reference must
     differ somewhere, or the check proves nothing;
  3. plain equals stock: the same prompt without tags through the plugin and through stock
     vLLM (VLLM_PLUGINS=none, a child process started first so the two overlap) gives the
     same tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

PLAIN_TOKENS = 24
THRESHOLD = 0.25          # the GPU run's default (checks/gpu_tests.py --threshold)

# Stock vLLM on the Lab's settings (engine/lab.py defaults; the pool size, 160 blocks in the
# check, changes no token of one request): its tokens for one prompt.
STOCK = """
import json, os, sys
os.environ["VLLM_PLUGINS"] = "none"          # load no general plugin: stock vLLM
import torch
from vllm import LLM, SamplingParams
cuda = torch.cuda.is_available()
llm = LLM(model=sys.argv[1], dtype="bfloat16" if cuda else "float32", block_size=32,
          enforce_eager=not cuda, num_gpu_blocks_override=64, max_model_len=2016, seed=0)
import da_lab.hook
assert not da_lab.hook.installed(), "the DA plugin was loaded"
out = llm.generate([{"prompt_token_ids": json.loads(sys.argv[2])}],
                   SamplingParams(temperature=0, max_tokens=int(sys.argv[3]), ignore_eos=True))
print("TOKENS", json.dumps(list(out[0].outputs[0].token_ids)), flush=True)
"""


def static_check(sources: Path | None = None) -> dict:
    """The installed vLLM's sources (or those of `sources`, a wheel or a folder holding
    `vllm/`) against the adapters' needs, without importing vLLM."""
    from da_lab.checks import manifest
    from da_lab.versions.needs import RELEASES, needs_for

    root = sources or manifest.installed_root()
    if root is None:
        return {"ok": False, "why": "no vLLM installed"}
    m = manifest.build(root)
    v = m["vllm"]
    if v not in RELEASES:
        return {"ok": False, "version": v, "why": f"vLLM {v} has no manifest"}
    bad = manifest.problems(m, needs_for(v))
    ref = json.loads((manifest.MANIFESTS / f"vllm-{v}.json").read_text())
    return {"ok": not bad, "version": v, "needs": len(needs_for(v)), "problems": bad[:5],
            "identical": m["files"] == ref["files"]}


def static_line(st: dict) -> str:
    """The static part of the line."""
    if not st["ok"]:
        return f"static: {st.get('why') or '; '.join(st['problems'])}"
    return (f"static {st['needs']} needs met, sources "
            + ("= the checked wheel's" if st["identical"] else "differ from the checked wheel's"))


def _stock(model: str, prompt_ids: list[int]) -> subprocess.Popen:
    env = dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr", VLLM_LOGGING_LEVEL="ERROR")
    return subprocess.Popen([sys.executable, "-c", STOCK, model, json.dumps(prompt_ids),
                             str(PLAIN_TOKENS)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _stock_tokens(proc: subprocess.Popen) -> tuple[list[int] | None, str]:
    out, err = proc.communicate(timeout=600)
    lines = [x for x in out.splitlines() if x.startswith("TOKENS ")]
    if proc.returncode != 0 or not lines:
        return None, (err.strip().splitlines() or ["stock vLLM failed"])[-1]
    return json.loads(lines[-1][7:]), ""


def exact_verdict(reqs: dict) -> dict:
    """CPU float32: every token the model chose equals the masked reference's."""
    mism = compared = masked = unmasked = 0
    for r in reqs.values():
        forced = set(r["forced"])
        masked += r["masked_steps"]
        for i, tok in enumerate(r["tokens"]):
            if i in forced:
                continue
            compared += 1
            mism += tok != r["ref_masked"][i]
            unmasked += tok != r["ref_unmasked"][i]
    return {"passed": mism == 0 and compared > 0 and masked > 0 and unmasked > 0,
            "tokens_compared": compared, "mismatches": mism, "masked_steps": masked,
            "unmasked_reference_differs_at": unmasked}


def run() -> dict:
    """Every part of the check; the document the line is made from."""
    t0 = time.perf_counter()
    doc = {"static": static_check(), "phases": {}}
    lap = _lap(doc, t0)
    lap("static")
    from da_lab.checks import gpu_tests, verdict
    from da_lab.engine.env import engine_name
    from da_lab.engine.lab import Lab

    path = str(gpu_tests.model_folder("tiny"))
    doc["vllm"] = engine_name()
    lab = None
    try:
        # The GPU run's KV size (gpu_tests.run_case): its eight requests (the shared corpus,
        # the paper's prompt) fit without a preemption, whose recompute is flagged, not exact.
        lab = Lab(path, num_blocks=160)
        prompt = gpu_tests.prompts(lab)           # each scenario's prompt
        seed = prompt["focus_only"]
        stock = _stock(path, seed.token_ids)
        lap("engine start")
        doc.update(torch=_torch(), device=lab.device, runner=lab.runner_class.split(".")[-1],
                   runner_kind=lab.runner_kind)
        reqs, _ = gpu_tests.drive(lab, prompt, 40)
        da_id = lab.add_request(seed, max_tokens=PLAIN_TOKENS)
        lab.run()
        plain = lab.requests[da_id]["token_ids"]
        lap("engine run")
    except Exception as e:    # noqa: BLE001 - any failure is the check's answer
        doc["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:400]
        if "stock" in locals():
            stock.kill()
        return _done(doc, t0)
    finally:
        if lab is not None:
            lab.shutdown()
    _references(path, prompt, reqs, doc["device"])
    lap("references")
    case = {"runner": doc["runner_kind"], "runner_ran": doc["runner_kind"], "requests": reqs}
    doc["oracle"] = exact_verdict(reqs) if doc["device"] == "cpu" else \
        verdict.score(case, THRESHOLD)
    stock_toks, why = _stock_tokens(stock)
    lap("stock vLLM (waited for)")
    doc["plain_equals_stock"] = {"passed": stock_toks == plain, "tokens": len(plain),
                                 **({"error": why} if why else {})}
    return _done(doc, t0)


def _references(path: str, prompt, reqs: dict, device: str) -> None:
    """The masked (and unmasked) float32 replays; on a GPU also the bfloat16 one the tie-aware
    verdict reads (checks/gpu_tests.py)."""
    from da_lab.checks import gpu_tests
    from da_lab.checks import logprob_verdict as lv
    from da_lab.checks.oracle import check, load_reference

    if device != "cpu":
        return lv.references(path, prompt, reqs, device, gpu_tests.REFERENCES)
    ref = load_reference(path)
    for name, r in reqs.items():
        res = check(ref, prompt[name].token_ids, r["tokens"], r["history"],
                    prompt[name].layout.block_size, set(r["forced"]))
        r["ref_masked"], r["ref_unmasked"] = res.masked_tokens, res.unmasked_tokens


def _lap(doc: dict, t0: float):
    last = [t0]

    def lap(name: str) -> None:
        now = time.perf_counter()
        doc["phases"][name] = round(now - last[0], 1)
        last[0] = now
    return lap


def _torch() -> str:
    import torch

    return torch.__version__


def _done(doc: dict, t0: float) -> dict:
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["passed"] = bool(doc["static"]["ok"] and "error" not in doc
                         and doc["oracle"]["passed"] and doc["plain_equals_stock"]["passed"])
    return doc


def line(doc: dict) -> str:
    """The one line: PASS/FAIL, vLLM, torch, device, runner, and what was checked."""
    who = (f"{doc.get('vllm', 'vLLM ?')}, torch {doc.get('torch', '?')}, "
           f"{doc.get('device', '?')}, runner {doc.get('runner', '?')}")
    static = static_line(doc["static"])
    if "error" in doc:
        return f"FAIL da-lab selfcheck: {who}: {doc['error']}; {static} [{doc['seconds']} s]"
    o, p = doc["oracle"], doc["plain_equals_stock"]
    oracle = (f"oracle {o['tokens_compared']} tokens = masked reference"
              if o["passed"] else f"oracle {o['mismatches']} mismatches of "
              f"{o['tokens_compared']} (masked steps {o['masked_steps']}, unmasked differs at "
              f"{o['unmasked_reference_differs_at']})")
    plain = f"plain = stock ({p['tokens']} tokens)" if p["passed"] else \
        f"plain != stock{': ' + p['error'] if p.get('error') else ''}"
    return (f"{'PASS' if doc['passed'] else 'FAIL'} da-lab selfcheck: {who}: {oracle}; "
            f"{plain}; {static} [{doc['seconds']} s]")


def main_static(paths: list[Path]) -> int:
    """`python -m da_lab.checks.selfcheck --static WHEEL_OR_DIR...`: the static part alone, on
    sources that need not be installed (a release whose torch this machine lacks: 0.33, 0.34),
    with the model runners the release has; the engine parts need the release installed."""
    from da_lab.versions.releases import model_runners

    status = 0
    for p in paths:
        st = static_check(p)
        v = st.get("version", "?")
        runners = ", ".join(model_runners(v)) or "none the hook knows"
        print(f"{'PASS' if st['ok'] else 'FAIL'} static {p.name}: vLLM {v} (runners: {runners})"
              f": {static_line(st)}")
        status |= not st["ok"]
    return status


def main(json_out: bool = False) -> int:
    from da_lab.engine.env import LOG_TO_STDERR, apply_env, quiet_stdout

    out = quiet_stdout()             # vLLM's logs go to stderr; stdout gets the one line
    apply_env(LOG_TO_STDERR)
    doc = run()
    out.write((json.dumps(doc) if json_out else line(doc)) + "\n")
    out.flush()
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="the static part of `da-lab selfcheck`")
    ap.add_argument("--static", nargs="+", type=Path, required=True, metavar="WHEEL_OR_DIR")
    sys.exit(main_static(ap.parse_args().static))
