"""Train the tiny Llama that writes its own DA tags (`python -m da_lab.training.trainer.train`).

The model reads a DA prompt of the task in `da_lab.training.data.task` (scaffold, 12 one-block
chunks of records, a question) and writes `<focus Ck>` / `<focus Ci,Cj>` / `<local>`, the
answer, </s>.

    python -m da_lab.training.trainer.train --device cuda --seed 0 --steps 5000 --batch 128 \
        --workers 6 --time-budget-s 380 --out da_lab/assets/da-tiny-tags     # the shipped weights

The DA mask in training is the hook's, position by position. `hook_history` replays what the
hook records for a request that writes the response (`RequestState.mask_history`: the prefill
under GLOBAL, then one entry per decode step with `da_lab.core.mask.kept_blocks` of the directive in
force); a tag closed at output index t applies from the step whose query is that token, i.e. to
the prediction of output t+1 on. `da_lab.checks.oracle.mask_matrix` turns such a history into the
dense mask; training builds the same matrix on the device from a compact form (`segments`: per
row a segment, per segment the visible blocks), and tests compare it with `mask_matrix` of
`hook_history` and with the history a real engine recorded. Loss is on response tokens only
(in drills, only on the tokens the model writes: tags, answers, </s>).

Learnability (see also `da_lab.training.data.task`): the retrievals are induction copies, which a
small
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

from da_lab.training.data import task as T
from da_lab.training.trainer.batches import (  # noqa: F401
    ADVANCE_DA,
    ADVANCE_TAG,
    LEVELS,
    Batches,
    collate,
    levels_for,
    make_batch,
)
from da_lab.training.trainer.masks import dense_mask, hook_history, segments  # noqa: F401
from da_lab.training.trainer.model import (
    accuracy,
    build_model,
    forward,
    to_device,
    wire_previous_token_head,
)

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


def model_config(tok: T.Tokens, arch: dict | None = None, dtype: str = "bfloat16") -> dict:
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
# Checkpoint

def save(model, cfg: dict, out: Path, meta: dict) -> Path:
    """Write the HF folder atomically enough: files go to a temp sibling, then renamed."""
    import shutil
    import tempfile

    import torch
    from safetensors.torch import save_file

    from da_lab.models.tiny import write_tokenizer_files

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
    ap = argparse.ArgumentParser(prog="python -m da_lab.training.trainer.train",
                                 description=__doc__.split("\n")[0])
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


class Run:
    """One training run: the model, its optimizer and the curriculum state, stepped by
    `train()` and finished by `finish()` (held-out accuracy, checkpoint, training.json)."""

    def __init__(self, args, argv, t_start: float) -> None:
        import torch

        self.args, self.argv, self.t_start = args, argv, t_start
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self.device = device
        workers = args.workers
        if workers is None:
            cores = os.cpu_count() or 1
            workers = 0 if cores <= 4 else min(12, cores - 2)
        self.workers = workers
        self.bs = 32
        self.cfg = model_config(T.tokens(), SMOKE_ARCH if args.tiny else ARCH)
        model = build_model(self.cfg, args.seed)
        if args.prev_head:
            wire_previous_token_head(model, seed=args.seed)
        self.model = model = model.to(device)
        self.n_params = sum(p.numel() for p in model.parameters())
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=args.lr, betas=(0.9, 0.98), eps=1e-8,
                                     fused=device.type == "cuda")
        self.levels = levels = levels_for(args.chunks)
        self.state = {"level": 0, "final_at": 0 if len(levels) == 1 else None}
        self.log: list[dict] = [{"step": 0, "level": 0, "chunks": levels[0][0],
                                 "records_per_chunk": levels[0][1]}]
        self.autocast = device.type == "cuda" and args.precision == "bf16"
        self.multi_keys = tuple(int(x) for x in args.multi_keys.split(","))
        self.drill = tuple(int(x) for x in args.drill.split(","))
        self.probe = self.probe_at(0)
        self.history: list[dict] = []
        self.losses: list[float] = []
        self.step, self.stopped, self.loss = 0, "steps", None

    def lr_at(self, step: int) -> float:
        """Warmup, then constant until the last curriculum level is reached, then cosine to
        10% at --steps."""
        args = self.args
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        f = self.state["final_at"]
        if f is None:
            return args.lr
        u = (step - f) / max(1, args.steps - f)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, u))))

    def p_drill(self, step: int) -> float:
        """90% drills until the last level is reached, then fewer, none after 40% of what
        remains (the end of training sees the task exactly as evaluated)."""
        f = self.state["final_at"]
        if f is None:
            return 0.9
        return max(0.0, 0.9 * (1 - (step - f) / max(1, 0.4 * (self.args.steps - f))))

    def job(self, s: int) -> dict:
        a = self.args
        return {"seed": a.seed, "step": s, "batch": a.batch, "levels": self.levels,
                "level": self.state["level"], "p_drill": self.p_drill(s),
                "p_multi": a.p_multi, "multi_keys": self.multi_keys, "drill": self.drill}

    def probe_at(self, level: int) -> list:
        n, rpc = self.levels[level]
        return T.held_out(self.args.probe_n, seed=T.EVAL_SEED + 1 + level, n_chunks=n,
                          records_per_chunk=rpc)

    def train_step(self, batch) -> None:
        import torch

        for g in self.opt.param_groups:
            g["lr"] = self.lr_at(self.step)
        b = to_device(batch, self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            logits, tgt, _ = forward(self.model, b, self.bs)
            loss = torch.nn.functional.cross_entropy(logits.float(), tgt)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.loss = loss
        self.step += 1

    def check(self, bar) -> None:
        """The probe of the level the run is at; move on when it passes."""
        step, args, levels = self.step, self.args, self.levels
        acc = accuracy(self.model, self.probe, self.device, self.bs, autocast=self.autocast)
        lv = self.state["level"]
        self.history.append({"step": step, "level": lv, "loss": round(self.loss.item(), 5),
                             "tag": round(acc["tag_accuracy"], 4),
                             "da": round(acc["da_answer_accuracy"], 4),
                             "seconds": round(time.perf_counter() - self.t_start, 1)})
        passed = (acc["tag_accuracy"] >= ADVANCE_TAG
                  and acc["da_answer_accuracy"] >= ADVANCE_DA)
        if passed or (args.eval_every and step % args.eval_every == 0):
            bar.write(f"step {step}: level {lv} {levels[lv]} loss {self.history[-1]['loss']}"
                      f" tag {acc['tag_accuracy']:.3f} da {acc['da_answer_accuracy']:.3f}"
                      f" all {acc['all_blocks_answer_accuracy']:.3f} {acc['by_kind']}")
        if passed and lv + 1 < len(levels):
            self.state["level"] = lv + 1
            if lv + 1 == len(levels) - 1:
                self.state["final_at"] = step
            self.probe = self.probe_at(lv + 1)
            self.log.append({"step": step, "level": lv + 1, "chunks": levels[lv + 1][0],
                             "records_per_chunk": levels[lv + 1][1],
                             "seconds": round(time.perf_counter() - self.t_start, 1)})
            bar.write(f"step {step}: curriculum -> level {lv + 1} {levels[lv + 1]}")

    def train(self) -> None:
        from tqdm import tqdm

        args = self.args
        batches = Batches(self.job, args.steps, self.workers, ahead=max(8, 2 * self.workers))
        self.t_train = time.perf_counter()
        bar = tqdm(total=args.steps, desc="train", unit="step", dynamic_ncols=True,
                   file=sys.stderr, mininterval=1.0)
        self.model.train()
        try:
            while self.step < args.steps:
                budget = args.time_budget_s
                if budget is not None and time.perf_counter() - self.t_start > budget:
                    self.stopped = "time budget"
                    break
                self.train_step(batches.get(self.step))
                step = self.step
                if step % 25 == 0 or step == args.steps:
                    self.losses.append(round(self.loss.item(), 5))
                    bar.set_postfix(loss=f"{self.losses[-1]:.4f}", level=self.state["level"],
                                    lr=f"{self.lr_at(step):.1e}")
                bar.update(1)
                if args.check_every and step % args.check_every == 0 and step < args.steps:
                    self.check(bar)
        finally:
            batches.close()
            bar.close()
        self.train_s = time.perf_counter() - self.t_train

    def finish(self) -> dict:
        import torch

        args, device, step, train_s = self.args, self.device, self.step, self.train_s
        final_loss = self.loss.item() if step else None
        heldout = T.held_out(args.eval_n, n_chunks=args.chunks)
        acc = accuracy(self.model, heldout, device, self.bs, autocast=False)
        wall = time.perf_counter() - self.t_start
        meta = {
            "model": MODEL_NAME,
            "command": "python -m da_lab.training.trainer.train " + " ".join(
                shlex.quote(a) for a in (self.argv if self.argv is not None else sys.argv[1:])),
            "seed": args.seed, "steps": step, "steps_planned": args.steps,
            "stopped_by": self.stopped, "batch": args.batch, "lr": args.lr,
            "chunks": args.chunks,
            "precision": args.precision if device.type == "cuda" else "fp32",
            "prev_head": args.prev_head, "workers": self.workers,
            "p_multi": args.p_multi, "multi_keys": args.multi_keys, "drill": args.drill,
            "curriculum": self.log, "final_level_at_step": self.state["final_at"],
            "params": self.n_params, "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
            else "cpu",
            "torch": torch.__version__,
            "final_loss": None if final_loss is None else round(final_loss, 5),
            "loss_every_25_steps": self.losses, "probe_history": self.history,
            "train_seconds": round(train_s, 1), "wall_seconds": round(wall, 1),
            "steps_per_second": round(step / max(train_s, 1e-9), 2),
            "heldout": {"seed": T.EVAL_SEED, "stream": "HELDOUT", "teacher_forced": True,
                        **acc},
        }
        out = save(self.model, self.cfg, Path(args.out), meta)
        goals = acc["tag_accuracy"] >= 0.95 and acc["da_answer_accuracy"] >= 0.90
        loss_txt = "n/a" if final_loss is None else f"{final_loss:.4f}"
        print(f"da_lab.training.trainer.train: {step} steps in {train_s:.0f} s "
              f"({meta['steps_per_second']}/s, {self.stopped}), wall {wall:.0f} s, loss "
              f"{loss_txt}, held-out n={acc['n']}: tag {acc['tag_accuracy']:.3f}, DA answer "
              f"{acc['da_answer_accuracy']:.3f}, all-blocks answer "
              f"{acc['all_blocks_answer_accuracy']:.3f} (goals tag>=0.95, DA>=0.90: "
              f"{'met' if goals else 'NOT met'}), {self.n_params / 1e6:.2f}M params -> {out}",
              flush=True)
        return meta


def main(argv=None) -> dict:
    t_start = time.perf_counter()
    args = parse_args(argv)
    run = Run(args, argv, t_start)
    run.train()
    return run.finish()


if __name__ == "__main__":
    main()
