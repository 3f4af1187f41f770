"""The fine-tune's batches (da_lab.training.trainer.finetune): pure functions of (seed, step),
built in worker processes. Card and paper samples of nl_gen, nl_pairs' two-document
questions, and steps of nl_long's long texts in the paper's segments."""

from __future__ import annotations

from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_long as NL
from da_lab.training.data import nl_pairs as NP
from da_lab.training.data import nl_task as N
from da_lab.training.trainer.batches import collate

BLOCK = 32
STEP_STREAM = 2        # the per-step draws (context length), apart from the samples' streams


def make_batch(job: dict) -> dict:
    """Batch `step` of a run, a pure function of its arguments (runs in worker processes):
    one context length for the step, then as many samples as fit in `batch_tokens`. A share
    `long` of the steps are long-text steps (nl_long: the paper's segments, its protocol); in
    the others a share `pairs` of the samples are nl_pairs' two-document questions. No draw is
    made for a share of 0, so earlier runs replay."""
    from da_lab.training.data.task import TRAIN, rng_for

    tok = N.tokens(job["tok"])
    lo, hi = job["context"]
    srng = rng_for(job["seed"], STEP_STREAM, job["step"])
    if job.get("long", 0) > 0 and srng.random() < job["long"]:
        return _long_batch(job, tok, srng)
    ctx = int(srng.integers(lo, hi + 1))
    n = max(1, min(job["batch"], job["batch_tokens"] // ctx))
    samples = []
    for j in range(n):
        rng = rng_for(job["seed"], TRAIN, job["step"] * job["batch"] + j)
        t_lo, t_hi = job["drill_turns"]
        turns = int(rng.integers(t_lo, t_hi + 1)) if rng.random() < job["drill_p"] else 1
        # A share in the paper's protocol (one turn unless paper_drills); no draw at 0, so
        # card runs replay.
        paper = job.get("paper", 0) > 0 and rng.random() < job["paper"]
        if paper and not job.get("paper_drills"):
            turns = 1
        context = (max(lo, int(ctx * 0.85)), ctx)
        if job.get("pairs", 0) > 0 and rng.random() < job["pairs"]:
            samples.append(NP.make_pair_sample(
                rng, split=job.get("split", "train"), n_chunks=job["chunks"], context=context,
                tok=tok, protocol="paper" if paper else "card"))
            continue
        samples.append(G.make_sample(rng, context=context,
                                     split=job.get("split", "train"),
                                     n_chunks=job["chunks"], turns=turns,
                                     tok=tok, mix=tuple(job["mix"]),
                                     protocol="paper" if paper else "card"))
    return collate(samples, tok.pad_id, BLOCK)


def _long_batch(job: dict, tok, srng) -> dict:
    """A long-text step: one text length for the step (job["long_tokens"]), samples of it
    up to batch_tokens; a share job["long_multi"] are two-part questions (two segments)."""
    from da_lab.training.data.task import TRAIN, rng_for

    lo, hi = job["long_tokens"]
    size = int(srng.integers(lo, hi + 1))
    n = max(1, min(job["batch"], job["batch_tokens"] // size))
    samples = []
    for j in range(n):
        rng = rng_for(job["seed"], TRAIN, job["step"] * job["batch"] + j)
        kind = "multi" if rng.random() < job.get("long_multi", 0.4) else "single"
        samples.append(NL.make_long_sample(rng, kind=kind, split=job.get("split", "train"),
                                           tokens=(max(lo, int(size * 0.85)), size), tok=tok))
    return collate(samples, tok.pad_id, BLOCK)
