"""The lessons under nbmake: a kernel reply that has arrived is read within half a second.

nbmake runs each lesson through nbclient, which waits for a cell's `execute_reply` with
jupyter_client's `await socket.poll(timeout)` on the shell socket (pyzmq's asyncio poller). Now and
then that poll is never woken for a reply already in the socket's queue (ZeroMQ signals arrivals
on an edge-triggered descriptor; jupyter/jupyter_client#436 is the same family): the kernel sits
idle, and nbclient finds the reply only when the poll's timeout runs out and it looks once more.
Measured here on lesson 06: a cell that takes ~2 s returned after exactly the 120 s timeout,
with nothing left in either side's TCP queues (bench/results/kernel-wakeup-2026-12-07.txt). Under
nbmake's 300 s default a lesson stalls 5 minutes or fails.

So every wait on a kernel channel polls in slices of SLICE_S: a reply the poller missed is read at
the end of its slice. The timeout and what counts as no reply are unchanged, nothing is retried,
and the run's summary says how many replies were only found at a slice's end.
"""

from __future__ import annotations

import time
from queue import Empty

from jupyter_client.channels import AsyncZMQSocketChannel

SLICE_S = 0.5
MISSED: list[str] = []      # the kind of each message read when its slice had run out


async def _get_msg(self, timeout: float | None = None) -> dict:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        step = SLICE_S if left is None else max(0.0, min(SLICE_S, left))
        t0 = time.monotonic()
        if await self.socket.poll(int(step * 1000)):
            msg = await self._recv()
            if step > 0 and time.monotonic() - t0 >= step:
                MISSED.append(msg.get("msg_type", "?"))
            return msg
        if left is not None and left <= SLICE_S:
            raise Empty


AsyncZMQSocketChannel.get_msg = _get_msg


def pytest_terminal_summary(terminalreporter):
    if MISSED:
        terminalreporter.write_line(
            f"kernel channels: {len(MISSED)} message(s) read at the end of a {SLICE_S} s poll "
            "slice (a wake-up the poller missed, or a message that came just then; "
            "notebooks/conftest.py): "
            + ", ".join(sorted(set(MISSED))))
