"""Faults on purpose, for the isolation tests: with DA_LAB_FAULTS=1 in the engine's
environment, a request whose da_id starts with `fault-<where>` makes the hook raise at
<where> — the per-request decision (`decide`), the metadata edit (`build`), the sampler's
follow-up (`sampling`), ending a request (`after_step`: `RequestBook.end`, from the
after-step or from the runner dropping a finished request first), the worker method
(`rpc`), the grouped read's plan (`grouping`) or its executor, with the step's output half
written (`grouped_attn`) — so a test can show, on the real engine, that the failure stays
with the requests it touched. Unset (always, outside the tests), `check` is one environment
lookup."""

from __future__ import annotations

import os

ENV = "DA_LAB_FAULTS"
WHERE = ("decide", "build", "sampling", "after_step", "rpc", "grouping", "grouped_attn")


class InjectedFault(RuntimeError):
    pass


def check(where: str, da_ids) -> None:
    if os.environ.get(ENV) != "1":
        return
    for da_id in da_ids:
        if str(da_id).startswith(f"fault-{where}"):
            raise InjectedFault(f"fault injected at {where} for request {da_id} ({ENV}=1)")
