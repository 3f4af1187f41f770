"""Cross-links: one shared 'which physical block is hovered' value for every diagram on screen.

A diagram that shows block ids sets `highlight.block` on hover (a physical block id, or None) and
observes it to pulse its own mark for that block, so hovering in one diagram lights up the same
physical block everywhere.
"""

import traitlets


class Highlight(traitlets.HasTraits):
    block = traitlets.Int(None, allow_none=True)   # physical KV block id, or None
    source = traitlets.Unicode("")                   # which diagram set it (avoids echo loops)

    def set(self, block, source: str = "") -> None:
        with self.hold_trait_notifications():
            self.source = source
            self.block = None if block is None else int(block)
