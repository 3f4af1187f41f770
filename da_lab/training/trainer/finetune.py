"""Fine-tune SmolLM2-135M-Instruct (or Gemma 3 270M: --base gemma3) to write its own DA tags
(`python -m da_lab.training.trainer.finetune`).

The task is `da_lab.training.data.nl_gen` (chat prompts of 4..32 prose documents of many domains,
~600..6,000 tokens, a question; the reply is the tag, then one sentence), training domains
only (--extra-domains adds the training-only ones of domains_extra), with more two-document
questions than the held-out mix (--mix, nl_gen.TRAIN_MIX); a share
of samples are drills (--drill-p: more question turns after the first, one document, two or
none, each reply learned under the hook's mask, the user turns given). --paper puts a share of
samples in the paper's protocol (nl_paper), one turn each unless --paper-drills. The mask is the DA
hook's, position by position, built by `da_lab.training.trainer.train` (`collate` -> `segments`,
`forward` -> `dense_mask`, the same code that trains da-tiny-tags and that tests hold equal to
the hook's recorded mask history); attention is SDPA with that explicit (B, 1, L, L) mask; the
loss is on the reply tokens only. A LoRA (`da_lab.training.trainer.lora`, rank 16 on
q/k/v/o/gate/up/down, base frozen), AdamW, warmup + cosine; bf16 autocast on CUDA. Each step
draws one context length and fills up to --batch-tokens with samples of that length (fewer long
prompts, more short ones).

    python -m da_lab.training.trainer.finetune --device cuda --seed 0 --time-budget-s 420 \\
        --out da_lab/assets/smollm2-da

Gemma 3 270M (--base gemma3; da_lab/bench/models/gemma3_gpu.sh trains it) is a hybrid model:
15 sliding-window layers (512 tokens) beside 3 global ones. The hook masks the global layers'
KV-cache group only (issue 55), so training does the same: the global layers read the DA mask,
the sliding-window layers their plain causal window (masks.layer_masks). Its replies end with
<end_of_turn>; prompts are Gemma 3's chat template (nl_task.ChatTokens reads either model's).
--long adds steps of long texts cut into the paper's ~2,048-token segments (nl_long), --pairs
two-document questions (nl_pairs; the paper's two focus blocks in its protocol).

writes DIR/delta.safetensors (the LoRA factors, bf16, 9.8 MB) and DIR/training.json (command,
seed, wall time, loss curve, held-out teacher-forced accuracy); `model_path("smollm2-da")`
merges the shipped delta into the base on first use. --time-budget-s stops training early and
still evaluates and writes the delta.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_long as NL
from da_lab.training.data import nl_pairs as NP
from da_lab.training.data import nl_task as N
from da_lab.training.trainer.batches import Batches
from da_lab.training.trainer.lora import add_lora, load_delta, lora_parameters, save_delta
from da_lab.training.trainer.nl_batches import BLOCK, STEP_STREAM, make_batch  # noqa: F401
from da_lab.training.trainer.train import accuracy, collate, forward, to_device


def _pair(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(",")
    return int(lo), int(hi or lo)


def _mix(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    p_local, p_multi = float(lo), float(hi)
    if not (0 <= p_local and 0 <= p_multi and p_local + p_multi <= 1):
        raise SystemExit(f"finetune: --mix {text!r}: two shares in [0, 1] summing to <= 1")
    return p_local, p_multi


BASES = ("smollm2", "gemma3")


def load_base(device, folder: Path):
    """The base model in float32 with SDPA attention: a Llama (SmolLM2) or a Gemma 3 (its
    sliding-window layers get their own mask: masks.layer_masks)."""
    import torch
    from transformers import Gemma3ForCausalLM, LlamaForCausalLM

    kind = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
    cls = Gemma3ForCausalLM if kind == "gemma3_text" else LlamaForCausalLM
    model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    return model.to(device)


def base_module(name: str):
    """The models module that builds `name`'s base and reads its delta."""
    if name == "gemma3":
        from da_lab.models import gemma3 as M
    else:
        from da_lab.models import smollm2 as M
    return M


