"""The logprob verdict: the engine's whole top-k distribution at every position, against the
references teacher-forced on the engine's own tokens. No argmax, so no near-tie can flip it.

At output position p the engine returned its top-k tokens K_p with their logprobs. Each
reference (float32, eager attention with explicit masks, replaying the engine's tokens) gives
its logits at the same tokens. The distance between two such vectors is

    d(a, b) = max over i in K_p of |(a_i - LSE_K(a)) - (b_i - LSE_K(b))|

(log-softmax renormalised over K_p, then the largest difference): a constant shift (the full
vocabulary's normaliser, which the top-k does not show) cancels, it is a metric (the triangle
inequality below needs one), and a logit error delta moves it by at most 2 max|delta|, with no
cliff where two tokens tie. Per position p, with B_p the bf16 bound (`bound`, derivation in
docs/correctness.md):

  * bound:       d(engine, masked) <= B_p at every position;
  * informative: D_p = d(masked, unmasked) >= 3 B_p: the references lie three bounds apart, so
                 the position can tell them apart; elsewhere (before the first mask, or where the
                 mask hid nothing that mattered) it is reported and counted as no evidence;
  * margin:      at informative positions d(engine, unmasked) - d(engine, masked) >= B_p (with
                 the bound it always holds: d_u >= D - d_m >= 2 B_p);
  * a case needs N_MIN informative positions.
The same rules with a reference whose mask is one block off (`one_block_off`), or with the
unmasked reference in the masked one's place, must FAIL: the run checks that they do.
"""

from __future__ import annotations

import math

import numpy as np

TOPK = 20            # logprobs asked of the engine per position (vLLM's default max_logprobs)
N_MIN = 20           # informative positions a case needs before its verdict means anything
INFORMATIVE = 3.0    # D_p >= INFORMATIVE * B_p: the references are that many bounds apart
# B_p = Z * r16 * s_p (bf16 engine): r16 the RMS over the case of the bf16 reference's own
# distance per unit of logit scale. Its largest distance in a case is 2.0-2.4 x that RMS
# (tiny, llama-1b-dummy) and the engine's errors are no larger than its (H200 2026-12-01);
# Z = 2.5 x 2 leaves a factor 2 for a card or kernel that rounds more (docs/correctness.md).
Z = 5.0
UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -24}


def renorm(x) -> np.ndarray:
    """Log-softmax over the given tokens only (float64)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return x - (m + math.log(np.exp(x - m).sum()))


def distance(a, b) -> float:
    """d(a, b): logprobs or logits at the same tokens, each renormalised over them."""
    return float(np.max(np.abs(renorm(a) - renorm(b))))


def engine_topk(logprobs: dict) -> list[list]:
    """[token ids, logprobs] of one position's vLLM logprobs ({id: Logprob}), by rank."""
    items = sorted(logprobs.items(), key=lambda kv: (kv[1].rank, kv[0]))
    return [[int(t) for t, _ in items], [float(x.logprob) for _, x in items]]


