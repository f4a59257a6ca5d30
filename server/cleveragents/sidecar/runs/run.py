"""``Run``: one run's life, from its accepted request to its one terminal event.

``Run.emit`` is the one place where events become frames: the runtime's events (its own
``RunStarted`` first) are encoded once, numbered and appended to the run's log. A run ``ends``
when its terminal event is logged, and ``finishes`` (state, result and failure set, waiters
woken) once the store holds that event, like every frame before it reaches a reader.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
import structlog

from cleveragents.sidecar.approvals import ApprovalBroker
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.runs.log import RunLog
from cleveragents.sidecar.status import status_of
from cleveragents.tool import (
    ErrorKind,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    StopReason,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
)
from cleveragents.wire import EventEncoder, OversizedEvent, RunRequest, RunState

__all__ = ["PROMPT_KEPT", "Run", "RunObserver", "Terminal"]

log = structlog.get_logger("cleveragents.sidecar.runs")
#: How much of a finished run's prompt its ``request`` keeps (what ``ListRuns`` shows): the
#: whole spec stays in the log's ``run_started`` frame, and a finished run keeps it only there.
PROMPT_KEPT = 200

_TERMINAL_EVENTS = (RunCompleted, RunFailed, RunCancelled)


class RunObserver(Protocol):
    """Sees every run start and every core event of every run (tracing, metrics)."""

    def run_started(self, run: Run, metadata: Mapping[str, str]) -> None:
        """A run was accepted; ``metadata`` is the starting call's gRPC metadata."""
        ...

    def run_event(self, run: Run, event: RunEvent) -> None:
        """A run produced ``event`` (its ``RunStarted`` and terminal event included)."""
        ...


@dataclass(frozen=True, slots=True)
class Terminal:
    """How a run ended: its state, its result, its failure (status and message) and when."""

    state: RunState
    result: ToolCallRunResult
    failure: tuple[grpc.StatusCode, str] | None
    finished_at: float