def mean_loss(model, batch: dict, device, autocast: bool) -> float:
    """Reply-token cross entropy on one collated batch, under the DA mask, no gradients."""
    import torch

    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        logits, tgt, _ = forward(model, to_device(batch, device), BLOCK)
        return float(torch.nn.functional.cross_entropy(logits.float(), tgt))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.trainer.finetune",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32, help="samples per step at most")
    ap.add_argument("--batch-tokens", type=int, default=65536,
                    help="prompt tokens per step at most (long contexts: fewer samples)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--context", default=f"{G.CONTEXT[0]},{G.CONTEXT[1]}",
                    help="lo,hi: target prompt tokens")
    ap.add_argument("--chunks", default=f"{G.CHUNKS[0]},{G.CHUNKS[1]}", help="lo,hi: chunks")
    ap.add_argument("--drill-p", type=float, default=0.5,
                    help="share of training samples that are drills (several question turns)")
    ap.add_argument("--drill-turns", default="2,4", help="lo,hi: question turns in a drill")
    ap.add_argument("--mix", default=f"{G.TRAIN_MIX[0]},{G.TRAIN_MIX[1]}",
                    help="p_local,p_multi: training samples' share of no-document and "
                         "two-document questions (held-out prompts keep nl_gen's own)")
    ap.add_argument("--paper", type=float, default=0.0,
                    help="share of samples in the paper's protocol (Magic Chunk prompt, "
                         "closing tags, <answer>; nl_paper), the rest in the card's")
    ap.add_argument("--paper-drills", action="store_true",
                    help="paper-protocol samples are drills as often as the card's (follow-up "
                         "questions answered in the paper's tags); without it they have one turn")
    ap.add_argument("--base", choices=BASES, default="smollm2",
                    help="the base model: smollm2 (SmolLM2-135M-Instruct) or gemma3 (Gemma 3 "
                         "270M, hybrid: DA masks its global layers only)")
    ap.add_argument("--long", type=float, default=0.0,
                    help="share of steps of long texts in the paper's segments (nl_long)")
    ap.add_argument("--long-tokens", default=f"{NL.TOKENS[0]},{NL.TOKENS[1]}",
                    help="lo,hi: a long text's tokens")
    ap.add_argument("--long-multi", type=float, default=0.4,
                    help="share of the long texts' questions in two parts (two segments)")
    ap.add_argument("--pairs", type=float, default=0.0,
                    help="share of the other steps' samples that are nl_pairs' two-document "
                         "questions (in the paper's protocol with --paper's share)")
    ap.add_argument("--extra-domains", action="store_true",
                    help="draw training samples from the training-only domains too "
                         "(domains_extra); the held-out probes and losses stay as they were")
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda if available)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="smollm2-da", help="output folder (delta + training.json)")
    ap.add_argument("--time-budget-s", type=float, default=None,
                    help="stop training after this many seconds (wall, from the start), then "
                         "evaluate and write the delta as usual")
    ap.add_argument("--eval-n", type=int, default=256, help="held-out prompts at the end")
    ap.add_argument("--eval-every", type=int, default=100, help="probe every N steps (0: never)")
    ap.add_argument("--probe-n", type=int, default=64, help="held-out prompts per probe")
    ap.add_argument("--eval-batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=None,
                    help="batch-building processes (default: 0 with <= 4 cores, else cores-2)")
    ap.add_argument("--model", default=None, help="base model folder (default: --base's)")
    ap.add_argument("--init", default=None,
                    help="continue from this delta file (its rank/alpha must match)")
    ap.add_argument("--layers", type=int, default=None,
                    help="keep only the first N decoder layers (smoke tests on a CPU only)")
    return ap.parse_args(argv)


def _setup(args):
    """(device, base folder, model, {weight name: LoRA}, optimiser, workers)."""
    import torch

    from da_lab.models.tiny import model_path

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(args.seed)
    folder = Path(args.model) if args.model else model_path(args.base)
    model = load_base(device, folder)
    if args.layers:
        model.model.layers = model.model.layers[: args.layers]
        model.config.num_hidden_layers = args.layers
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = model.config.layer_types[: args.layers]
    wrapped = add_lora(model, args.rank, args.alpha, seed=args.seed)
    if args.init:
        load_delta(wrapped, Path(args.init))
    opt = torch.optim.AdamW(lora_parameters(wrapped), lr=args.lr, betas=(0.9, 0.99),
                            weight_decay=0.0, fused=device.type == "cuda")
    workers = args.workers
    if workers is None:
        cores = os.cpu_count() or 1
        workers = 0 if cores <= 4 else min(14, cores - 2)
    return device, folder, model, wrapped, opt, workers


def _probe(model, samples, device, autocast, eval_batch) -> dict:
    acc = accuracy(model, samples, device, BLOCK, batch=eval_batch, autocast=autocast)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in acc.items()}