def one_block_off(history: list, block_size: int) -> list:
    """The mask history with one kept block moved by one: in every masked entry the first kept
    block after a hidden one (other than block 0 and the blocks of the entry's own queries)
    is replaced by the hidden block before it: a chunk read one block early. The verdict must
    reject a reference built on it."""
    out = []
    for a, b, kept in history:
        if kept is not None:
            ks = sorted({int(k) for k in kept})
            cand = [k for k in ks if k >= 1 and k - 1 not in ks and k < a // block_size]
            if cand:
                ks = sorted((set(ks) - {cand[0]}) | {cand[0] - 1})
            kept = ks
        out.append((a, b, kept))
    return out


def site_error(dtype: str, inner: int) -> float:
    """Relative error one op adds to a value: the storage rounding of `dtype` plus the float32
    accumulation over `inner` terms in another order than the reference's (random walk)."""
    return UNIT_ROUNDOFF[dtype] + UNIT_ROUNDOFF["float32"] * math.sqrt(inner)


def bound(scale: float, r16: float, dtype: str, inner: int) -> float:
    """B_p = Z * r16 * scale * site_error(dtype) / site_error(bf16): `scale` the float32
    reference's logit std at p, `r16` the bf16 reference's distance per unit of scale (RMS
    over the case); an engine of another dtype scales it by its own rounding."""
    return Z * r16 * scale * site_error(dtype, inner) / site_error("bfloat16", inner)


def shape_facts(config) -> dict:
    """The model facts the bound reads: `inner_dim` (the longest dot product, the float32
    accumulation term of `site_error`) and the layer count, from a transformers config (its
    text config for a multimodal one)."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {"inner_dim": max(cfg.hidden_size, getattr(cfg, "intermediate_size", 0) or 0),
            "layers": cfg.num_hidden_layers}


def replay(ref, prompt_ids: list[int], r: dict, block_size: int, float32: bool) -> dict:
    """The reference's logits (one row per output) on request doc `r`'s tokens under its mask
    history; the float32 reference's also unmasked and one block off."""
    from da_lab.checks.oracle import reference_logits

    hists = {"masked": r["history"]}
    if float32:
        hists.update(unmasked=None, one_block_off=one_block_off(r["history"], block_size))
    return {k: reference_logits(ref, prompt_ids, r["tokens"], h, block_size)
            for k, h in hists.items()}


def lp_rows(r: dict, logits: dict) -> dict:
    """`replay`'s logits at the engine's top-k tokens of each position, for request doc `r`'s
    `lp_refs`. float32 (it has "unmasked"): masked, unmasked, one block off, and the logit
    scale (std over the vocabulary); bfloat16 (after the float32 rows): masked, and its
    distance to the float32 masked reference per position."""
    ids = [k[0] for k in r["topk"]]

    def at_k(rows) -> list:
        return [[round(float(v), 6) for v in rows[i, ids[i]].tolist()] for i in range(len(ids))]

    if "unmasked" in logits:
        return {"masked": at_k(logits["masked"]), "unmasked": at_k(logits["unmasked"]),
                "one_block_off": at_k(logits["one_block_off"]),
                "scale": [round(float(v), 6) for v in
                          logits["masked"].double().std(dim=1, unbiased=False).tolist()]}
    bf16 = at_k(logits["masked"])
    return {"masked_bf16": bf16,
            "bf16_d": [round(distance(a, b), 6) for a, b in
                       zip(bf16, r["lp_refs"]["masked"], strict=True)]}


def references(path: str, prompt, reqs: dict, device: str, dtypes) -> dict:
    """The references' (`dtypes`) replays of every request of a gpu_tests case, one forward
    per mask history: the argmax verdict's tokens and gaps, the logprob verdict's rows, set on
    each request's result in `reqs`; returns the model's shape facts."""
    import torch

    from da_lab.checks.oracle import from_logits, load_reference

    torch.set_float32_matmul_precision("highest")   # vLLM's worker may have set TF32
    for dtype in dtypes:
        ref = load_reference(path, device=device, dtype=dtype)
        sfx = "" if dtype == "float32" else "_bf16"
        for name, r in reqs.items():
            p = prompt[name]
            logits = replay(ref, p.token_ids, r, p.layout.block_size, float32=not sfx)
            res = from_logits(r["tokens"], set(r["forced"]), logits["masked"],
                              logits.get("unmasked"))
            r["ref_masked" + sfx] = res.masked_tokens
            r["gap" + sfx] = [round(g, 4) for g in res.top2_gap]
            if not sfx:
                r["ref_unmasked"] = res.unmasked_tokens
            if r.get("topk"):
                r.setdefault("lp_refs", {}).update(lp_rows(r, logits))
        shape = shape_facts(ref.config)
        del ref
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return shape


def _stats(xs: list[float]) -> dict:
    return {"n": len(xs), "min": round(min(xs), 6) if xs else None,
            "median": round(float(np.median(xs)), 6) if xs else None,
            "max": round(max(xs), 6) if xs else None}


def bf16_rel_err(case: dict) -> float | None:
    """r16: RMS over the case's positions of the bf16 reference's distance to the float32 one
    per unit of logit scale: how far bf16 arithmetic moves this model's top-k, measured on
    the same card, tokens and masks as the engine."""
    rel = [d / s for r in case["requests"].values() if "bf16_d" in r.get("lp_refs", {})
           for d, s in zip(r["lp_refs"]["bf16_d"], r["lp_refs"]["scale"], strict=True)]
    return float(np.sqrt(np.mean(np.square(rel)))) if rel else None


def masked_outputs(r: dict) -> set[int]:
    """Output indices computed under a mask (output i is computed at query prompt_len-1+i)."""
    out = set()
    for a, b, kept in r["history"]:
        if kept is not None:
            out.update(q - r["prompt_len"] + 1 for q in range(a, b))
    return {i for i in out if 0 <= i < len(r["tokens"])}


def gap_floor(case: dict) -> dict:
    """What the argmax data alone say about d: at a model-chosen position where the engine (or
    the bf16 reference) and the float32 reference have top-2 gaps g and g', d >= |g - g'| / 2
    if they pick the same token, >= (g + g') / 2 if not (the runner-up tokens in the top-k).
    Works on the case files of runs before this verdict, so their numbers check the bound."""
    eng, b16 = [], []
    for r in case["requests"].values():
        forced = set(r["forced"])
        for i, t in enumerate(r["tokens"]):
            if i in forced:
                continue
            g = (r.get("engine_gap") or [None] * len(r["tokens"]))[i]
            if g is not None:
                eng.append(_floor(t, g, r["ref_masked"][i], r["gap"][i]))
            if "gap_bf16" in r:
                b16.append(_floor(r["ref_masked_bf16"][i], r["gap_bf16"][i],
                                  r["ref_masked"][i], r["gap"][i]))
    return {"engine": _stats(eng), "bf16_reference": _stats(b16)}


def _floor(tok: int, gap: float, ref_tok: int, ref_gap: float) -> float:
    return abs(gap - ref_gap) / 2 if tok == ref_tok else (gap + ref_gap) / 2


def score_logprobs(case: dict, candidate: str = "masked") -> dict | None:
    """The verdict with reference `candidate` ("masked"; "one_block_off" or "unmasked" to
    show that a wrong mask fails) against the unmasked one. None for case documents without
    the engine's top-k (runs before this verdict)."""
    reqs = case["requests"]
    r16 = bf16_rel_err(case)
    if r16 is None or not all("topk" in r and "lp_refs" in r for r in reqs.values()):
        return None
    dtype, inner = case["engine_dtype"], case["inner_dim"]
    n = masked = informative = inf_masked = 0
    viol, weak, d_m, bounds, margins, margin_rel, over = [], [], [], [], [], [], []
    for name, r in reqs.items():
        refs, ms = r["lp_refs"], masked_outputs(r)
        for i, (_, lps) in enumerate(r["topk"]):
            b = bound(refs["scale"][i], r16, dtype, inner)
            dm = distance(lps, refs[candidate][i])
            du = distance(lps, refs["unmasked"][i])
            n += 1
            masked += i in ms
            d_m.append(dm)
            bounds.append(b)
            over.append(dm / b)
            if dm > b:
                viol.append({"at": f"{name}@{i}", "d": round(dm, 4), "bound": round(b, 4),
                             "masked_step": i in ms})
            if distance(refs[candidate][i], refs["unmasked"][i]) >= INFORMATIVE * b:
                informative += 1
                inf_masked += i in ms
                margins.append(du - dm)
                margin_rel.append((du - dm) / b)
                if du - dm < b:
                    weak.append(f"{name}@{i}")
    passed = not viol and not weak and informative >= N_MIN
    return {"passed": passed, "candidate": candidate, "positions": n, "masked_steps": masked,
            "informative": informative, "informative_masked": inf_masked,
            "uninformative_masked": masked - inf_masked,
            "bound_violations": len(viol),
            "bound_violations_masked": sum(v["masked_step"] for v in viol),
            "bound_violation_at": viol[:20], "margin_violation_at": weak[:20],
            "d": _stats(d_m), "bound": _stats(bounds), "d_over_bound": _stats(over),
            "margin": _stats(margins), "margin_over_bound": _stats(margin_rel),
            "r16": round(r16, 6), "bf16_gain": round(r16 / UNIT_ROUNDOFF["bfloat16"], 2),
            "z": Z, "n_min": N_MIN}


def compare_graphs_logprobs(eager: dict, case: dict) -> dict | None:
    """This case's top-k on the eager case's streams (teacher forcing) against the eager run's
    own, at the positions both computed under the same mask history, over the tokens both
    top-k sets share: each run is within B_p of the same reference, so within 2 B_p of each
    other."""
    from da_lab.checks.verdict import comparable_outputs

    r16 = bf16_rel_err(eager)
    if r16 is None:
        return None
    dtype, inner = eager["engine_dtype"], eager["inner_dim"]
    n = 0
    viol, over = [], []
    for name, r in case["requests"].items():
        e = eager["requests"].get(name)
        if e is None or "forced_topk" not in r or "topk" not in e:
            continue
        same = comparable_outputs(e["history"], r.get("forced_history", e["history"]))
        for i, ((ei, el), (ci, cl)) in enumerate(zip(e["topk"], r["forced_topk"],
                                                     strict=False)):
            shared = sorted(set(ei) & set(ci))
            if i >= same or len(shared) < 2:
                continue
            ev, cv = dict(zip(ei, el, strict=True)), dict(zip(ci, cl, strict=True))
            d = distance([ev[t] for t in shared], [cv[t] for t in shared])
            b2 = 2 * bound(e["lp_refs"]["scale"][i], r16, dtype, inner)
            n += 1
            over.append(d / b2)
            if d > b2:
                viol.append({"at": f"{name}@{i}", "d": round(d, 4), "bound2": round(b2, 4)})
    return {"passed": n > 0 and not viol, "positions": n, "violations": len(viol),
            "violation_at": viol[:20], "d_over_2bound": _stats(over)}


def judge_case(row: dict, c: dict, eager: dict | None) -> None:
    """The logprob verdict (checks/logprob_verdict.py) beside the argmax one, whose result
    stays as `argmax_passed`: `passed` becomes the logprob verdict, which also needs the
    one-block-off and the unmasked reference to FAIL it (and, for a compiled case, its
    teacher-forced top-k within two bounds of the eager run's), plus the runner and the
    shared-prefix facts. Case files without the engine's top-k keep the argmax verdict."""
    lp = score_logprobs(c)
    row["argmax_passed"] = row["passed"]
    row["gap_floor"] = gap_floor(c)
    if lp is None:
        return
    keep = ("passed", "positions", "informative", "bound_violations",
            "bound_violations_masked", "d_over_bound", "bound_violation_at")
    wrong, unmasked = score_logprobs(c, "one_block_off"), score_logprobs(c, "unmasked")
    row["logprob"] = lp
    row["wrong_mask"] = {k: wrong[k] for k in keep}
    row["unmasked_as_mask"] = {k: unmasked[k] for k in keep}
    ok = lp["passed"] and not wrong["passed"] and not unmasked["passed"]
    if c["graphs"] != "eager":
        g = compare_graphs_logprobs(eager, c) if eager and "error" not in eager else None
        row["logprob_graphs"] = g
        ok = ok and g is not None and g["passed"]
    row["logprob_passed"] = ok
    row["passed"] = (ok and row["runner_as_asked"]
                     and row.get("shared_prefix", {"passed": True})["passed"])


def _word(ok: bool | None) -> str:
    return "-" if ok is None else "PASS" if ok else "FAIL"


def summary(r: dict) -> str:
    """The verdicts' words for a case's line: the argmax one's result; the logprob one's, its
    evidence, the worst distance per bound, the smallest margin per bound, and what the wrong
    masks got (they must FAIL)."""
    lp, head = r.get("logprob"), f"argmax={_word(r.get('argmax_passed'))} "
    if lp is None:
        return head + "logprob=- "
    g, w, m = r.get("logprob_graphs"), r["wrong_mask"], lp["margin_over_bound"]["min"]
    return head + (
        f"logprob={_word(r['logprob_passed'])} informative={lp['informative']}/"
        f"{lp['positions']} d/B max {lp['d_over_bound']['max']:.3g} margin/B min "
        f"{'-' if m is None else format(m, '.3g')} one-block-off={_word(w['passed'])}"
        f"({w['bound_violations']} over B) unmasked={_word(r['unmasked_as_mask']['passed'])} "
        + (f"forced d/2B max {g['d_over_2bound']['max']:.3g} "
           if g and g["d_over_2bound"]["max"] is not None else ""))
