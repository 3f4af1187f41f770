"""Train the tiny Llama that writes its own DA tags (`python -m da_lab.training.train`).

The model reads a DA prompt of the task in `da_lab.training.task` (scaffold, 12 one-block chunks of
records, a question) and writes `<focus Ck>` / `<focus Ci,Cj>` / `<local>`, the answer, </s>.

    python -m da_lab.training.train --device cuda --seed 0 --steps 5000 --batch 128 --workers 6 \
        --time-budget-s 380 --out da_lab/assets/da-tiny-tags     # the shipped weights

The DA mask in training is the hook's, position by position. `hook_history` replays what the
hook records for a request that writes the response (`RequestState.mask_history`: the prefill
under GLOBAL, then one entry per decode step with `da_lab.core.mask.kept_blocks` of the directive in
force); a tag closed at output index t applies from the step whose query is that token, i.e. to
the prediction of output t+1 on. `da_lab.checks.oracle.mask_matrix` turns such a history into the
dense mask; training builds the same matrix on the device from a compact form (`segments`: per
row a segment, per segment the visible blocks), and tests compare it with `mask_matrix` of
`hook_history` and with the history a real engine recorded. Loss is on response tokens only
(in drills, only on the tokens the model writes: tags, answers, </s>).

Learnability (see also `da_lab.training.task`): the retrievals are induction copies, which a small
model finds only after a long plateau, and one question per 430-token prompt gives little
signal. So: an adaptive curriculum (`LEVELS`: 1 chunk of 2 records first, up to 12 chunks of
4; a level is left when its held-out probe passes, checked every --check-every steps; the LR
stays flat until the last level, then decays), drills (several question turns per prompt until
the last level, then fading out), more multi-key questions in training than in evaluation, and
head 0 of layer 0 initialised as a previous-token head (`wire_previous_token_head`;
--no-prev-head to disable). training.json records when each level was reached.

A plain torch loop over transformers' `LlamaForCausalLM` (SDPA attention with the 4D boolean
mask, bf16 autocast on CUDA), AdamW, warmup + cosine. Batches are pure functions of
(seed, step), built in worker processes on machines with cores to spare, so a run is the same
sequence of batches whatever the timing, given the same curriculum decisions (GPU kernels may
differ in the last bits, so a probe at a threshold could decide differently there).
--time-budget-s stops training early and still evaluates and writes the checkpoint.

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

from da_lab.training import task as T
from da_lab.core.layout import Layout
from da_lab.core.mask import kept_blocks
from da_lab.core.tags import Directive, Mode

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

# Curriculum levels: (chunks, records per chunk). A run starts at the first and moves on when
# the held-out probe of the level it is at passes (tag >= ADVANCE_TAG, DA answer >= ADVANCE_DA):
# two candidate keys first, where the copy-by-key circuit gets the strongest signal, then more.
LEVELS = ((1, 2), (2, 2), (2, 4), (3, 4), (4, 4), (6, 4), (8, 4), (10, 4), (12, 4))
ADVANCE_TAG, ADVANCE_DA = 0.90, 0.85


def levels_for(chunks: int) -> list[tuple[int, int]]:
    out = [lv for lv in LEVELS if lv[0] < chunks]
    return out + [(chunks, T.RECORDS_PER_CHUNK)]


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


def make_batch(job: dict) -> dict:
    """Batch `step` of a run: a pure function of its arguments (runs in worker processes).

    80% of the samples are at the current curriculum level, 20% at earlier ones. A share
    `p_drill` are drills: one prompt, several question turns in the response, each turn one
    more supervised retrieval under the hook's mask (see `task.make_sample`); the training
    mixture also asks more multi-key questions than the held-out one."""
    tok = T.tokens()
    samples = []
    step, batch, levels = job["step"], job["batch"], job["levels"]
    for j in range(batch):
        rng = T.rng_for(job["seed"], T.TRAIN, step * batch + j)
        lv = job["level"]
        if lv > 0 and rng.random() < 0.2:
            lv = int(rng.integers(0, lv))
        n, rpc = levels[lv]
        turns = 1
        if job["drill"][1] > 1 and rng.random() < job["p_drill"]:
            turns = int(rng.integers(job["drill"][0], job["drill"][1] + 1))
        samples.append(T.make_sample(rng, n_chunks=n, records_per_chunk=rpc,
                                     p_multi=job["p_multi"], multi_keys=job["multi_keys"],
                                     turns=turns, tok=tok))
    return collate(samples, tok.pad_id, samples[0].prompt.layout.block_size)


class Batches:
    """Batches in step order, built `ahead` steps in advance (in worker processes when asked).

    `job(step)` is called when a step is queued, so a change of curriculum level reaches the
    batches queued after it: the same decisions at the same steps give the same batches."""

    def __init__(self, job, steps: int, workers: int, ahead: int = 16) -> None:
        from collections import deque

        self.job, self.steps, self.workers, self.ahead = job, steps, workers, max(1, ahead)
        self.pool = None
        self.queue: deque = deque()
        self.next = 0
        if workers > 0:
            import multiprocessing as mp

            self.pool = mp.get_context("spawn").Pool(workers)

    def get(self, step: int) -> dict:
        while self.next <= step or (len(self.queue) < self.ahead and self.next < self.steps):
            j = self.job(self.next)
            self.queue.append(self.pool.apply_async(make_batch, (j,)) if self.pool else j)
            self.next += 1
        item = self.queue.popleft()
        return item.get() if self.pool else make_batch(item)

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

    from da_lab.engine.models import write_tokenizer_files

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
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.train", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda if available)")
    ap.add_argument("--out", default=MODEL_NAME, help="output folder (an HF checkpoint)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunks", type=int, default=T.N_CHUNKS,
                    help="chunks per prompt at the end of the curriculum (reduced tasks: fewer)")
    ap.add_argument("--p-multi", type=float, default=0.2,
                    help="share of multi-key questions in training (held-out: 10%%, k=2)")
    ap.add_argument("--multi-keys", default="2,4",
                    help="lo,hi: keys per multi-key training question")
    ap.add_argument("--drill", default="4,8",
                    help="lo,hi: question turns per drill sample ('1,1': no drills)")
    ap.add_argument("--time-budget-s", type=float, default=None,
                    help="stop training after this many seconds (wall, from the start), then "
                         "evaluate and write the checkpoint as usual")
    ap.add_argument("--eval-n", type=int, default=500, help="held-out prompts for training.json")
    ap.add_argument("--eval-every", type=int, default=500, help="print the probe every N steps")
    ap.add_argument("--check-every", type=int, default=100,
                    help="probe the current curriculum level every N steps (0: never advance)")
    ap.add_argument("--probe-n", type=int, default=128, help="held-out prompts per probe")
    ap.add_argument("--workers", type=int, default=None,
                    help="batch-building processes (default: 0 with <= 4 cores, else up to 12)")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                    help="CUDA only: bf16 autocast (default) or fp32 with TF32 matmuls")
    ap.add_argument("--no-prev-head", dest="prev_head", action="store_false",
                    help="do not initialise layer 0 head 0 as a previous-token head")
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
    model = build_model(cfg, args.seed)
    if args.prev_head:
        wire_previous_token_head(model, seed=args.seed)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8,
                            fused=device.type == "cuda")

    levels = levels_for(args.chunks)
    state = {"level": 0, "final_at": 0 if len(levels) == 1 else None}
    log: list[dict] = [{"step": 0, "level": 0, "chunks": levels[0][0],
                        "records_per_chunk": levels[0][1]}]

    def lr_at(step: int) -> float:
        """Warmup, then constant until the last curriculum level is reached, then cosine to
        10% at --steps."""
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        f = state["final_at"]
        if f is None:
            return args.lr
        u = (step - f) / max(1, args.steps - f)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, u))))

    def p_drill(step: int) -> float:
        """90% drills until the last level is reached, then fewer, none after 40% of what
        remains (the end of training sees the task exactly as evaluated)."""
        f = state["final_at"]
        if f is None:
            return 0.9
        return max(0.0, 0.9 * (1 - (step - f) / max(1, 0.4 * (args.steps - f))))

    heldout = T.held_out(args.eval_n, n_chunks=args.chunks)
    autocast = device.type == "cuda" and args.precision == "bf16"
    k_lo, k_hi = (int(x) for x in args.multi_keys.split(","))
    d_lo, d_hi = (int(x) for x in args.drill.split(","))

    def job(s: int) -> dict:
        return {"seed": args.seed, "step": s, "batch": args.batch, "levels": levels,
                "level": state["level"], "p_drill": p_drill(s), "p_multi": args.p_multi,
                "multi_keys": (k_lo, k_hi), "drill": (d_lo, d_hi)}

    def probe_at(level: int) -> list:
        n, rpc = levels[level]
        return T.held_out(args.probe_n, seed=T.EVAL_SEED + 1 + level, n_chunks=n,
                          records_per_chunk=rpc)

    probe = probe_at(0)
    batches = Batches(job, args.steps, workers, ahead=max(8, 2 * workers))
    history: list[dict] = []
    losses: list[float] = []
    step = 0
    stopped = "steps"
    t_train = time.perf_counter()
    bar = tqdm(total=args.steps, desc="train", unit="step", dynamic_ncols=True,
               file=sys.stderr, mininterval=1.0)
    model.train()
    try:
        while step < args.steps:
            budget = args.time_budget_s
            if budget is not None and time.perf_counter() - t_start > budget:
                stopped = "time budget"
                break
            batch = batches.get(step)
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
                bar.set_postfix(loss=f"{losses[-1]:.4f}", level=state["level"],
                                lr=f"{lr_at(step):.1e}")
            bar.update(1)
            if args.check_every and step % args.check_every == 0 and step < args.steps:
                acc = accuracy(model, probe, device, bs, autocast=autocast)
                lv = state["level"]
                history.append({"step": step, "level": lv, "loss": round(loss.item(), 5),
                                "tag": round(acc["tag_accuracy"], 4),
                                "da": round(acc["da_answer_accuracy"], 4),
                                "seconds": round(time.perf_counter() - t_start, 1)})
                passed = (acc["tag_accuracy"] >= ADVANCE_TAG
                          and acc["da_answer_accuracy"] >= ADVANCE_DA)
                if passed or (args.eval_every and step % args.eval_every == 0):
                    bar.write(f"step {step}: level {lv} {levels[lv]} loss {history[-1]['loss']}"
                              f" tag {acc['tag_accuracy']:.3f} da {acc['da_answer_accuracy']:.3f}"
                              f" all {acc['all_blocks_answer_accuracy']:.3f} {acc['by_kind']}")
                if passed and lv + 1 < len(levels):
                    state["level"] = lv + 1
                    if lv + 1 == len(levels) - 1:
                        state["final_at"] = step
                    probe = probe_at(lv + 1)
                    log.append({"step": step, "level": lv + 1, "chunks": levels[lv + 1][0],
                                "records_per_chunk": levels[lv + 1][1],
                                "seconds": round(time.perf_counter() - t_start, 1)})
                    bar.write(f"step {step}: curriculum -> level {lv + 1} {levels[lv + 1]}")
    finally:
        batches.close()
        bar.close()
    train_s = time.perf_counter() - t_train
    final_loss = loss.item() if step else None
    acc = accuracy(model, heldout, device, bs, autocast=False)
    wall = time.perf_counter() - t_start
    meta = {
        "model": MODEL_NAME,
        "command": "python -m da_lab.training.train " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
        "seed": args.seed, "steps": step, "steps_planned": args.steps, "stopped_by": stopped,
        "batch": args.batch, "lr": args.lr, "chunks": args.chunks,
        "precision": args.precision if device.type == "cuda" else "fp32",
        "prev_head": args.prev_head, "workers": workers,
        "p_multi": args.p_multi, "multi_keys": args.multi_keys, "drill": args.drill,
        "curriculum": log, "final_level_at_step": state["final_at"],
        "params": n_params, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "final_loss": None if final_loss is None else round(final_loss, 5),
        "loss_every_25_steps": losses, "probe_history": history,
        "train_seconds": round(train_s, 1), "wall_seconds": round(wall, 1),
        "steps_per_second": round(step / max(train_s, 1e-9), 2),
        "heldout": {"seed": T.EVAL_SEED, "stream": "HELDOUT", "teacher_forced": True, **acc},
    }
    out = save(model, cfg, Path(args.out), meta)
    goals = acc["tag_accuracy"] >= 0.95 and acc["da_answer_accuracy"] >= 0.90
    loss_txt = "n/a" if final_loss is None else f"{final_loss:.4f}"
    print(f"da_lab.training.train: {step} steps in {train_s:.0f} s ({meta['steps_per_second']}/s, "
          f"{stopped}), wall {wall:.0f} s, loss {loss_txt}, held-out n={acc['n']}: tag "
          f"{acc['tag_accuracy']:.3f}, DA answer {acc['da_answer_accuracy']:.3f}, all-blocks "
          f"answer {acc['all_blocks_answer_accuracy']:.3f} (goals tag>=0.95, DA>=0.90: "
          f"{'met' if goals else 'NOT met'}), {n_params / 1e6:.2f}M params -> {out}", flush=True)
    return meta


if __name__ == "__main__":
    main()
