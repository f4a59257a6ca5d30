"""``Run``: one run's life, from its accepted request to its one terminal event.

``Run.emit`` is the one place where events become frames: the runtime's events (its own
``RunStarted`` first) are encoded once, numbered and appended to the run's log. A run ends
when its terminal event is logged, and finishes (state, result and failure set, waiters woken)
once the store holds that event, like every frame before it reaches a reader.

Where a run is in its life is one ``RunPhase``; ``_NEXT`` holds every move between phases, and
each move is a method of ``Run``. ``Run.from_log`` is the one way back from a stored log (a
restart, an adoption, another sidecar's run followed here), and ``Terminal.of`` the one map
from a terminal event to how the run ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import grpc
import structlog

from cleveragents.sidecar.errors import DamagedLog, SidecarError
from cleveragents.sidecar.runs.log import LogStats, RunLog
from cleveragents.sidecar.runs.store import EventStore, StoredRun
from cleveragents.sidecar.status import status_from_code, status_of
from cleveragents.tool import (
    ErrorKind,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    StopReason,
    TerminalEvent,
    ToolActorContext,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolCallRecord,
    ToolCallRunResult,
)
from cleveragents.wire import (
    EventEncoder,
    LoggedEvent,
    OversizedEvent,
    RunRequest,
    RunState,
    check_frame,
    decode_frame,
    request_of_started,
    result_message,
)

if TYPE_CHECKING:
    from cleveragents.sidecar.approvals import ApprovalBroker

__all__ = [
    "PROMPT_KEPT", "Launchable", "Run", "RunObserver", "RunPhase", "Terminal", "is_terminal",
]  # fmt: skip

log = structlog.get_logger("cleveragents.sidecar.runs")
#: How much of a finished run's prompt its ``request`` keeps (what ``ListRuns`` shows): the
#: whole spec stays in the log's ``run_started`` frame, and a finished run keeps it only there.
PROMPT_KEPT = 200

_TERMINAL_EVENTS = (RunCompleted, RunFailed, RunCancelled)


def is_terminal(event: RunEvent) -> bool:
    """Whether ``event`` ends its run."""
    return isinstance(event, _TERMINAL_EVENTS)


class RunPhase(enum.Enum):
    """Where a run is in its life on this sidecar (``RunState`` is what its clients see)."""

    #: Admitted: its loop's task is made and has not taken a step.
    STARTING = "starting"
    #: Its loop runs (a mirror: the sidecar that runs it is followed).
    RUNNING = "running"
    #: Rebuilt from its stored log, live, its loop not running: to resume, to wait for its
    #: client, or to end as a crash left it.
    RESTORED = "restored"
    #: A Session run waiting for its client to re-attach (its loop may go on meanwhile).
    PARKED = "parked"
    #: Taken by a re-attach under way: no other client, here or at another sidecar, may.
    ATTACHING = "attaching"
    #: Its terminal event is logged, not yet stored.
    ENDING = "ending"
    #: Its terminal event is stored: its state, result and failure are final.
    FINISHED = "finished"
    #: Another sidecar took it over: its copy here stopped, logging nothing more.
    LOST = "lost"


#: Every move between phases (``Run._move`` refuses any other).
_NEXT: dict[RunPhase, frozenset[RunPhase]] = {
    RunPhase.STARTING: frozenset(
        {RunPhase.RUNNING, RunPhase.PARKED, RunPhase.ENDING, RunPhase.LOST}
    ),
    RunPhase.RUNNING: frozenset({RunPhase.PARKED, RunPhase.ENDING, RunPhase.LOST}),
    RunPhase.RESTORED: frozenset(
        {RunPhase.STARTING, RunPhase.PARKED, RunPhase.ENDING, RunPhase.FINISHED, RunPhase.LOST}
    ),
    RunPhase.PARKED: frozenset({RunPhase.ATTACHING, RunPhase.ENDING, RunPhase.LOST}),
    RunPhase.ATTACHING: frozenset(
        {RunPhase.RUNNING, RunPhase.STARTING, RunPhase.PARKED, RunPhase.ENDING, RunPhase.LOST}
    ),
    RunPhase.ENDING: frozenset({RunPhase.FINISHED, RunPhase.LOST}),
    RunPhase.FINISHED: frozenset(),
    RunPhase.LOST: frozenset(),
}
#: The phases in which nothing more is logged.
_ENDED = frozenset({RunPhase.ENDING, RunPhase.FINISHED, RunPhase.LOST})


class Launchable(Protocol):
    """A run ready to start, as the manager starts it (``assembly.AssembledRun`` is one): the
    request as accepted, the runtime and context its loop runs with, the time its starting
    call left it (``None``: no deadline), its approvals broker and the tools its client hosts."""

    @property
    def request(self) -> RunRequest: ...

    @property
    def runtime(self) -> ToolCallingRuntime: ...

    @property
    def context(self) -> ToolActorContext: ...

    @property
    def timeout_s(self) -> float | None: ...

    @property
    def approvals(self) -> ApprovalBroker: ...

    @property
    def hosted_tools(self) -> frozenset[str]:
        """The tools its Session's client hosts (their invocations reach the client only once
        the store holds their start: no call of theirs needs to wait for it)."""
        ...


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
    """How a run ended: its state, its result, its failure (status and message) and when;
    ``tool_calls`` when its result, read back from a log, leaves its history out."""

    state: RunState
    result: ToolCallRunResult
    failure: tuple[grpc.StatusCode, str] | None
    finished_at: float
    tool_calls: int | None = None

    @classmethod
    def of(
        cls,
        event: TerminalEvent,
        finished_at: float,
        status: grpc.StatusCode | None,
        tool_calls: int | None = None,
    ) -> Terminal:
        """How the run whose terminal event is ``event`` ended (``status``: a failed run's)."""
        if isinstance(event, RunCompleted):
            return cls(RunState.COMPLETED, event.result, None, finished_at, tool_calls)
        if isinstance(event, RunFailed):
            failure = (status or grpc.StatusCode.UNKNOWN, event.message)
            return cls(RunState.FAILED, event.result, failure, finished_at, tool_calls)
        return cls(RunState.CANCELLED, event.result, None, finished_at, tool_calls)


class Run:
    """One run: its accepted request, its log, its phase, its state and result.

    ``started_at`` is when the sidecar accepted it. Once finished, ``stop_reason``,
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
        "_ended",
        "_loss",
        "_phase",
        "_terminal",
        "_too_large",
        "approvals",
        "detach",
        "failure",
        "finished_at",
        "iterations",
        "log",
        "logger",
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
        self.stop_reason: StopReason | None = None
        self.failure: tuple[grpc.StatusCode, str] | None = None
        self.finished_at: float | None = None
        #: Its loop's task, once it has one (``started``).
        self.task: asyncio.Task[None] | None = None
        #: Its approvals broker, once its loop has one (``started``).
        self.approvals: ApprovalBroker | None = None
        self.iterations = 0
        self.tool_calls = 0
        self._phase = RunPhase.STARTING
        #: Whether nothing more is logged (the phase is one of ``_ENDED``): read per event.
        self._ended = False
        #: Why another sidecar has it now (``lose``).
        self._loss: SidecarError | None = None
        self._terminal: Terminal | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._too_large: str | None = None
        self._encode = EventEncoder(self.run_id, request, frame_limit).encode
        self.logger = log.bind(run_id=self.run_id)

    @classmethod
    def from_log(
        cls, stored: StoredRun, store: EventStore, stats: LogStats, frame_limit: int = 0
    ) -> Run:
        """The run a stored log holds (its frames all stored already): finished if the log
        ends with its terminal event, else ``RESTORED``, live (to resume, to wait for its
        client, to end as a crash left it; or, another sidecar's run, to be followed with
        ``take``). ``DamagedLog`` (``DATA_LOSS``) names the first frame that cannot be read
        back. ``frame_limit`` bounds what it logs from now on (see ``Run``)."""
        run_id, frames = stored.run_id, stored.frames
        for sequence, item in enumerate(frames, 1):
            _check(item, run_id, sequence)
        try:
            first = decode_frame(frames[0])
            request = request_of_started(frames[0])
        except Exception as exc:  # it parsed, but holds what no sidecar writes
            raise DamagedLog(run_id, 1, f"{type(exc).__name__}: {exc}") from None
        run_log = RunLog(run_id, store, stats, stored.owner, stored.resume_info)
        run_log.restore(list(frames))
        run = cls(request, run_log, started_at=first.time, frame_limit=frame_limit)
        run._phase = RunPhase.RESTORED
        for sequence, item in enumerate(frames[:-1], 1):
            run._count(_decoded(item, run_id, sequence).event)
        if (terminal := _terminal_of(frames[-1], run, len(frames))) is not None:
            run._move(RunPhase.FINISHED)
            run._terminal = terminal
            run.log.close()
            run._finish()
        return run

    # -- where it is in its life ---------------------------------------------------------------

    @property
    def phase(self) -> RunPhase:
        return self._phase

    @property
    def ended(self) -> bool:
        """Whether nothing more is logged: its end is logged, or another sidecar has it."""
        return self._ended

    @property
    def finished(self) -> bool:
        """Whether the run's terminal event is stored (and so visible to clients)."""
        return self.state is not RunState.RUNNING

    @property
    def lost(self) -> SidecarError | None:
        """Why its copy here stopped (another sidecar has the run now: ``FAILED_PRECONDITION``),
        if it did."""
        return self._loss

    @property
    def last_sequence(self) -> int:
        """The sequence number of the newest event clients can see (0 before any)."""
        return self.log.released

    def _move(self, to: RunPhase) -> None:
        if to not in _NEXT[self._phase]:
            raise AssertionError(f"run {self.run_id!r}: no move from {self._phase} to {to}")
        self._phase = to
        self._ended = to in _ENDED

    def started(self, task: asyncio.Task[None], approvals: ApprovalBroker) -> None:
        """Its loop is ``task`` (from its start, or from its log), asking ``approvals``."""
        if self._phase is not RunPhase.STARTING:
            self._move(RunPhase.STARTING)
        self.task, self.approvals = task, approvals

    def begin(self) -> None:
        """Its loop takes its first step."""
        self._move(RunPhase.RUNNING)

    def park(self) -> None:
        """Its client went away (or is yet to re-attach): the run waits for it."""
        self._move(RunPhase.PARKED)

    def reserve(self) -> None:
        """A re-attach takes the parked run: no other client may now."""
        self._move(RunPhase.ATTACHING)

    def give_back(self) -> None:
        """The re-attach that took it failed: the run waits for a client again."""
        if self._phase is RunPhase.ATTACHING:
            self._move(RunPhase.PARKED)

    def reattached(self) -> None:
        """The re-attach that took it gave it its client back (its loop went on)."""
        self._move(RunPhase.RUNNING)

    async def stored(self) -> None:
        """Return once the store holds every event logged so far. On a shared store that write
        is fenced: a sidecar that lost the run (it stalled past its lease) finds out here,
        before the tool call that waits for it (``drive``), and the call never runs
        (``CancelledError``)."""
        await self.log.stored()
        if self._loss is not None:
            raise asyncio.CancelledError(self._loss.message)

    async def wait(self) -> None:
        """Wait until the run has ended and its terminal event is stored (or it was lost)."""
        await asyncio.shield(self._done)

    # -- its events ----------------------------------------------------------------------------

    def emit(self, event: RunEvent) -> None:
        """Log a core event (the runtime's ``on_event`` sink); nothing after the terminal one.

        An ``LLMDelta`` is not logged: it goes to the log's live deltas, after the event
        logged last (its call's ``IterationStarted``), for the streams that asked for deltas.
        """
        if self._ended:
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
            self.end(item, Terminal.of(event, time.time(), status))
        else:
            self.log.append(item)

    def take(self, frames: list[bytes]) -> None:
        """Append the newly stored ``frames`` of another sidecar's run, which this one
        follows; the terminal one ends it. ``DamagedLog`` for a frame that cannot be read."""
        for item in frames:
            if self._ended:
                return
            sequence = self.log.next_sequence
            _check(item, self.run_id, sequence)
            if (terminal := _terminal_of(item, self, sequence)) is not None:
                self.end(item, terminal)
            else:
                self.log.append(item)

    def _count(self, event: RunEvent) -> None:
        """Count ``event`` of a log read back: its tool calls and iterations so far."""
        if isinstance(event, ToolCallCompleted):
            self.tool_calls += 1
        elif isinstance(event, LLMResponded):
            self.iterations = event.iteration

    def _stop_too_large(self, message: str) -> None:
        """An event could not be sent: stop the run, which then fails saying why."""
        self._too_large = f"{message}; the run was stopped"
        self.logger.warning("event too large for one message", error=message)
        if self.task is not None:
            self.task.cancel(self._too_large)

    def end(self, item: bytes, terminal: Terminal) -> None:
        """Log the terminal frame ``item``; the run finishes as ``terminal`` once it is stored."""
        self._move(RunPhase.ENDING)
        self._terminal = terminal
        self.log.end(item, self._stored)

    def lose(
        self, message: str, code: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION
    ) -> bool:
        """Stop this sidecar's copy of a run another sidecar took over (its lease had expired:
        the fleet logs that as an error; or it was parked: a hand-over), of a run a failed
        start leaves for the next, or of another sidecar's run followed here whose stored log
        turned out damaged (``DATA_LOSS``): nothing more is logged or run here, its streams
        end (``code``, ``message``) and its waiters wake; ``False`` if it had already
        finished."""
        if self._phase in (RunPhase.FINISHED, RunPhase.LOST):
            return False
        self._move(RunPhase.LOST)
        self._loss = SidecarError(code, message)
        self.log.close()
        if self.task is not None:
            self.task.cancel(message)
        if not self._done.done():
            self._done.set_result(None)
        self.logger.warning("run now runs on another sidecar; its copy here stopped", why=message)
        return True

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

    def _stored(self) -> None:
        """Its terminal event is stored: it finishes (unless another sidecar took it)."""
        if self._phase is RunPhase.ENDING:
            self._move(RunPhase.FINISHED)
            self._finish()

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
        self.tool_calls = (
            len(result.tool_call_history) if terminal.tool_calls is None else terminal.tool_calls
        )
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


def _check(item: bytes, run_id: str, sequence: int) -> None:
    """``DamagedLog`` unless ``item`` is the frame of event ``sequence`` of ``run_id``."""
    try:
        check_frame(item, run_id, sequence)
    except ValueError as exc:
        raise DamagedLog(run_id, sequence, str(exc)) from None


def _decoded(item: bytes, run_id: str, sequence: int) -> LoggedEvent:
    """The event frame ``item`` holds (``sequence`` of ``run_id``), or ``DamagedLog``."""
    try:
        return decode_frame(item)
    except Exception as exc:  # it parsed, but holds what no sidecar writes
        raise DamagedLog(run_id, sequence, f"{type(exc).__name__}: {exc}") from None


def _terminal_of(item: bytes, run: Run, sequence: int) -> Terminal | None:
    """How the run ended, if the logged frame ``item`` (event ``sequence``) is its terminal
    event (read back from a log: a result that leaves its history out still says how many
    calls it made); else ``None``, and the event is counted."""
    logged = _decoded(item, run.run_id, sequence)
    event = logged.event
    if not isinstance(event, _TERMINAL_EVENTS):
        run._count(event)
        return None
    ended = result_message(item)
    calls = ended.tool_call_count if ended is not None and ended.history_omitted else None
    status = status_from_code(logged.failure_code) if isinstance(event, RunFailed) else None
    return Terminal.of(event, logged.time, status, calls)


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
