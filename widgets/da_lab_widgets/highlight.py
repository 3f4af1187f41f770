"""Cross-links: diagrams given the same Highlight share one hovered physical block in the page.

Hovering a block in one diagram pulses the same physical block in every diagram that shows it.
The diagrams of one player always share it; a Highlight given to diagrams of several players
links those players too (static/store.js `hub`, keyed by `key`). Hover stays in the page: it
costs the kernel nothing.
"""

import uuid


class Highlight:
    def __init__(self) -> None:
        self.key = "hl-" + uuid.uuid4().hex
