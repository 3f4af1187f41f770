"""Training batches: the curriculum levels, collation with the DA mask's compact form, and
batches as pure functions of (seed, step), built ahead in worker processes (see train.py)."""

from __future__ import annotations

import numpy as np

from da_lab.training.data import task as T
from da_lab.training.trainer.masks import segments

# Curriculum levels: (chunks, records per chunk). A run starts at the first and moves on when
# the held-out probe of the level it is at passes (tag >= ADVANCE_TAG, DA answer >= ADVANCE_DA):
# two candidate keys first, where the copy-by-key circuit gets the strongest signal, then more.
LEVELS = ((1, 2), (2, 2), (2, 4), (3, 4), (4, 4), (6, 4), (8, 4), (10, 4), (12, 4))
ADVANCE_TAG, ADVANCE_DA = 0.90, 0.85


def levels_for(chunks: int) -> list[tuple[int, int]]:
    out = [lv for lv in LEVELS if lv[0] < chunks]
    return out + [(chunks, T.RECORDS_PER_CHUNK)]


def collate(samples: list[T.Sample], pad_id: int, block_size: int) -> dict:
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
                                           for t, w in zip(s.response_ids, s.written, strict=False)]
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
    batches queued after it: the same decisions at the same steps give the same batches.
    `make(job)` builds one batch (a module-level function, so worker processes can run it):
    this trainer's `make_batch` by default, finetune.py's for the SmolLM2 task."""

    def __init__(self, job, steps: int, workers: int, ahead: int = 16, make=None) -> None:
        from collections import deque

        self.job, self.steps, self.workers, self.ahead = job, steps, workers, max(1, ahead)
        self.make = make or make_batch
        self.pool = None
        self.queue: deque = deque()
        self.next = 0
        if workers > 0:
            import multiprocessing as mp

            self.pool = mp.get_context("spawn").Pool(workers)

    def get(self, step: int) -> dict:
        while self.next <= step or (len(self.queue) < self.ahead and self.next < self.steps):
            j = self.job(self.next)
            self.queue.append(self.pool.apply_async(self.make, (j,)) if self.pool else j)
            self.next += 1
        item = self.queue.popleft()
        return item.get() if self.pool else self.make(item)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool = None
