"""Values the client returns besides the core's: streamed events and run summaries."""

from __future__ import annotations

from dataclasses import dataclass

from cleveragents.tool import RunEvent, StopReason, ToolCallRunResult

__all__ = ["RunInfo", "RunSummary", "StreamedEvent"]


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


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as ``list_runs`` reports it; times are Unix seconds."""

    run_id: str
    state: str
    stop_reason: StopReason | None
    last_sequence: int
    started_at: float
    finished_at: float | None
    iterations: int
    tool_calls: int
    prompt: str
