"""Taking back the runs a store kept: finished ones as they were, live ones to resume or end.

A run that was live when the previous process died either resumes (the manager, with
``resume_runs``) or ends now, with ``run_failed`` (``UNAVAILABLE``) saying so and the partial
result its log shows. Resuming needs, beyond the log, what a durable store keeps with each
run's first frame: a small JSON ``ResumeInfo`` (who hosts the run: the sidecar, or a Session's
client; the governance policy it runs under; the time its starting call gave it). The manager
asks a ``Resumer`` (the gateway, which can assemble runs) to rebuild each live run, and the
loop goes on from the log (the core's ``Resumption``, which ``resumption_of`` reads).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import grpc
import structlog

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.runs.log import LogStats
from cleveragents.sidecar.runs.run import Launchable, Run
from cleveragents.sidecar.runs.store import EventStore, StoredRun
from cleveragents.tool import (
    LLMResponded,
    Resumption,
    RunEvent,
    RunFailed,
    StopReason,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    Usage,
)
from cleveragents.wire import decode_frame

__all__ = [
    "ADOPTION_REASON", "CRASHED_MESSAGE", "RESTART_REASON", "ResumeInfo", "Resumer", "crashed",
    "handover_reason", "partial_result", "responses_logged", "restore", "resumption_of",
    "settle",
]  # fmt: skip

log = structlog.get_logger("cleveragents.sidecar.runs")

CRASHED_MESSAGE = "the sidecar stopped while this run was live; its log was recovered at restart"

#: Why a run resumes at start-up (``RunResumed.reason``).
RESTART_REASON = "the sidecar restarted"
#: Why a run another sidecar (on a shared store) ran is resumed here.
ADOPTION_REASON = "its sidecar stopped renewing its lease and this sidecar adopted it"


def handover_reason(sidecar: str) -> str:
    """Why a parked Session run taken over from ``sidecar`` (a hand-over) resumes here."""
    return f"sidecar {sidecar!r} handed it over when its client re-attached to this sidecar"


@dataclass(frozen=True, slots=True)
class ResumeInfo:
    """How a run was started: ``hosted`` is ``server`` (the sidecar runs its tools and LLM)
    or ``session`` (a client does); ``policy`` names its governance policy ("" the global
    one); ``timeout_s`` is the time its starting call's deadline left it (``None``: none);
    ``detach`` whether it outlives that call."""

    hosted: str
    policy: str = ""
    timeout_s: float | None = None
    detach: bool = False

    def to_json(self) -> str:
        """The JSON text a store keeps."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ResumeInfo | None:
        """The info ``text`` holds; ``None`` for none (a run stored before resuming existed)
        or for text this version cannot read."""
        if not text:
            return None
        try:
            raw = json.loads(text)
            timeout = raw.get("timeout_s")
            return cls(
                str(raw["hosted"]),
                str(raw.get("policy", "")),
                None if timeout is None else float(timeout),
                bool(raw.get("detach", False)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


class Resumer(Protocol):
    """Rebuilds a live run found in the store (the gateway implements it)."""

    def reassemble(self, run: Run, info: ResumeInfo, resumption: Resumption) -> Launchable:
        """The assembled run that goes on with ``run``; ``SidecarError`` says why it cannot."""
        ...


def resumption_of(frames: Sequence[bytes], reason: str = RESTART_REASON) -> Resumption:
    """The core ``Resumption`` a live run's stored frames give: its events, the sequence of
    the last one, and the seconds since its first event (when the run started)."""
    logged = [decode_frame(item) for item in frames]
    events: list[RunEvent] = [entry.event for entry in logged]
    elapsed = max(0.0, time.time() - logged[0].time)
    return Resumption(events, len(frames), elapsed, reason)


def responses_logged(resumption: Resumption) -> int:
    """How many LLM responses the run's log holds (a scripted LLM goes on after them)."""
    return sum(isinstance(event, LLMResponded) for event in resumption.events)


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
