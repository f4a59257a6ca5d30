"""Values the client returns besides the core's: streamed events and run summaries."""

from __future__ import annotations

from dataclasses import dataclass

from cleveragents.tool import RunEvent, ToolCallRunResult

__all__ = ["RunInfo", "StreamedEvent"]


@dataclass(frozen=True, slots=True)
class StreamedEvent:
    """A run event as received: the run, its place in the run's log, when, and what."""

    run_id: str
    sequence: int
    time: float
    event: RunEvent


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What ``get_run`` reports: ``state`` is ``running``, ``completed``, ``failed`` or
    ``cancelled``; ``result`` is set once the run has ended."""

    run_id: str
    state: str
    last_sequence: int
    result: ToolCallRunResult | None
