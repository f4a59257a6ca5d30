"""Values the client returns besides the core's: streamed events and what runs report."""

from __future__ import annotations

from dataclasses import dataclass

from cleveragents.tool import RunEvent
from cleveragents.tool.frozen import quick_init
from cleveragents.wire import RunInfo, RunSummary

__all__ = ["RunInfo", "RunSummary", "StreamedEvent"]


@quick_init
@dataclass(frozen=True, slots=True)
class StreamedEvent:
    """A run event as received: the run, its place in the run's log, when, and what."""

    run_id: str
    sequence: int
    time: float
    event: RunEvent
