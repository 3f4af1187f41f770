"""The da_id of every DA request the server is running: one id, one running request.

A client's stats are looked up by `da_id` (`GET /da/requests/ID`), so two running requests must
never share one: the hook would mix their accounts, and ending one would end the other. The
edge claims an id here before the request reaches the engine and gives it back when the
request's stream ends (or is dropped unstarted: a prompt list refused at a later prompt).

Ids:
  - no `da_id` in vllm_xargs: vLLM's own request id (unique per prompt: `cmpl-…-0`, `-1`, …);
  - a `da_id` on a request of one prompt: that id; on a list of prompts, the first prompt keeps
    it and prompt k (k >= 1) gets `<da_id>-<k>` (vLLM hands every prompt of a list the same
    vllm_xargs dict, which is how the prompts of one list are told from other requests);
  - the items of one `/v1/chat/completions/batch` request (each gets its own copy of the
    vllm_xargs dict) are numbered the same way, within the `batch_ids()` context the batch
    handler runs in (gate.py);
  - an id a running request already holds: refused (HTTP 400). A finished request's id may be
    used again; its stats then show the newest request.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref

from da_lab.core.wire import EXTRA_ID

# The batch being rendered in this task: its items share one numbering of `da_id`.
_BATCH: contextvars.ContextVar[object | None] = contextvars.ContextVar("da_batch", default=None)


@contextlib.contextmanager
def batch_ids():
    """Within this block, every request claimed with a `da_id` is an item of one batch."""
    token = _BATCH.set(object())
    try:
        yield
    finally:
        _BATCH.reset(token)


class IdInUse(ValueError):
    pass


class LiveIds:
    def __init__(self) -> None:
        self.live: set[str] = set()
        # id(shared vllm_xargs) -> [that dict, prompts claimed, prompts running]: one list's
        # prompts. The dict is held, so its id() can't be reused while the entry lives.
        self._lists: dict[int, list] = {}
        self._list_of: dict[str, list] = {}

    def claim(self, extra_args: dict, req_id) -> str:
        """The da_id for this prompt's request, now held; raises IdInUse."""
        base = extra_args.get(EXTRA_ID)
        group = None
        if base is None:
            da_id = str(req_id)
        else:
            key = _BATCH.get() or extra_args      # a batch's items, or one list's prompts
            group = self._lists.get(id(key))
            if group is None or group[0] is not key:
                group = [key, 0, 0]
            da_id = str(base) if group[1] == 0 else f"{base}-{group[1]}"
        if da_id in self.live:
            raise IdInUse(f"da_id {da_id!r} belongs to a request that is still running on this "
                          "server; give each request its own da_id, or leave it out (the "
                          "server then uses vLLM's request id)")
        self.live.add(da_id)
        if group is not None:
            group[1] += 1
            group[2] += 1
            self._lists[id(group[0])] = group
            self._list_of[da_id] = group
        return da_id

    def release(self, da_id: str) -> None:
        self.live.discard(da_id)
        group = self._list_of.pop(da_id, None)
        if group is not None:
            group[2] -= 1
            if group[2] <= 0:
                self._lists.pop(id(group[0]), None)

    def hold(self, da_id: str, results):
        """`results` (the engine's async generator) wrapped so that `da_id` is released exactly
        once: when the stream ends, fails or is closed, or when it is dropped unstarted."""
        box: list = []
        wrapped = self._held(results, box)
        box.append(weakref.finalize(wrapped, self.release, da_id))
        return wrapped

    @staticmethod
    async def _held(results, box: list):
        try:
            async for out in results:
                yield out
        finally:
            try:
                await results.aclose()    # a client that left: vLLM aborts the request here
            finally:
                box[0]()
