"""A serving engine's step records, in the lab's trace format (DA_LAB_TRACE=FILE).

`da-lab serve` with DA_LAB_TRACE set: rank 0's worker writes one record per engine step that had
a DA request (the `EngineStep` a Lab's step driver makes, core/engine_step.py), through the same
child-process writer the Lab records with (trace/process.py: encoding and compression never run
on the engine's thread). The file is a
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

Each run of a request is its own entry, keyed by vLLM's request id: a `da_id` reused once the
first request finished (the server allows it) is named `ID#2`, `ID#3`, ... in the trace, so each
run has its own `added` entry, prompt length, tags and tokens. The file is never one that was
there before: an existing DA_LAB_TRACE is left alone and the trace is written beside it (the
server's log and /da/status name the file); `da-lab serve` refuses such a path before starting.
The writer is detached (trace/process.py), so stopping the server (SIGTERM, Ctrl-C), which
kills the engine's process tree, still leaves a complete, closed file.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from types import SimpleNamespace

from da_lab.core.engine_step import EngineOutput, EngineStep

log = logging.getLogger("vllm.da_lab")


def unused_path(path: Path) -> Path:
    """`path`, or the first `NAME.N.EXT` beside it that does not exist yet (N = 1, 2, ...)."""
    if not path.exists():
        return path
    name = path.name
    ext = next((e for e in (".jsonl.gz", ".parquet") if name.endswith(e)), path.suffix)
    stem = name[: len(name) - len(ext)] if ext else name
    k = 1
    while (path.parent / f"{stem}.{k}{ext}").exists():
        k += 1
    return path.parent / f"{stem}.{k}{ext}"


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
        # By vLLM's request id, for the requests in flight: (their name in the trace, their
        # da_id), and (tokens, text chars) written so far.
        self._names: dict[str, tuple[str, str]] = {}
        self._seen: dict[str, tuple[int, int]] = {}
        self._next: dict[str, int] = {}         # da_id -> the run number its next run gets
        self._used: set[str] = set()            # every name given (the file holds them all)
        self._t = time.perf_counter()
        self.step = 0

    def _open(self, view, block_size: int) -> None:
        from da_lab.trace.format import header, provenance
        from da_lab.trace.process import ProcessTraceWriter

        f = self.book.facts
        prov = provenance(vllm=f.vllm, device=f.device, model=f.tokenizer_path,
                          runner=f.runner_class, backend=f.backend, block_size=block_size,
                          num_blocks=view.num_blocks, source="vllm serve")
        asked, self.path = self.path, unused_path(self.path)
        if self.path != asked:
            log.warning("da_lab: DA_LAB_TRACE=%s exists and is left as it is; this server's "
                        "trace is %s", asked, self.path)
        # No skeleton and no initial KV map: the worker has neither at hand.
        self.writer = ProcessTraceWriter(self.path, header(prov), detach=True)

    def _name(self, req_id: str, da_id: str) -> str:
        """This run's name in the trace: its da_id, or `da_id#k` for its k-th run."""
        k = self._next.get(da_id, 1)
        name = da_id if k == 1 else f"{da_id}#{k}"
        while name in self._used:               # a client's own id may look like one
            k += 1
            name = f"{da_id}#{k}"
        self._next[da_id] = k + 1
        self._used.add(name)
        self._names[req_id] = (name, da_id)
        return name

    def _state(self, req_id: str, da_id: str):
        """The RequestState of run `req_id`: live, or just ended in this step."""
        st = self.book.requests.get(req_id)
        if st is None:
            st = self.book.finished.get(da_id)
            st = st if st is not None and st.req_id == req_id else None
        return st

    def ending(self) -> bool:
        """Whether a run in the trace has ended since its last record: its last tokens (read
        by the tag machine once it ended, at a step it is no longer part of) are still due."""
        return any(k not in self.book.requests for k in self._names)

    def write(self, logs: list, warnings: list[dict], view) -> None:
        """One record of the step's hook `logs` (hook/step.Step) and the `warnings` raised in
        it, with the last tokens of the runs that ended; `view()` gives what the runner shows
        (runners/common.RunnerView)."""
        view = view()
        runs = [(r, req_id) for lg in logs
                for r, req_id in zip(lg.requests, getattr(lg, "req_ids", None) or
                                     [None] * len(lg.requests), strict=True)]
        if self.writer is None:
            if not runs:
                return
            self._open(view, runs[0][0].block_size)
        now = time.perf_counter()
        added, outputs, renamed = [], [], {}
        by_da_id = {st.da_id: self._names[k][0] for k, st in self.book.requests.items()
                    if k in self._names}
        for r, req_id in runs:
            req_id = req_id or next((k for k, st in self.book.requests.items()
                                     if st.da_id == r.req), r.req)
            st = self._state(req_id, r.req)
            if st is None:
                continue
            name = self._names.get(req_id, (None,))[0]
            if name is None:
                name = self._name(req_id, st.da_id)
                added.append(self._added_entry(st, view, name))
            renamed[id(r)] = by_da_id[st.da_id] = name
            outputs.append(self._output(req_id, name, st))
        for req_id, (name, da_id) in list(self._names.items()):
            st = None if req_id in self.book.requests else self._state(req_id, da_id)
            if st is not None and all(o[0] != name for o in outputs):
                by_da_id.setdefault(da_id, name)
                outputs.append(self._output(req_id, name, st))
        # Copies under the runs' names: the hook's own records keep the da_ids.
        steps = [SimpleNamespace(hook_us=lg.hook_us, metadata=lg.metadata, requests=[
            dataclasses.replace(r, req=renamed[id(r)]) if id(r) in renamed else r
            for r in lg.requests]) for lg in logs]
        warnings = [dict(w, req=by_da_id[w["req"]]) if w.get("req") in by_da_id else w
                    for w in warnings]
        # The same EngineStep a Lab's step driver makes (hook/driver.py), under the runs' names.
        step = EngineStep(self.step, round(now - self._t, 6),
                          tuple(EngineOutput(n, tuple(int(t) for t in toks), text, fin)
                                for n, toks, text, fin in outputs),
                          tuple(steps), tuple(warnings))
        self._t = now
        self.step += 1
        self.writer.write(step.record(added, kv=self._kv(view)))
        for req_id in [k for k in self._names if k not in self.book.requests]:
            del self._names[req_id]          # ended: its name and counts are not needed again
            self._seen.pop(req_id, None)

    def _output(self, req_id: str, name: str, st) -> tuple:
        """(name, tokens, text, finished) the run read since its last record."""
        n, c = self._seen.get(req_id, (0, 0))
        self._seen[req_id] = (st.n_seen, len(st.text))
        return name, st.captured[n:st.n_seen], st.text[c:], req_id not in self.book.requests

    def _added_entry(self, st, view, name: str) -> dict:
        """What the Lab writes when it adds a request: prompt length, max_tokens (where the
        runner keeps SamplingParams: v1), layout, the director's tags as text."""
        tok = self.book.tokenizer_now()
        return {"req": name, "prompt_len": st.prompt_len,
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
