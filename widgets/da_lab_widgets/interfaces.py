"""The two interfaces the player connects: where records come from (`Source`) and what draws
them (`Diagram`). `LiveSource` and `TraceSource` are the sources; the four diagrams are
`SkeletonDiagram`, `BlocksDiagram`, `MetadataPathDiagram` and `DAHookDiagram`. Data flows one
way: a source makes records exist, the player sends them to the page, a diagram only reads
them there (static/*.js)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from da_lab.core.record import StepRecord


@runtime_checkable
class Source(Protocol):
    live: bool                     # True: records appear as a Lab steps; False: a recording
    header: dict                   # provenance, skeleton, the KV map when the run began
    records: list[StepRecord]      # one per engine step, appended to, never edited

    def ensure(self, i: int) -> bool:
        """Whether record i exists; a live source runs (at most) the engine steps it takes."""

    def __len__(self) -> int: ...


@runtime_checkable
class Diagram(Protocol):
    kind: int                      # which of the four the page draws (1-4, static/app.js)

    def config(self, header: dict, records: list[StepRecord]) -> dict:
        """What the page needs to draw it besides the steps (JSON)."""
