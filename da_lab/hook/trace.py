"""A serving engine's step records, in the lab's trace format (DA_LAB_TRACE=FILE).

`da-lab serve` with DA_LAB_TRACE set: rank 0's worker writes one `StepRecord` per engine step
that had a DA request, through the same child-process writer the Lab records with
(trace/process.py: encoding and compression never run on the engine's thread). The file is a
trace like any other (`da_lab.trace.load`, `TraceSource`), read while it grows by
`TraceSource(path, follow=True)`.

What a worker can see, and so what a server trace holds, differs from a Lab's in three ways:
  - tokens: each request's part of a step carries the tokens the tag machine read at that step
    (sampled at the step before: the hook reads a step's samples when the next one starts);
  - the KV map ("kv") comes from the worker's block tables, read by the runner's adapter
    (`RunnerView.blocks`, runners/v1.py, v2.py): which request holds which physical block;
    prefix-cache hashes live with the scheduler, in another process, so none are shown;
  - requests without a layout are not in `requests` (the hook does not track them), though
    their blocks are in the KV map.
"""

from __future__ import annotations

import time
from pathlib import Path

from da_lab.core.record import StepRecord


def tp_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:   # noqa: BLE001 - no process group: a single worker
        return 0


class ServerTrace:
    """Rank 0's trace of a server; handed the session's request book (hook/book.py)."""

    def __init__(self, path: str | Path, book) -> None:
        self.path = Path(path)
        self.book = book
        self.writer = None
        self._owners: dict[int, tuple[str, ...]] = {}
        self._seen: dict[str, tuple[int, int]] = {}    # da_id -> (tokens, text chars) written
        self._added: set[str] = set()
        self._t = time.perf_counter()
        self.step = 0

    def _open(self, view, block_size: int) -> None:
        from da_lab.trace.format import header, provenance
        from da_lab.trace.process import ProcessTraceWriter

        f = self.book.facts
        prov = provenance(vllm=f.vllm, device=f.device, model=f.tokenizer_path,
                          runner=f.runner_class, backend=f.backend, block_size=block_size,
                          num_blocks=view.num_blocks, source="vllm serve")
        # No skeleton and no initial KV map: the worker has neither at hand.
        self.writer = ProcessTraceWriter(self.path, header(prov))

    def write(self, logs: list, warnings: list[dict], view) -> None:
        """One record of the step's hook `logs` (hook/step.Step) and the `warnings` raised in
        it; `view()` gives what the runner shows (runners/common.RunnerView)."""
        view = view()
        reqs = [r for log in logs for r in log.requests]
        if self.writer is None:
            self._open(view, reqs[0].block_size)
        now = time.perf_counter()
        by_id = {st.da_id: st for st in self.book.requests.values()}
        added, outputs = [], []
        for r in reqs:
            st = by_id.get(r.req)
            if st is None:
                continue
            if r.req not in self._added:
                self._added.add(r.req)
                added.append(self._added_entry(st, view))
            n, c = self._seen.get(r.req, (0, 0))
            outputs.append((r.req, st.captured[n:st.n_seen], st.text[c:], False))
            self._seen[r.req] = (st.n_seen, len(st.text))
        rec = StepRecord.build(self.step, round(now - self._t, 6), logs, outputs, added,
                               warnings, kv=self._kv(view))
        self._t = now
        self.step += 1
        self.writer.write(rec)

    def _added_entry(self, st, view) -> dict:
        """What the Lab writes when it adds a request: prompt length, max_tokens (where the
        runner keeps SamplingParams: v1), layout, the director's tags as text."""
        tok = self.book.tokenizer_now()
        return {"req": st.da_id, "prompt_len": st.prompt_len,
                "max_tokens": view.max_tokens(st.req_id), "layout": st.layout.to_dict(),
                "tags": [[at, tok.decode(ids)] for at, ids in st.script]}

    def _kv(self, view) -> dict:
        owners: dict[int, list[str]] = {}
        for name, ids in view.blocks().items():
            for b in ids:
                owners.setdefault(b, []).append(name)
        now = {b: tuple(sorted(v)) for b, v in owners.items()}
        out = {"assign": {str(b): list(v) for b, v in sorted(now.items())
                          if self._owners.get(b) != v},
               "free": sorted(b for b in self._owners if b not in now),
               "cached": [], "uncached": []}
        self._owners = now
        return out

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
