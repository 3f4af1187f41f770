"""Train the tiny Llama that writes its own DA tags (`python -m da_lab.train`).

The model reads a DA prompt of the task in `da_lab.task` (scaffold, 12 one-block chunks of
records, a question) and writes `<focus Ck>` / `<focus Ci,Cj>` / `<local>`, the answer, </s>.

The DA mask in training is the hook's, position by position. `hook_history` replays what the
hook records for a request that writes this response (`RequestState.mask_history`: the prefill
under GLOBAL, then one entry per decode step with `da_lab.mask.kept_blocks` of the directive in
force); the tag closed at output index t applies from the step whose query is that token, i.e.
to the prediction of output t+1 on. `da_lab.oracle.mask_matrix` turns such a history into the
dense mask; training builds the same matrix on the device from a compact form (first masked row,
visible blocks), which `compact` checks is exact and a test compares with `mask_matrix` and with
the history a real engine recorded. Loss is on response tokens only.

A plain torch loop over transformers' `LlamaForCausalLM` (SDPA attention with the 4D boolean
mask, bf16 autocast on CUDA), AdamW, warmup + cosine. Batches are pure functions of
(seed, step), built in worker processes on machines with cores to spare, so a run is the same
sequence of batches whatever the timing. Curriculum: the number of chunks grows from 3 to 12
over the first `--curriculum` fraction of the steps (shorter prompts, fewer distractors first).

Writes an HF folder (config.json, model.safetensors in bf16, tokenizer files,
generation_config.json) plus training.json; vLLM (CPU 0.32, GPU 0.26) and transformers load it.
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

import numpy as np

from . import task as T
from .layout import Layout
from .mask import kept_blocks
from .tags import Directive, Mode

MODEL_NAME = "da-tiny-tags"

# ~3.0M parameters (embeddings tied): 6 MB of bf16. Head size 32 and GQA 8:4 like a real Llama.
ARCH = {
    "hidden_size": 256,
    "intermediate_size": 640,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 32,
}
SMOKE_ARCH = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}


def model_config(tok: "T.Tokens", arch: dict | None = None, dtype: str = "bfloat16") -> dict:
    vocab = tok.tok.get_vocab_size()
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **(arch or ARCH),
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": dtype,
        "initializer_range": 0.02,
        "vocab_size": vocab,
        "bos_token_id": tok.bos_id,
        "eos_token_id": tok.eos_id,
        "pad_token_id": tok.pad_id,
    }


# ---------------------------------------------------------------------------------------------
# The DA mask, as the hook applies it

def hook_history(layout: Layout, tags, n_tokens: int,
                 ) -> list[tuple[int, int, np.ndarray | None]]:
    """The mask history the hook records for a request that writes a response whose tags are
    `tags` ((output index of the token closing the tag, Directive), ...), for the first
    `n_tokens` positions of prompt + response.

    Entries are (first query position, seq_len, kept logical blocks or None = all), exactly as
    `hook.state.RequestState.mask_history`: the prefill is one entry under GLOBAL; then the
    step whose query is output k (position prompt_len + k) decides with the last tag closed in
    outputs[0..k] (the hook feeds a step's own input token to the tag machine before deciding).
    """
    P, bs = layout.prompt_len, layout.block_size
    hist: list[tuple[int, int, np.ndarray | None]] = [(0, P, None)]
    timeline = sorted(tags, key=lambda t: t[0])
    d, nxt = Directive(), 0
    for p in range(P, n_tokens):
        while nxt < len(timeline) and timeline[nxt][0] <= p - P:
            d = timeline[nxt][1]
            nxt += 1
        kept = kept_blocks(d, layout, p + 1, 1)
        hist.append((p, p + 1, kept if len(kept) < -(-(p + 1) // bs) else None))
    return hist


def segments(layout: Layout, tags, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The same mask in compact form: (row_seg, seg_visible). Row p may read column c iff
    c <= p and seg_visible[row_seg[p], c // block_size]; segment 0 sees every block.

    One segment per stretch of rows under one directive: FOCUS and LOCAL keep one set of
    blocks (scaffold, chunks named, tail, the whole response) whose cut at a row's own block is
    exactly what `kept_blocks` keeps for that row, so a segment's visible blocks are those kept
    at its last row. Tests compare the dense matrix with `oracle.mask_matrix(hook_history)`."""
    P, bs = layout.prompt_len, layout.block_size
    nb = -(-n_tokens // bs)
    blocks = np.arange(nb)
    row_seg = np.zeros(n_tokens, dtype=np.int64)
    vis = [np.ones(nb, dtype=bool)]
    timeline = sorted(tags, key=lambda t: t[0])
    for i, (close, d) in enumerate(timeline):
        start = P + close
        stop = min(n_tokens, P + timeline[i + 1][0]) if i + 1 < len(timeline) else n_tokens
        if start >= stop:
            continue
        if d.mode is Mode.LOCAL and d.recent is not None:
            raise ValueError("<local N> keeps a sliding window: not one set per segment")
        kept = kept_blocks(d, layout, stop, 1)
        v = np.isin(blocks, kept) | (blocks > (stop - 1) // bs)
        if v.all():
            continue                       # GLOBAL (or nothing hidden): segment 0
        vis.append(v)
        row_seg[start:stop] = len(vis) - 1
    return row_seg, np.stack(vis)


def dense_mask(row_seg, seg_visible, length: int, block_size: int, device=None):
    """(B, 1, L, L) bool 'row may attend to column' from compact masks: row_seg (B, L) ints,
    seg_visible (B, S, n_blocks) bools with n_blocks >= ceil(L / block_size)."""
    import torch

    row_seg = torch.as_tensor(row_seg, device=device)[:, :length]
    seg_visible = torch.as_tensor(seg_visible, device=device)
    B = row_seg.shape[0]
    pos = torch.arange(length, device=device)
    causal = pos[None, :] <= pos[:, None]
    blk = pos // block_size
    vis_rows = seg_visible[torch.arange(B, device=device)[:, None], row_seg]   # (B, L, nb)
    allow = causal[None] & vis_rows[:, :, blk]
    return allow[:, None]


# ---------------------------------------------------------------------------------------------
# Batches

def chunks_at(step: int, steps: int, curriculum: float, max_chunks: int,
              rng: np.random.Generator) -> int:
    """Number of chunks for a sample at `step`: ramps 3 -> max_chunks over the first
    `curriculum` fraction of the run, then max_chunks (with a few shorter prompts mixed in)."""
    u = step / max(1, steps * curriculum) if curriculum > 0 else 1.0
    top = min(max_chunks, max(min(3, max_chunks), round(3 + (max_chunks - 3) * u)))
    if rng.random() < 0.8 or top <= 2:
        return top
    return int(rng.integers(2, top + 1))


def collate(samples: list["T.Sample"], pad_id: int, block_size: int) -> dict:
    B = len(samples)
    L = max(len(s.ids) for s in samples)
    nb = -(-L // block_size)
    ids = np.full((B, L), pad_id, dtype=np.int64)
    targets = np.full((B, L), -100, dtype=np.int64)   # targets[b, p] = token p+1
    tag_row = np.zeros((B, L), dtype=bool)             # rows predicting the first tag
    row_seg = np.zeros((B, L), dtype=np.int64)
    segs = []
    for b, s in enumerate(samples):
        seq = s.ids
        P = s.prompt.layout.prompt_len
        ids[b, : len(seq)] = seq
        targets[b, P - 1: len(seq) - 1] = [t if w else -100
                                           for t, w in zip(s.response_ids, s.written)]
        tag_row[b, P - 1: P + s.tag_close] = True
        rs, vis = segments(s.prompt.layout, s.all_tags, len(seq))
        row_seg[b, : len(seq)] = rs
        segs.append(vis)
    S = max(len(v) for v in segs)
    seg_visible = np.ones((B, S, nb), dtype=bool)
    for b, v in enumerate(segs):
        seg_visible[b, : len(v), : v.shape[1]] = v
    return {"ids": ids, "targets": targets, "tag_row": tag_row, "row_seg": row_seg,
            "seg_visible": seg_visible}


def drill_turns(step: int, steps: int, drill: tuple[int, int], until: float,
                rng: np.random.Generator) -> int:
    """Question turns of a training sample: mostly drills (lo..hi turns) up to `until` of the
    run, then fewer and fewer, none in the last part (the task exactly as evaluated)."""
    u = step / max(1, steps)
    p = 0.9 if u < until else max(0.0, 0.9 * (1 - (u - until) / 0.3))
    if drill[1] <= 1 or rng.random() >= p:
        return 1
    return int(rng.integers(drill[0], drill[1] + 1))


def make_batch(job: dict) -> dict:
    """Batch `step` of a run: a pure function of its arguments (runs in worker processes).

    Early batches are mostly drills: one prompt, several question turns in the response, each
    turn one more supervised retrieval under the hook's mask (see `task.make_sample`); the
    training mixture also asks more multi-key questions than the held-out one. Both are what
    make the retrieval circuit form within minutes: with one question per prompt it does not."""
    tok = T.tokens()
    samples = []
    step, batch = job["step"], job["batch"]
    for j in range(batch):
        rng = T.rng_for(job["seed"], T.TRAIN, step * batch + j)
        n = chunks_at(step, job["steps"], job["curriculum"], job["chunks"], rng)
        turns = drill_turns(step, job["steps"], job["drill"], job["drill_until"], rng)
        samples.append(T.make_sample(rng, n_chunks=n, p_multi=job["p_multi"],
                                     multi_keys=job["multi_keys"], turns=turns, tok=tok))
    return collate(samples, tok.pad_id, samples[0].prompt.layout.block_size)


class Batches:
    """Yields batches start..steps-1 in order, from worker processes when asked."""

    def __init__(self, jobs: list[tuple], workers: int) -> None:
        self.jobs, self.workers, self.pool = jobs, workers, None

    def __iter__(self):
        if self.workers <= 0:
            return (make_batch(j) for j in self.jobs)
        import multiprocessing as mp

        self.pool = mp.get_context("spawn").Pool(self.workers)
        return self.pool.imap(make_batch, self.jobs, chunksize=4)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool = None


# ---------------------------------------------------------------------------------------------
# Model, loss, held-out accuracy

def build_model(cfg: dict, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    conf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",
                                                                     "torch_dtype")})
    conf._attn_implementation = "sdpa"
    model = LlamaForCausalLM(conf)
    return model


def wire_previous_token_head(model, strength: float = 8.0, shared: float = 0.25,
                             pairs: int = 8, seed: int = 0) -> None:
    """Initialise attention head 0 of layer 0 as a previous-token head (before training).

    The task's retrievals are induction copies ("days" seen before "7": after "days" write
    "7"; the chunk label is the token before the key), and induction needs a head that moves
    each token's predecessor into it. Left to gradient descent, that head forms only after a
    long plateau (runs without it learned no retrieval at all in minutes of H200 time); here it
    is there from step 0, and training may change it like any other weight.

    How: token embeddings get a shared component `shared * u` (u a fixed random unit vector)
    and their own parts are made orthogonal to u and of equal norm, so after the first RMSNorm
    every token reads the same value along u. (With tied embeddings the shared part adds the
    same logit to every token, which softmax ignores.) Head 0's query and key read only u,
    giving content-free vectors; in each of the `pairs` fastest RoPE frequency pairs the key is
    turned by one position's angle, so query i . key j = strength^2 sum_m cos((i - j - 1) th_m)
    / sqrt(head_dim): largest at j = i - 1, ~8 logits above its neighbours by default.
    """
    import torch

    c = model.config
    d, hd = c.hidden_size, c.head_dim
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(d, generator=g)
    u /= u.norm()
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        e = emb.float()
        e = e - (e @ u)[:, None] * u[None, :]
        norms = e.norm(dim=1, keepdim=True)
        e = e * (norms.mean() / norms.clamp_min(1e-8)) + shared * u[None, :]
        emb.copy_(e.to(emb.dtype))
        x = e / e.pow(2).mean(-1, keepdim=True).add(c.rms_norm_eps).sqrt()
        proj = float((x @ u).mean())
        half = hd // 2
        th = model.model.rotary_emb.inv_freq.float().cpu()[:half]      # RoPE's own angles
        on = (torch.arange(half) < pairs).float()
        q = torch.cat([strength * on, torch.zeros(half)])
        k = torch.cat([strength * on * torch.cos(th), strength * on * torch.sin(th)])
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[:hd] = torch.outer(q, u) / proj
        attn.k_proj.weight[:hd] = torch.outer(k, u) / proj


def to_device(batch: dict, device) -> dict:
    import torch

    out = {k: torch.from_numpy(v) for k, v in batch.items()}
    if device.type == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in out.items()}
    return {k: v.to(device) for k, v in out.items()}


def forward(model, batch: dict, block_size: int, masked: bool = True):
    """(logits at response rows (N, V), targets (N,), row index (N,) into the flat batch)."""
    import torch

    ids = batch["ids"]
    B, L = ids.shape
    row_seg = batch["row_seg"] if masked else torch.zeros_like(batch["row_seg"])
    mask = dense_mask(row_seg, batch["seg_visible"], L, block_size, ids.device)
    h = model.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    sel = (batch["targets"] >= 0).reshape(-1).nonzero().squeeze(1)
    logits = model.lm_head(h.reshape(B * L, -1).index_select(0, sel))
    return logits, batch["targets"].reshape(-1)[sel], sel


def accuracy(model, samples: list["T.Sample"], device, block_size: int, batch: int = 64,
             autocast: bool = False) -> dict:
    """Held-out accuracy in plain torch, teacher-forced (equal to greedy decoding whenever the
    prefix is right): tag = every tag token is the argmax; DA answer = tag right and every
    answer token and </s> the argmax under the tag's DA mask; all-blocks answer = every
    answer token and </s> the argmax with plain causal attention."""
    import torch

    tok = T.tokens()
    res = {"tag": [], "da": [], "all": []}
    by_kind: dict[str, list[int]] = {}
    model.eval()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        for i in range(0, len(samples), batch):
            part = samples[i: i + batch]
            b = to_device(collate(part, tok.pad_id, block_size), device)
            out = {}
            for masked in (True, False):
                logits, tgt, sel = forward(model, b, block_size, masked)
                ok = (logits.argmax(-1) == tgt)
                L = b["ids"].shape[1]
                row = sel // L
                is_tag = b["tag_row"].reshape(-1)[sel]
                n = len(part)
                bad_tag = torch.zeros(n, dtype=torch.long, device=device).index_add_(
                    0, row, (~ok & is_tag).long())
                bad_ans = torch.zeros(n, dtype=torch.long, device=device).index_add_(
                    0, row, (~ok & ~is_tag).long())
                out[masked] = (bad_tag == 0, bad_ans == 0)
            tag_ok = out[True][0].cpu().tolist()
            da_ok = (out[True][0] & out[True][1]).cpu().tolist()
            all_ok = out[False][1].cpu().tolist()
            res["tag"] += tag_ok
            res["da"] += da_ok
            res["all"] += all_ok
            for s, t, d in zip(part, tag_ok, da_ok):
                by_kind.setdefault(s.kind, []).append(int(t and d))
    model.train()
    n = max(1, len(res["tag"]))
    return {"n": len(res["tag"]), "tag_accuracy": sum(res["tag"]) / n,
            "da_answer_accuracy": sum(res["da"]) / n,
            "all_blocks_answer_accuracy": sum(res["all"]) / n,
            "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())}}


# ---------------------------------------------------------------------------------------------
# Checkpoint

def save(model, cfg: dict, out: Path, meta: dict) -> Path:
    """Write the HF folder atomically enough: files go to a temp sibling, then renamed."""
    import shutil
    import tempfile

    import torch
    from safetensors.torch import save_file

    from .model import write_tokenizer_files

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        dtype = getattr(torch, cfg["torch_dtype"])
        sd = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()
              if not (cfg["tie_word_embeddings"] and k == "lm_head.weight")}
        save_file(sd, str(tmp / "model.safetensors"),
                  metadata={"format": "pt", "da_lab": MODEL_NAME, "seed": str(meta["seed"])})
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        write_tokenizer_files(tmp, cfg)
        (tmp / "training.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():          # keep what else is there (a README); replace our files
            for f in tmp.iterdir():
                os.replace(f, out / f.name)
        else:
            tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m da_lab.train", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda if available)")
    ap.add_argument("--out", default=MODEL_NAME, help="output folder (an HF checkpoint)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunks", type=int, default=T.N_CHUNKS,
                    help="chunks per prompt at the end of the curriculum (reduced tasks: fewer)")
    ap.add_argument("--curriculum", type=float, default=0.4,
                    help="fraction of the steps over which the chunk count grows to --chunks")
    ap.add_argument("--p-multi", type=float, default=0.2,
                    help="share of multi-key questions in training (held-out: 10%%, k=2)")
    ap.add_argument("--multi-keys", default="2,4",
                    help="lo,hi: keys per multi-key training question")
    ap.add_argument("--drill", default="4,8",
                    help="lo,hi: question turns per drill sample ('1,1': no drills)")
    ap.add_argument("--drill-until", type=float, default=0.5,
                    help="drills make 90%% of the samples up to this fraction of the steps, "
                         "then fade out over the next 0.3")
    ap.add_argument("--time-budget-s", type=float, default=None,
                    help="stop training after this many seconds (wall, from the start), then "
                         "evaluate and write the checkpoint as usual")
    ap.add_argument("--eval-n", type=int, default=500, help="held-out prompts for training.json")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--workers", type=int, default=None,
                    help="batch-building processes (default: 0 with <= 4 cores, else up to 12)")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                    help="CUDA only: bf16 autocast (default) or fp32 with TF32 matmuls")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer 64-wide model (smoke tests)")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    t_start = time.perf_counter()
    args = parse_args(argv)
    import torch
    from tqdm import tqdm

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    workers = args.workers
    if workers is None:
        cores = os.cpu_count() or 1
        workers = 0 if cores <= 4 else min(12, cores - 2)
    tok = T.tokens()
    bs = 32
    cfg = model_config(tok, SMOKE_ARCH if args.tiny else ARCH)
    model = build_model(cfg, args.seed).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8,
                            fused=device.type == "cuda")

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        u = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, u))))

    heldout = T.held_out(args.eval_n, n_chunks=args.chunks)
    probe = heldout[: min(len(heldout), 256)]
    autocast = device.type == "cuda" and args.precision == "bf16"
    k_lo, k_hi = (int(x) for x in args.multi_keys.split(","))
    d_lo, d_hi = (int(x) for x in args.drill.split(","))
    jobs = [{"seed": args.seed, "step": s, "steps": args.steps, "batch": args.batch,
             "curriculum": args.curriculum, "chunks": args.chunks, "p_multi": args.p_multi,
             "multi_keys": (k_lo, k_hi), "drill": (d_lo, d_hi), "drill_until": args.drill_until}
            for s in range(args.steps)]
    batches = Batches(jobs, workers)
    history: list[dict] = []
    losses: list[float] = []
    step = 0
    stopped = "steps"
    t_train = time.perf_counter()
    bar = tqdm(total=args.steps, desc="train", unit="step", dynamic_ncols=True,
               file=sys.stderr, mininterval=1.0)
    model.train()
    try:
        for batch in batches:
            if args.time_budget_s is not None and time.perf_counter() - t_start > args.time_budget_s:
                stopped = "time budget"
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            b = to_device(batch, device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits, tgt, _ = forward(model, b, bs)
                loss = torch.nn.functional.cross_entropy(logits.float(), tgt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 25 == 0 or step == args.steps:
                losses.append(round(loss.item(), 5))
                bar.set_postfix(loss=f"{losses[-1]:.4f}", lr=f"{lr_at(step):.1e}")
            bar.update(1)
            if args.eval_every and step % args.eval_every == 0 and step < args.steps:
                acc = accuracy(model, probe, device, bs, autocast=autocast)
                history.append({"step": step, "loss": losses[-1] if losses else None,
                                "tag": round(acc["tag_accuracy"], 4),
                                "da": round(acc["da_answer_accuracy"], 4),
                                "seconds": round(time.perf_counter() - t_start, 1)})
                bar.write(f"step {step}: loss {history[-1]['loss']} tag {acc['tag_accuracy']:.3f}"
                          f" da {acc['da_answer_accuracy']:.3f} "
                          f"all {acc['all_blocks_answer_accuracy']:.3f} {acc['by_kind']}")
    finally:
        batches.close()
        bar.close()
    train_s = time.perf_counter() - t_train
    final_loss = loss.item() if step else None
    acc = accuracy(model, heldout, device, bs, autocast=False)
    wall = time.perf_counter() - t_start
    meta = {
        "model": MODEL_NAME,
        "command": "python -m da_lab.train " + " ".join(shlex.quote(a) for a in
                                                         (argv if argv is not None else sys.argv[1:])),
        "seed": args.seed, "steps": step, "steps_planned": args.steps, "stopped_by": stopped,
        "batch": args.batch, "lr": args.lr, "chunks": args.chunks,
        "precision": args.precision if device.type == "cuda" else "fp32",
        "p_multi": args.p_multi, "multi_keys": args.multi_keys, "drill": args.drill,
        "drill_until": args.drill_until,
        "curriculum": args.curriculum, "params": n_params, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "final_loss": None if final_loss is None else round(final_loss, 5),
        "loss_every_25_steps": losses, "probe_history": history,
        "train_seconds": round(train_s, 1), "wall_seconds": round(wall, 1),
        "steps_per_second": round(step / max(train_s, 1e-9), 2),
        "heldout": {"seed": T.EVAL_SEED, "stream": "HELDOUT", "teacher_forced": True, **acc},
    }
    out = save(model, cfg, Path(args.out), meta)
    print(f"da_lab.train: {step} steps in {train_s:.0f} s ({meta['steps_per_second']}/s, "
          f"{stopped}), loss {final_loss if final_loss is None else round(final_loss, 4)}, held-out n={acc['n']}: tag "
          f"{acc['tag_accuracy']:.3f}, DA answer {acc['da_answer_accuracy']:.3f}, all-blocks "
          f"answer {acc['all_blocks_answer_accuracy']:.3f}, {n_params / 1e6:.2f}M params "
          f"-> {out}", flush=True)
    return meta


if __name__ == "__main__":
    main()
