"""A serving engine's step records, in the lab's trace format (DA_LAB_TRACE=FILE).

`da-lab serve` with DA_LAB_TRACE set: rank 0's worker writes one `StepRecord` per engine step
that had a DA request, through the same child-process writer the Lab records with
(trace/process.py: encoding and compression never run on the engine's thread). The file is a
trace like any other (`da_lab.trace.load`, `TraceSource`), read while it grows by
`TraceSource(path, follow=True)`.

What a worker can see, and so what a server trace holds, differs from a Lab's in three ways:
  - tokens: each request's part of a step carries the tokens the tag machine read at that step
    (sampled at the step before: the hook reads a step's samples when the next one starts);
  - the KV map ("kv") comes from the worker's block tables: which request holds which physical
    block; prefix-cache hashes live with the scheduler, in another process, so none are shown;
  - requests without a layout are not in `requests` (the hook does not track them), though
    their blocks are in the KV map.
"""

from __future__ import annotations

import time
from pathlib import Path

from da_lab.core.record import StepRecord
from da_lab.core.wire import EXTRA_ID
from da_lab.hook.state import TRACKER


def tp_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:   # noqa: BLE001 - no process group: a single worker
        return 0


def request_blocks(runner) -> dict[str, tuple[int, ...]]:
    """{request name: physical block ids} of every request the runner holds (v1 runner: all of
    them; V2 runner: the DA requests, from the hook's mirror of their rows)."""
    reqs = getattr(runner, "requests", None)
    out: dict[str, tuple[int, ...]] = {}
    if isinstance(reqs, dict):
        for req_id, rs in reqs.items():
            sp = getattr(rs, "sampling_params", None)
            name = str(((sp.extra_args if sp is not None else None) or {}).get(EXTRA_ID, req_id))
            ids = rs.block_ids[0] if getattr(rs, "block_ids", None) else ()
            out[name] = tuple(int(b) for b in ids)
        return out
    mirror = getattr(getattr(runner, "block_tables", None), "_da_rows", {})
    index = getattr(getattr(runner, "req_states", None), "req_id_to_index", {})
    for req_id, idx in index.items():
        st = TRACKER.requests.get(req_id)
        if st is not None and idx in mirror:
            out[st.da_id] = tuple(int(b) for b in mirror[idx])
    return out


class ServerTrace:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.writer = None
        self._owners: dict[int, tuple[str, ...]] = {}
        self._seen: dict[str, tuple[int, int]] = {}    # da_id -> (tokens, text chars) written
        self._added: set[str] = set()
        self._t = time.perf_counter()
        self.step = 0

    def _open(self, runner, block_size: int) -> None:
        from da_lab.hook.runners.releases import engine_name
        from da_lab.trace.format import header, provenance
        from da_lab.trace.process import ProcessTraceWriter

        t = TRACKER
        kv_cfg = getattr(runner, "kv_cache_config", None)
        prov = provenance(vllm=engine_name(), device=t.device, model=t.tokenizer_path,
                          runner=t.runner_class, backend=t.backend, block_size=block_size,
                          num_blocks=int(getattr(kv_cfg, "num_blocks", 0) or 0),
                          source="vllm serve")
        # No skeleton and no initial KV map: the worker has neither at hand.
        self.writer = ProcessTraceWriter(self.path, header(prov))

    def write(self, logs: list, warnings: list[dict], runner) -> None:
        """One record of the step's hook `logs` and the `warnings` raised in it."""
        reqs = [r for log in logs for r in log.requests]
        if self.writer is None:
            self._open(runner, reqs[0].block_size)
        now = time.perf_counter()
        by_id = {st.da_id: st for st in TRACKER.requests.values()}
        added, outputs = [], []
        for r in reqs:
            st = by_id.get(r.req)
            if st is None:
                continue
            if r.req not in self._added:
                self._added.add(r.req)
                added.append(self._added_entry(st, runner))
            n, c = self._seen.get(r.req, (0, 0))
            outputs.append((r.req, st.captured[n:st.n_seen], st.text[c:], False))
            self._seen[r.req] = (st.n_seen, len(st.text))
        rec = StepRecord.build(self.step, round(now - self._t, 6), logs, outputs, added,
                               warnings, kv=self._kv(runner))
        self._t = now
        self.step += 1
        self.writer.write(rec)

    @staticmethod
    def _added_entry(st, runner) -> dict:
        """What the Lab writes when it adds a request: prompt length, max_tokens (where the
        runner keeps SamplingParams: v1), layout, the director's tags as text."""
        rs = (getattr(runner, "requests", None) or {}).get(st.req_id)
        sp = getattr(rs, "sampling_params", None)
        tok = TRACKER._tok()
        return {"req": st.da_id, "prompt_len": st.prompt_len,
                "max_tokens": getattr(sp, "max_tokens", None), "layout": st.layout.to_dict(),
                "tags": [[at, tok.decode(ids)] for at, ids in st.script]}

    def _kv(self, runner) -> dict:
        owners: dict[int, list[str]] = {}
        for name, ids in request_blocks(runner).items():
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
