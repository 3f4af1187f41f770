"""Diagram 4 — the DA hook, animated (drawn by static/hook.js, static/stream.js, static/chart.js).

Per engine step, for one request: the response stream so far (trapped tags marked), the tag
buffer the hook's state machine held when it built this step's metadata (it fills as the model
writes a tag and flashes on the step the tag was trapped at its '>'), three lamps for the mode,
the three layers a step passes through (model code, metadata path + DA hook, kernel) with this
step's numbers, the request's row of logical blocks coloured by DA region with the masked ones
grey, the blocks the kernel reads, and blocks read per step.

With a live Lab, "steer it yourself" (steering.py): a button makes the director write a tag
into the request's own output stream from the engine's next token; the hook then traps it like a
tag the model wrote (Lab.steer). Buttons that can't work now are disabled, with the reason shown.
"""

from __future__ import annotations

import html

from .source import add_hint, added_entry, first_request
from .steering import SteeringPanel, stream_note


class DAHookDiagram:
    kind = 4
    name = "dahook"

    def __init__(self, header: dict, highlight=None, req: str | None = None, lab=None) -> None:
        prov = header.get("provenance") or {}
        self.header = header
        self.block_size = int(prov["block_size"])
        self.num_blocks = int(prov["num_blocks"])
        self.backend = str(prov.get("backend") or "attention backend")
        self.highlight = highlight
        self.req = req            # None: the run's first request (or the Lab's)
        self.lab = lab
        self.steering = SteeringPanel(lab, header)
        self.player = None
        self._noted: str | None = None      # the request whose note the page has

    def bind(self, player) -> None:
        self.player = player

    def _followed(self, records: list) -> str | None:
        if self.req is None:
            self.req = first_request(records)
            if self.req is None and self.lab is not None and self.lab.requests:
                self.req = next(iter(self.lab.requests))
        return self.req

    def _note(self, records: list, req: str | None) -> dict:
        if req is None:
            return {}
        added = added_entry(records, req) or {}
        return {req: stream_note(self.header, added, live=self.lab is not None)}

    def config(self, header: dict, records: list) -> dict:
        prov = header.get("provenance") or {}
        req = self._followed(records)
        title = (f"<b>The DA hook</b> — {html.escape(str(prov.get('vllm', '')))} on "
                 f"{html.escape(str(prov.get('device', '')))}, "
                 f"{html.escape(str(prov.get('runner', '')).rsplit('.', 1)[-1])}, "
                 f"{html.escape(self.backend)}")
        self._noted = req
        return {"kind": 4, "req": req, "backend": self.backend, "title": title,
                "steer": self.lab is not None, "notes": self._note(records, req)}

    def live_state(self, records: list, full: bool = False) -> dict:
        """The steering panel's state at the engine's latest step (live runs only), and the
        stream's note when the request followed is new to the page (or `full`)."""
        if self.lab is None:
            return {}
        req = self._followed(records)
        src = getattr(self.player, "source", None)
        self.steering.can_add = bool(getattr(src, "can_add", False))
        if src is not None:
            self.steering.add_hint = add_hint(src)
        self.steering.bind(records, req)
        out = {"steer": self.steering.state()}
        if full or req != self._noted:
            self._noted = req
            out["notes"] = self._note(records, req)
        return out

    def on_message(self, kind: str, content: dict) -> bool:
        if kind not in ("steer", "pick"):
            return False
        recs = self.player.source.records if self.player is not None else []
        self.steering.bind(recs, self._followed(recs))
        if kind == "pick":
            self.steering.pick(content.get("chunks") or ())
        else:
            i = content.get("i")
            shown = recs[int(i)].step if isinstance(i, int) and 0 <= i < len(recs) else None
            if content.get("following"):     # ▶ follows the engine: one step behind at most
                shown = None
            self.steering.steer(str(content.get("mode")), content.get("chunks"), shown=shown,
                                latest=recs[-1].step if recs else None)
        if self.player is not None:
            self.player.send()
        return True
