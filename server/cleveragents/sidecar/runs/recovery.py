"""Taking back the runs a store kept: finished ones as they were, live ones to resume or end.

A run that was live when the previous process died either resumes (the manager, with
``resume_runs``: see ``resume.py``) or ends now, with ``run_failed`` (``UNAVAILABLE``) saying
so and the partial result its log shows.
"""

from __future__ import annotations

import asyncio

import grpc
import structlog

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.runs.log import LogStats
from cleveragents.sidecar.runs.run import Run
from cleveragents.sidecar.runs.store import EventStore, StoredRun
from cleveragents.tool import (
    LLMResponded,
    RunFailed,
    StopReason,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    Usage,
)
from cleveragents.wire import decode_frame

__all__ = ["CRASHED_MESSAGE", "crashed", "restore", "settle"]

log = structlog.get_logger("cleveragents.sidecar.runs")

CRASHED_MESSAGE = "the sidecar stopped while this run was live; its log was recovered at restart"


def restore(
    stored: StoredRun,
    store: EventStore,
    stats: LogStats,
    frame_limit: int = 0,
    *,
    keep_live: bool = False,
) -> Run:
    """The run ``stored`` holds, finished: as its log ends, or failed if it never ended
    (with ``keep_live``, such a run is returned still live, for the manager to resume).

    ``frame_limit`` bounds the terminal event logged for a run that never ended (see ``Run``).
    ``ValueError`` (or another exception) when a frame of the log cannot be read back.
    """
    run = Run.from_log(stored, store, stats, frame_limit)
    if not run.finished and not keep_live:
        crashed(run)
    return run


def crashed(run: Run, why: str = "") -> None:
    """End a run that was live at a crash and does not resume (``why`` adds the reason)."""
    message = f"{CRASHED_MESSAGE}; {why}" if why else CRASHED_MESSAGE
    error = SidecarError(grpc.StatusCode.UNAVAILABLE, message)
    run.emit(RunFailed(message, partial_result(run.run_id, run.log.frames), error))
    run.logger.warning("run was live at a crash", events=len(run.log.frames), why=why or None)


def partial_result(run_id: str, frames: list[bytes]) -> ToolCallRunResult:
    """What a log shows of a run that never ended: its records, iterations, usage and text."""
    records: list[ToolCallRecord] = []
    texts: list[str] = []
    iterations = 0
    usage = Usage()
    for item in frames:
        event = decode_frame(item).event
        if isinstance(event, ToolCallCompleted):
            records.append(event.record)
        elif isinstance(event, LLMResponded):
            iterations = event.iteration
            if event.usage is not None:
                usage = usage + event.usage
            if event.content:
                texts.append(event.content)
    return ToolCallRunResult(
        "\n".join(texts), tuple(records), iterations, False, usage, StopReason.ERROR, run_id
    )


async def settle(restored: list[Run], timeout_s: float) -> None:
    """Wait until the store holds the ``run_failed`` that start-up gave each crashed run of
    ``restored``.

    Until then such a run would still look live to ``GetRun`` and ``WatchRun``. A store
    that cannot write does not keep the sidecar from serving: after ``timeout_s`` it
    starts anyway, and says so.
    """
    pending = [run.wait() for run in restored if not run.finished]
    if not pending:
        return
    try:
        await asyncio.wait_for(asyncio.gather(*pending), timeout_s)
    except TimeoutError:
        log.warning(
            "restored runs not stored yet; serving anyway",
            runs=sum(not run.finished for run in restored),
            waited_s=timeout_s,
        )