class Run:
    """One run: its accepted request, its log, its state and result.

    ``started_at`` is when the sidecar accepted it. ``begun`` turns true once its task runs
    (and the runtime has logged ``run_started``). Once finished, ``stop_reason``,
    ``iterations`` and ``tool_calls`` are the result's; the result itself is kept only once,
    encoded in the log's last frame. Likewise the spec: once finished, ``request`` keeps the
    start of the prompt and no script (``run_started`` holds both).

    Each frame stays under ``frame_limit`` bytes (0: no limit), so that one message can carry
    it: a result too large leaves out its history, a tool output too large is cut (both
    flagged). Any other event too large stops the run, which fails with RESOURCE_EXHAUSTED
    naming the event; the log keeps the events before it.
    """

    __slots__ = (
        "_done",
        "_encode",
        "_terminal",
        "_too_large",
        "approvals",
        "begun",
        "detach",
        "ended",
        "failure",
        "finished_at",
        "iterations",
        "log",
        "logger",
        "lost",
        "observers",
        "owner",
        "request",
        "run_id",
        "started_at",
        "state",
        "stop_reason",
        "task",
        "tool_calls",
    )

    def __init__(
        self,
        request: RunRequest,
        run_log: RunLog,
        observers: Sequence[RunObserver] = (),
        *,
        started_at: float | None = None,
        frame_limit: int = 0,
    ) -> None:
        self.run_id = run_log.run_id
        #: The name of the identity that started the run (see ``identity.Identity.may``).
        self.owner = run_log.owner
        self.request = request
        self.log = run_log
        self.observers = tuple(observers)
        self.detach = request.detach
        self.started_at = time.time() if started_at is None else started_at
        self.state = RunState.RUNNING
        self.begun = False
        self.ended = False
        self.stop_reason: StopReason | None = None
        self.failure: tuple[grpc.StatusCode, str] | None = None
        self.finished_at: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.approvals: ApprovalBroker | None = None
        #: Set when another sidecar sharing the store took the run over (see ``lose``).
        self.lost: SidecarError | None = None
        self.iterations = 0
        self.tool_calls = 0
        self._terminal: Terminal | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._too_large: str | None = None
        self._encode = EventEncoder(self.run_id, request, frame_limit).encode
        self.logger = log.bind(run_id=self.run_id)

    @property
    def finished(self) -> bool:
        """Whether the run's terminal event is stored (and so visible to clients)."""
        return self.state is not RunState.RUNNING

    @property
    def last_sequence(self) -> int:
        """The sequence number of the newest event clients can see (0 before any)."""
        return self.log.released

    async def wait(self) -> None:
        """Wait until the run has ended and its terminal event is stored."""
        await asyncio.shield(self._done)

    def emit(self, event: RunEvent) -> None:
        """Log a core event (the runtime's ``on_event`` sink); nothing after the terminal one.

        An ``LLMDelta`` is not logged: it goes to the log's live deltas, after the event
        logged last (its call's ``IterationStarted``), for the streams that asked for deltas.
        """
        if self.ended:
            return
        if type(event) is LLMDelta:
            if self._too_large is None:
                self.log.live.add(self.log.next_sequence - 1, event)
            return
        if self._too_large is not None:
            if not isinstance(event, _TERMINAL_EVENTS):
                return  # the run is being stopped: nothing after the event that did not fit
            error = SidecarError(grpc.StatusCode.RESOURCE_EXHAUSTED, self._too_large)
            result = dataclasses.replace(event.result, stop_reason=StopReason.ERROR)
            event = RunFailed(self._too_large, result, error)
        status = status_of(event.error) if isinstance(event, RunFailed) else None
        try:
            item = self._encode(self.log.next_sequence, event, status.value[0] if status else 0)
        except OversizedEvent as exc:
            self._stop_too_large(str(exc))
            return
        if isinstance(event, ToolCallCompleted):
            self.tool_calls += 1
            self._log_call(event.record)
        elif isinstance(event, LLMResponded):
            self.iterations = event.iteration
        for observer in self.observers:
            try:
                observer.run_event(self, event)
            except Exception:  # telemetry must never break a run
                self.logger.exception("run observer failed", observer=type(observer).__name__)
        if isinstance(event, _TERMINAL_EVENTS):
            failure = None
            if isinstance(event, RunCompleted):
                state = RunState.COMPLETED
            elif isinstance(event, RunFailed):
                state = RunState.FAILED
                assert status is not None
                failure = (status, event.message)
            else:
                state = RunState.CANCELLED
            self.end(item, Terminal(state, event.result, failure, time.time()))
        else:
            self.log.append(item)

    def _stop_too_large(self, message: str) -> None:
        """An event could not be sent: stop the run, which then fails saying why."""
        self._too_large = f"{message}; the run was stopped"
        self.logger.warning("event too large for one message", error=message)
        if self.task is not None:
            self.task.cancel(self._too_large)

    def end(self, item: bytes, terminal: Terminal) -> None:
        """Log the terminal frame ``item``; the run finishes as ``terminal`` once it is stored."""
        self.ended = True
        self._terminal = terminal
        self.log.end(item, self._finish)

    def lose(self, message: str) -> bool:
        """Stop this sidecar's copy of a run another sidecar took over (its lease had expired;
        the fleet logs that as an error) or was handed (``redis_handover``): nothing more is
        logged or run here, its streams end (``FAILED_PRECONDITION``,
        ``message``) and its waiters wake; ``False`` if it had already finished."""
        if self.finished or self.lost is not None:
            return False
        self.lost = SidecarError(grpc.StatusCode.FAILED_PRECONDITION, message)
        self.ended = True
        self.log.close()
        if self.task is not None:
            self.task.cancel(message)
        if not self._done.done():
            self._done.set_result(None)
        self.logger.warning("run now runs on another sidecar; its copy here stopped", why=message)
        return True

    def finish_restored(self, terminal: Terminal) -> None:
        """End a run restored from the store whose log already holds its terminal event."""
        self.ended = True
        self._terminal = terminal
        self.log.close()
        self._finish()

    def _log_call(self, record: ToolCallRecord) -> None:
        """A refused call at info (an operator asks why); every call at debug, with its
        inputs and output (secrets already redacted from the record)."""
        denied = record.error_kind is ErrorKind.DENIED
        if not denied and not getattr(self.logger, "is_enabled_for", _enabled)(logging.DEBUG):
            return  # the usual case: copy nothing
        fields = {
            "tool": record.tool_name,
            "call_id": record.call_id,
            "iteration": record.iteration,
        }
        if denied:
            self.logger.info("tool call refused", error=record.error, **fields)
        elif record.success:
            self.logger.debug(
                "tool call", duration_ms=round(record.duration_ms, 3), inputs=dict(record.inputs),
                output=dict(record.output), **fields,
            )  # fmt: skip
        else:
            self.logger.debug(
                "tool call failed", error_kind=str(record.error_kind), error=record.error,
                duration_ms=round(record.duration_ms, 3), inputs=dict(record.inputs), **fields,
            )  # fmt: skip

    def _finish(self) -> None:
        terminal, self._terminal = self._terminal, None
        assert terminal is not None
        self.request = _slim(self.request)
        self._encode = _ended
        result = terminal.result
        self.state, self.failure, self.finished_at = (
            terminal.state, terminal.failure, terminal.finished_at,
        )  # fmt: skip
        self.stop_reason = result.stop_reason
        self.iterations = result.iterations
        self.tool_calls = len(result.tool_call_history)
        if not self._done.done():
            self._done.set_result(None)
        self.logger.info(
            "run finished",
            state=f"RUN_STATE_{self.state.name}",
            stop_reason=f"STOP_REASON_{result.stop_reason.name}",
            iterations=self.iterations,
            tool_calls=self.tool_calls,
            # A failed run says why at info: the status and the message its client got.
            **({"code": self.failure[0].name, "error": self.failure[1]} if self.failure else {}),
        )


def _enabled(level: int) -> bool:
    """For a logger that cannot say (an embedder's wrapper class): assume it logs."""
    return True


def _slim(request: RunRequest) -> RunRequest:
    """``request`` without what the log's ``run_started`` frame already holds in full."""
    if len(request.prompt) <= PROMPT_KEPT and not request.llm.script:
        return request
    llm = dataclasses.replace(request.llm, script="")
    return dataclasses.replace(request, prompt=request.prompt[:PROMPT_KEPT], llm=llm)


def _ended(sequence: int, event: RunEvent, failure_code: int = 0) -> bytes:
    raise AssertionError("a finished run logs nothing more")  # emit returns once ended
