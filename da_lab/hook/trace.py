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

from pathlib import Path

from da_lab.core.engine_step import EngineOutput, EngineStep


def tp_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except (ImportError, RuntimeError, ValueError):    # no process group: a single worker
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

    def _open(self, view, block_size: int) -> None:
        from da_lab.trace.format import header, provenance
        from da_lab.trace.process import ProcessTraceWriter

        f = self.book.facts
        prov = provenance(vllm=f.vllm, device=f.device, model=f.tokenizer_path,
                          runner=f.runner_class, backend=f.backend, block_size=block_size,
                          num_blocks=view.num_blocks, source="vllm serve")
        # No skeleton and no initial KV map: the worker has neither at hand.
        self.writer = ProcessTraceWriter(self.path, header(prov))

    def outputs(self, logs: list) -> list[EngineOutput]:
        """What the worker can tell of the step's outputs: per DA request the tokens the tag
        machine read at this step and the text they decoded to (`logs`: the hook's steps)."""
        by_id = {st.da_id: st for st in self.book.requests.values()}
        out = []
        for r in (r for log in logs for r in log.requests):
            st = by_id.get(r.req)
            if st is None:
                continue
            n, c = self._seen.get(r.req, (0, 0))
            out.append(EngineOutput(r.req, tuple(st.captured[n:st.n_seen]), st.text[c:], False))
            self._seen[r.req] = (st.n_seen, len(st.text))
        return out

    def write(self, step: EngineStep, view) -> None:
        """One record of `step` (core/engine_step.EngineStep: the hook's steps, the outputs the
        worker saw, the warnings raised in it); `view()` gives what the runner shows
        (runners/common.RunnerView)."""
        view = view()
        if self.writer is None:
            self._open(view, step.requests[0].block_size)
        by_id = {st.da_id: st for st in self.book.requests.values()}
        added = []
        for r in step.requests:
            st = by_id.get(r.req)
            if st is not None and r.req not in self._added:
                self._added.add(r.req)
                added.append(self._added_entry(st, view))
        self.writer.write(step.record(added, kv=self._kv(view)))

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
