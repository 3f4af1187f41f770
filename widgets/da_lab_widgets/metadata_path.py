"""Diagram 3: the metadata path — how one step's attention metadata reaches the kernel (drawn by
static/path.js, its words in static/pathtext.js).

SchedulerOutput -> BlockTable (append_row, commit) -> DA hook at MetadataBuilder.build ->
MetadataBuilder, then on: set_forward_context -> Attention layer -> the impl the skeleton says
was loaded (CPUAttentionBackendImpl on CPU, FlashAttentionImpl on GPU...). Each step a packet
travels the boxes carrying the step's real values (the step record's); the stage names are
vLLM's.

Why the hook sits at the builder's build() call and not between append_row() and commit(), as
a first sketch drew it: on CPU the staged row *is* the committed row (commit copies nothing),
so editing it would corrupt the block table; and slot_mapping, computed from the
committed row, must see all of it so KV writes land where they always do. The hook hands
build() a copy with kernel rows and attention seq_lens: only the reads change.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass

CAPTION = (
    "The DA hook is the only edit. vLLM's real intercept point is the builder's build() call, "
    "not between append_row() and commit(), where it seems to belong at first: on CPU the "
    "staged row is the committed row (commit copies nothing), so editing it would corrupt the "
    "block table, and slot_mapping is computed from the committed row and must see all "
    "of it. The hook hands build() a copy with kernel rows and attention seq_lens: "
    "only the reads change. Attention impl from the run's skeleton.")


@dataclass
class Stage:
    key: str
    title: str
    sub: str
    flows: str = ""     # what the arrow from this box to the next carries ("\n": a new line)


def impl_of(header: dict) -> tuple[str, str, int]:
    """(impl class, backend, number of attention layers) from the skeleton."""
    attn = [s for s in (header.get("skeleton") or {}).get("slots") or []
            if s.get("slot") == "attention"]
    impls = sorted({s.get("impl") for s in attn if s.get("impl")})
    backends = sorted({s.get("backend") for s in attn if s.get("backend")})
    backend = (", ".join(backends) or (header.get("provenance") or {}).get("backend")
               or "(backend not recorded)")
    # a server's trace carries no skeleton: say so rather than print "?"
    return ", ".join(impls) or "attention impl (not in this trace)", backend, len(attn)


class MetadataPathDiagram:
    kind = 3

    def __init__(self, header: dict, highlight=None) -> None:
        self.header = header
        self.highlight = highlight
        self.impl, self.backend, self.n_attn = impl_of(header)
        self.stages = [
            Stage("scheduler", "SchedulerOutput", "which requests run, how many tokens each",
                  "req ids,\nnew blocks"),
            Stage("block_table", "BlockTable", "append_row(): stage; commit(): the row the "
                  "device reads", "the rows,\nseq_lens"),
            Stage("hook", "DA hook", "wraps the builder's .build() call: the only edit",
                  "copy: kernel\nrows"),
            Stage("builder", "MetadataBuilder", f".build() → {self.backend} attention metadata",
                  "metadata"),
            Stage("context", "set_forward_context", "metadata visible to every layer's forward",
                  "context"),
            Stage("layer", "Attention layer", f"× {self.n_attn} layers, backend {self.backend}",
                  "q, k, v"),
            Stage("impl", self.impl, "reads the row's blocks, writes KV at slot_mapping"),
        ]

    def config(self, header: dict, records: list) -> dict:
        prov = self.header.get("provenance") or {}
        runner = str(prov.get("runner", "?")).split(".")[-1]
        return {"kind": 3, "stages": [asdict(s) for s in self.stages], "impl": self.impl,
                "backend": self.backend, "n_attn": self.n_attn, "caption": CAPTION,
                "title": f"<b>The metadata path</b> — {html.escape(str(prov.get('vllm', '?')))}, "
                         f"runner {html.escape(runner)}"}
