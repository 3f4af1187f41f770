"""The player's two interfaces hold for every source and diagram the lab ships."""

import json
from pathlib import Path

from da_lab_widgets import (
    BlocksDiagram,
    DAHookDiagram,
    Highlight,
    MetadataPathDiagram,
    SkeletonDiagram,
    TraceSource,
)
from da_lab_widgets.interfaces import Diagram, Source

SEED = Path(__file__).resolve().parents[1] / "traces" / "seed_cpu.jsonl.gz"


def test_sources_and_diagrams_implement_the_interfaces():
    src = TraceSource(SEED)
    assert isinstance(src, Source) and not src.live
    hl = Highlight()
    for kind, cls in enumerate((SkeletonDiagram, BlocksDiagram, MetadataPathDiagram,
                                DAHookDiagram), start=1):
        d = cls(src.header, hl)
        assert isinstance(d, Diagram), cls.__name__
        cfg = d.config(src.header, src.records)        # what the page draws it from
        assert cfg["kind"] == d.kind == kind
        json.dumps(cfg)                                # JSON, as the widget's state is


def test_live_source_is_a_source(lab):
    from da_lab_widgets import LiveSource

    assert isinstance(LiveSource(lab), Source)
