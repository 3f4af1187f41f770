"""da_lab: Declarative Attention inside a real vLLM engine, as a teaching lab.

Rooms (docs/architecture.md): `core` (tags, layout, decision, step record: no torch, no vLLM),
`hook` (what runs inside vLLM's worker), `models` (the models the lab builds locally), `engine`
(the Lab and the driver side), `trace` (recorded runs), and the tooling: `bench`, `training`,
`checks`.
"""

from pathlib import Path

__version__ = "0.1.0"

# Shipped files: the tokenizer and the trained da-tiny-tags weights.
ASSETS = Path(__file__).parent / "assets"