def _probe_all(model, probe: dict, device, autocast, eval_batch, step, loss, seconds) -> dict:
    """Teacher-forced probe on the training domains and on the held-out ones; printed."""
    h = {"step": step, "loss": loss, "seconds": round(seconds, 1)}
    for sp, ss in probe.items():
        acc = _probe(model, ss, device, autocast, eval_batch)
        pre = "" if sp == "train" else "heldout_"
        h.update({pre + "tag": acc["tag_accuracy"], pre + "da": acc["da_answer_accuracy"],
                  pre + "all": acc["all_blocks_answer_accuracy"]})
        print(f"step {step} [{sp} domains]: loss {loss:.4f} tag {acc['tag_accuracy']:.3f} da "
              f"{acc['da_answer_accuracy']:.3f} all {acc['all_blocks_answer_accuracy']:.3f} "
              f"{acc['by_kind']} ({h['seconds']} s)", flush=True)
    return h


def _train_loop(args, device, model, opt, params, batches, probe, t_start) -> dict:
    """The optimisation loop; returns {steps, stopped_by, losses, history, train_s}."""
    import torch

    autocast = device.type == "cuda"

    def lr_at(step: int) -> float:
        """Warmup, then cosine to 10% over the run; with a time budget the run's progress is
        the larger of steps done and budget spent, so a budget-bound run still decays."""
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        u = (step - args.warmup) / max(1, args.steps - args.warmup)
        if args.time_budget_s:
            u = max(u, (time.perf_counter() - t_start) / args.time_budget_s)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, u))))

    losses, history, step, stopped, t0 = [], [], 0, "steps", time.perf_counter()
    model.train()
    while step < args.steps:
        if args.time_budget_s is not None and time.perf_counter() - t_start > args.time_budget_s:
            stopped = "time budget"
            break
        b = to_device(batches.get(step), device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits, tgt, _ = forward(model, b, BLOCK)
            loss = torch.nn.functional.cross_entropy(logits.float(), tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        losses.append(round(loss.item(), 5))
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            history.append(_probe_all(model, probe, device, autocast, args.eval_batch,
                                      step, losses[-1], time.perf_counter() - t_start))
    return {"steps": step, "stopped_by": stopped, "losses": losses, "history": history,
            "train_s": time.perf_counter() - t0}


def extra_heldout(args, tok) -> dict:
    """Held-out sets of the new shapes, on the held-out domains (names and values never trained
    on), when the run trains on them: long texts (half two-part) and two-document questions."""
    from da_lab.training.data.task import HELDOUT, rng_for

    n = max(4, args.eval_n // 4)
    out = {}
    if args.long > 0:
        out["long"] = [NL.make_long_sample(rng_for(G.EVAL_SEED, HELDOUT, i), heldout=True,
                                           split="heldout", kind=("single", "multi")[i % 2],
                                           tokens=_pair(args.long_tokens), tok=tok)
                       for i in range(n)]
    if args.pairs > 0:
        out["pairs"] = [NP.make_pair_sample(rng_for(G.EVAL_SEED, HELDOUT, i), heldout=True,
                                            split="heldout", n_chunks=_pair(args.chunks),
                                            context=_pair(args.context), tok=tok,
                                            protocol="paper" if i % 2 else "card")
                        for i in range(n)]
    return out


def run(argv=None):
    """Train; returns (training record, model with its live LoRA, {weight name: LoRA})."""
    t_start = time.perf_counter()
    args = parse_args(argv)
    M = base_module(args.base)
    device, folder, model, wrapped, opt, workers = _setup(args)
    ctx, chunks = _pair(args.context), _pair(args.chunks)
    tok_dir = str(folder)
    tok = N.tokens(tok_dir)
    kw = {"context": ctx, "n_chunks": chunks, "tok": tok}
    probe = {sp: G.held_out(args.probe_n, seed=G.EVAL_SEED + 1, split=sp, **kw)
             for sp in ("train", "heldout")}
    heldout = {sp: G.held_out(args.eval_n, split=sp, **kw) for sp in ("train", "heldout")}
    heldout.update(extra_heldout(args, tok))
    loss_batch = collate(heldout["train"][: max(1, min(8, args.eval_n))], tok.pad_id, BLOCK)
    autocast = device.type == "cuda"
    loss_before = mean_loss(model, loss_batch, device, autocast)
    split = "train+extra" if args.extra_domains else "train"     # the training draw's domains

    def job(s: int) -> dict:
        return {"seed": args.seed, "step": s, "batch": args.batch, "tok": tok_dir,
                "batch_tokens": args.batch_tokens, "context": ctx, "chunks": chunks,
                "drill_p": args.drill_p, "drill_turns": _pair(args.drill_turns),
                "mix": _mix(args.mix), "paper": args.paper,
                "paper_drills": args.paper_drills, "split": split, "long": args.long,
                "long_tokens": _pair(args.long_tokens), "long_multi": args.long_multi,
                "pairs": args.pairs}

    batches = Batches(job, args.steps, workers, ahead=max(8, 2 * workers), make=make_batch)
    try:
        res = _train_loop(args, device, model, opt, lora_parameters(wrapped), batches, probe,
                          t_start)
    finally:
        batches.close()
    accs = {sp: _probe(model, ss, device, autocast, args.eval_batch) for sp, ss in heldout.items()}
    out = Path(args.out)
    size = save_delta(wrapped, out / M.DELTA_FILE, rank=args.rank, alpha=args.alpha,
                      base_sha256=M.WEIGHTS_SHA256)
    res.update(loss_before=loss_before, loss_after=mean_loss(model, loss_batch, device, autocast),
               size=size, workers=workers, device=device, split=split, t_start=t_start)
    meta = _record(args, argv, M, res, accs)
    (out / "training.json").write_text(json.dumps(meta, indent=1) + "\n")
    acc = accs["train"]
    print(f"da_lab.training.trainer.finetune: {res['steps']} steps in {res['train_s']:.0f} s "
          f"({res['stopped_by']}), wall {meta['wall_seconds']:.0f} s, held-out loss "
          f"{res['loss_before']:.3f} -> {res['loss_after']:.3f}, n={acc['n']}: tag "
          f"{acc['tag_accuracy']:.3f}, DA answer {acc['da_answer_accuracy']:.3f}, all-blocks "
          f"answer {acc['all_blocks_answer_accuracy']:.3f}; held-out domains: tag "
          f"{accs['heldout']['tag_accuracy']:.3f}, DA answer "
          f"{accs['heldout']['da_answer_accuracy']:.3f}; "
          + "".join(f"{k}: tag {accs[k]['tag_accuracy']:.3f} DA "
                    f"{accs[k]['da_answer_accuracy']:.3f}; " for k in ("long", "pairs")
                    if k in accs)
          + f"delta {size / 1e6:.1f} MB -> {out}", flush=True)
    return meta, model, wrapped


def _record(args, argv, M, res: dict, accs: dict) -> dict:
    """training.json: what ran (command, base, arguments), how (device, times) and what it
    reached (losses, probes, held-out teacher-forced accuracies)."""
    import torch

    device = res["device"]
    autocast = device.type == "cuda"
    held = {"heldout": ("train", "nl_gen"), "heldout_domains": ("heldout", "nl_gen"),
            "heldout_long": ("heldout", "nl_long"), "heldout_pairs": ("heldout", "nl_pairs")}
    key = {"heldout": "train", "heldout_domains": "heldout", "heldout_long": "long",
           "heldout_pairs": "pairs"}
    return {
        "model": M.DA_NAME, "base": f"{M.BASE_NAME} ({M.PACKAGE}=={M.PACKAGE_VERSION}, "
                                    "dequantized to float32)",
        "command": "python -m da_lab.training.trainer.finetune " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
        "seed": args.seed, "init": args.init, "steps": res["steps"], "steps_planned": args.steps,
        "stopped_by": res["stopped_by"], "batch": args.batch, "batch_tokens": args.batch_tokens,
        "lr": args.lr, "warmup": args.warmup, "rank": args.rank, "alpha": args.alpha,
        "context": list(_pair(args.context)), "chunks": list(_pair(args.chunks)),
        "workers": res["workers"], "delta_bytes": res["size"], "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": "bf16 autocast" if autocast else "fp32", "torch": torch.__version__,
        "heldout_loss_before": round(res["loss_before"], 5),
        "heldout_loss_after": round(res["loss_after"], 5),
        "loss_per_step": res["losses"], "probe_history": res["history"],
        "train_seconds": round(res["train_s"], 1),
        "wall_seconds": round(time.perf_counter() - res["t_start"], 1),
        "drill_p": args.drill_p, "drill_turns": list(_pair(args.drill_turns)),
        "domains": res["split"], "paper": args.paper, "paper_drills": args.paper_drills,
        "long": args.long, "long_tokens": list(_pair(args.long_tokens)),
        "long_multi": args.long_multi, "pairs": args.pairs,
        "mix": {"p_local": _mix(args.mix)[0], "p_multi": _mix(args.mix)[1],
                "drill_local": G.DRILL_LOCAL, "drill_multi": G.DRILL_MULTI,
                "drill_same_entity": G.DRILL_SAME_ENTITY},
        **{name: {"seed": G.EVAL_SEED, "stream": "HELDOUT", "domains": dom, "generator": gen,
                  "teacher_forced": True, **accs[key[name]]}
           for name, (dom, gen) in held.items() if key[name] in accs},
    }


def main(argv=None) -> dict:
    return run(argv)[0]


if __name__ == "__main__":
    main()
