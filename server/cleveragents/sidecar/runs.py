"""The run manager: one ordered event log per run, its subscribers, cancellation and retention.

Events reach streams only once the event store holds them (at once for the in-memory store,
after their batch commits for SQLite), so nothing a client has seen can be lost to a crash.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
import structlog

from cleveragents.providers import ProviderError
from cleveragents.sidecar import convert
from cleveragents.sidecar.approvals import ApprovalBroker
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.store import EventStore, MemoryEventStore, StoredRun
from cleveragents.sidecar.streams import Follower, Listener, frame, unframe
from cleveragents.tool import (
    LLMCallError,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunStarted,
    StopReason,
    ToolActorContext,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolCallRunResult,
)
from cleveragents.toolruntime.v1 import events_pb2, types_pb2

__all__ = ["Run", "RunManager", "RunObserver", "RunStats"]

log = structlog.get_logger("cleveragents.sidecar.runs")

RUNNING = types_pb2.RUN_STATE_RUNNING
COMPLETED = types_pb2.RUN_STATE_COMPLETED
FAILED = types_pb2.RUN_STATE_FAILED
CANCELLED = types_pb2.RUN_STATE_CANCELLED
_MAX_RUN_ID = 128
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_TERMINAL_EVENTS = (RunCompleted, RunFailed, RunCancelled)
#: How long start-up waits for the store to hold the end of each run a crash interrupted.
_SETTLE_TIMEOUT_S = 10.0
#: How often (in events) a run looks for watchers that fell too far behind.
_LAG_CHECK_EVERY = 64


class RunObserver(Protocol):
    """Sees every run start and every core event of every run (tracing, metrics)."""

    def run_started(self, run: Run, metadata: Mapping[str, str]) -> None:
        """A run was accepted; ``metadata`` is the starting call's gRPC metadata."""
        ...

    def run_event(self, run: Run, event: RunEvent) -> None:
        """A run produced ``event`` (its terminal event included)."""
        ...


@dataclass
class RunStats:
    """Counters the manager and its runs share."""

    dropped_watchers: int = 0


class Run:
    """One run: its accepted spec, state, event log, listeners and result.

    ``ended`` turns true when the terminal event is logged; ``finished`` (and the state and
    result) once the store holds it, like every frame before it reaches a listener.
    """

    __slots__ = (
        "_done",
        "_held",
        "_release_waiters",
        "_terminal",
        "approvals",
        "detach",
        "ended",
        "failure",
        "finished_at",
        "followers",
        "frames",
        "iterations",
        "listeners",
        "log",
        "observers",
        "released",
        "released_bytes",
        "result",
        "run_id",
        "spec",
        "state",
        "stats",
        "store",
        "task",
        "tool_calls",
    )

    def __init__(
        self,
        run_id: str,
        spec: types_pb2.RunSpec,
        store: EventStore,
        observers: Sequence[RunObserver] = (),
        stats: RunStats | None = None,
    ) -> None:
        self.run_id = run_id
        self.spec = spec
        self.store = store
        self.observers = tuple(observers)
        self.stats = stats if stats is not None else RunStats()
        self.detach = spec.detach
        self.state: types_pb2.RunState.ValueType = RUNNING
        self.frames: list[bytes] = []
        self.released = 0
        #: The size of the released frames together: a watcher sizes its batch from it.
        self.released_bytes = 0
        self.ended = False
        self.listeners: list[Listener] = []
        self.followers: list[Follower] = []
        self._release_waiters: list[asyncio.Future[None]] = []
        self._held: collections.deque[tuple[int, Listener, bytes]] = collections.deque()
        self.result: types_pb2.ToolCallRunResult | None = None
        self.failure: tuple[grpc.StatusCode, str] | None = None
        self.finished_at: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.approvals: ApprovalBroker | None = None
        self.iterations = 0
        self.tool_calls = 0
        self._terminal: _Terminal | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.log = log.bind(run_id=run_id)

    @property
    def finished(self) -> bool:
        """Whether the run's terminal event is stored (and so visible to clients)."""
        return self.state != RUNNING

    @property
    def last_sequence(self) -> int:
        """The sequence number of the newest event clients can see (0 before any)."""
        return self.released

    async def wait(self) -> None:
        """Wait until the run has ended and its terminal event is stored."""
        await asyncio.shield(self._done)

    def follow(self, after_sequence: int, limit: int) -> Follower:
        """A watcher's reader of this log, from the event after ``after_sequence`` on."""
        follower = Follower(self, after_sequence, limit)
        if not self.finished:
            self.followers.append(follower)
        return follower

    def unsubscribe(self, reader: Listener | Follower) -> None:
        """Stop sending events to ``reader``."""
        if isinstance(reader, Follower):
            if reader in self.followers:
                self.followers.remove(reader)
        elif reader in self.listeners:
            self.listeners.remove(reader)

    def wait_for_release(self) -> asyncio.Future[None]:
        """A future set when more frames are released or the run finishes (for followers)."""
        waiters = self._release_waiters
        if len(waiters) > 2 * len(self.followers) + 16:  # watchers gone while waiting
            waiters[:] = [w for w in waiters if not w.done()]
        waiter = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        return waiter

    def push_in_order(self, listener: Listener, item: bytes) -> None:
        """Give ``listener`` ``item`` after every frame logged so far, once those are stored.

        A session's invocation must follow the events before it, which a store that commits
        on its own thread has not released yet.
        """
        if self.released >= len(self.frames):
            listener.push(item)
        else:
            self._held.append((len(self.frames), listener, item))

    def emit(self, event: RunEvent) -> None:
        """Log a core event (the runtime's ``on_event`` sink)."""
        if self.ended or isinstance(event, RunStarted):
            return  # run_started is logged by the manager, before the task runs
        pb = events_pb2.RunEvent(run_id=self.run_id, sequence=len(self.frames) + 1)
        convert.set_time(pb.time)
        code = _failure_code(event).value[0] if isinstance(event, RunFailed) else _UNAVAILABLE
        convert.event_to_pb(event, pb, failure_code=code)
        if isinstance(event, ToolCallCompleted):
            self.tool_calls += 1
        elif isinstance(event, LLMResponded):
            self.iterations = event.iteration
        for observer in self.observers:
            try:
                observer.run_event(self, event)
            except Exception:  # telemetry must never break a run
                self.log.exception("run observer failed", observer=type(observer).__name__)
        if isinstance(event, _TERMINAL_EVENTS):
            self.end(pb)
        else:
            self._append(pb)

    def emit_started(self) -> None:
        """Log ``run_started`` with the spec as accepted."""
        pb = events_pb2.RunEvent(run_id=self.run_id, sequence=1, time=convert.timestamp())
        pb.run_started.spec.CopyFrom(self.spec)
        self._append(pb)

    def end(self, pb: events_pb2.RunEvent) -> None:
        """Log a terminal event; the run finishes once the store holds it."""
        self.ended = True
        self._terminal = _terminal_of(pb)
        self._append(pb)

    def release(self, sequence: int) -> None:
        """The store holds every frame up to ``sequence``: hand them to the listeners."""
        sequence = min(sequence, len(self.frames))
        if sequence <= self.released:
            return
        previous, self.released = self.released, sequence
        if sequence == previous + 1:  # the in-memory store releases frames one by one
            self.released_bytes += len(self.frames[previous])
        else:
            self.released_bytes += sum(map(len, self.frames[previous:sequence]))
        start, held = previous, self._held
        while held and held[0][0] <= sequence:
            mark, listener, item = held.popleft()
            self._push(start, mark)
            listener.push(item)
            start = mark
        self._push(start, sequence)
        if self.followers:
            if previous // _LAG_CHECK_EVERY != sequence // _LAG_CHECK_EVERY:
                self._drop_laggards()
            self._wake_followers()
        if self._terminal is not None and sequence == len(self.frames):
            self._finish(self._terminal)

    def _push(self, start: int, stop: int) -> None:
        if self.listeners and stop > start:
            items = self.frames[start:stop]
            for listener in self.listeners:
                for item in items:
                    listener.push(item)

    def _drop_laggards(self) -> None:
        """Drop the followers too far behind (checked every few events: lag grows slowly)."""
        for follower in [f for f in self.followers if f.lag > f.limit]:
            follower.dropped = True
            self.followers.remove(follower)
            self.stats.dropped_watchers += 1
            self.log.warning("watcher dropped", reason="too far behind", lag=follower.lag)

    def _wake_followers(self) -> None:
        waiters, self._release_waiters = self._release_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _append(self, pb: events_pb2.RunEvent) -> None:
        item = frame(pb)
        self.frames.append(item)
        self.store.append(self, len(self.frames), item)

    def _finish(self, terminal: _Terminal) -> None:
        self.state, self.result, self.failure, self.finished_at = terminal
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()
        self.followers.clear()
        self._wake_followers()
        if not self._done.done():
            self._done.set_result(None)
        self.log.info(
            "run finished",
            state=types_pb2.RunState.Name(self.state),
            stop_reason=types_pb2.StopReason.Name(self.result.stop_reason),
            iterations=self.result.iterations,
            tool_calls=len(self.result.tool_call_history),
        )


_Terminal = tuple[
    "types_pb2.RunState.ValueType",
    types_pb2.ToolCallRunResult,
    "tuple[grpc.StatusCode, str] | None",
    float,
]


def _terminal_of(pb: events_pb2.RunEvent) -> _Terminal:
    """State, result, failure and end time carried by a terminal event."""
    kind = pb.WhichOneof("payload")
    finished_at = convert.seconds_of(pb.time)
    if kind == "run_completed":
        return COMPLETED, pb.run_completed.result, None, finished_at
    if kind == "run_failed":
        failure = (_STATUS_BY_CODE.get(pb.run_failed.code, grpc.StatusCode.UNKNOWN),
                   pb.run_failed.message)  # fmt: skip
        return FAILED, pb.run_failed.result, failure, finished_at
    if kind == "run_cancelled":
        return CANCELLED, pb.run_cancelled.result, None, finished_at
    raise ValueError(f"event {pb.sequence} of run {pb.run_id!r} is not terminal")


_STATUS_BY_CODE = {code.value[0]: code for code in grpc.StatusCode}


#: The provider refused the sidecar's key (not UNAUTHENTICATED: that one is about the client's
#: own credentials). Other provider failures: UNAVAILABLE when a later try may succeed
#: (connection, timeout, 408/409/429/5xx), else FAILED_PRECONDITION (another 4xx, or an
#: answer that cannot be used): something must change first.
_PROVIDER_CODES = {401: grpc.StatusCode.PERMISSION_DENIED, 403: grpc.StatusCode.PERMISSION_DENIED}


def _failure_code(event: RunFailed) -> grpc.StatusCode:
    cause = event.error.__cause__ if isinstance(event.error, LLMCallError) else event.error
    if isinstance(cause, SidecarError):
        return cause.code
    if isinstance(cause, ProviderError):
        return _PROVIDER_CODES.get(cause.status or 0) or (
            grpc.StatusCode.UNAVAILABLE if cause.retryable else grpc.StatusCode.FAILED_PRECONDITION
        )
    if isinstance(event.error, LLMCallError) or isinstance(cause, Exception):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


class RunManager:
    """Creates runs, finds them by id, cancels them and forgets finished ones in time."""

    def __init__(
        self,
        *,
        max_concurrent_runs: int,
        max_finished_runs: int,
        finished_run_ttl_s: float,
        watcher_queue_size: int,
        store: EventStore | None = None,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self.store: EventStore = store if store is not None else MemoryEventStore()
        self.observers = list(observers)
        self.stats = RunStats()
        self.max_concurrent_runs = max_concurrent_runs
        self.max_finished_runs = max_finished_runs
        self.finished_run_ttl_s = finished_run_ttl_s
        self.watcher_queue_size = watcher_queue_size
        self.accepting = True
        self._live: dict[str, Run] = {}
        self._finished: collections.OrderedDict[str, Run] = collections.OrderedDict()

    def open(self) -> int:
        """Open the store and take back the runs it holds; returns how many.

        A run that was live when the previous process died ends now, with ``run_failed``
        (``UNAVAILABLE``) saying so and the partial result its log shows.
        """
        restored = [self._restore(stored) for stored in self.store.open()]
        restored.sort(key=lambda run: run.finished_at or 0.0)
        for run in restored:
            self._finished[run.run_id] = run
        self._expire()
        return len(restored)

    async def settle(self, timeout_s: float = _SETTLE_TIMEOUT_S) -> None:
        """Wait until the store holds the ``run_failed`` that ``open`` gave each crashed run.

        Until then such a run would still look live to ``GetRun`` and ``WatchRun``. A store
        that cannot write does not keep the sidecar from serving: after ``timeout_s`` it
        starts anyway, and says so.
        """
        pending = [run.wait() for run in self._finished.values() if not run.finished]
        if not pending:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*pending), timeout_s)
        except TimeoutError:
            log.warning(
                "restored runs not stored yet; serving anyway",
                runs=sum(not run.finished for run in self._finished.values()),
                waited_s=timeout_s,
            )

    async def close(self) -> None:
        """Let the store write what it holds, then close it."""
        await self.store.close()

    def _restore(self, stored: StoredRun) -> Run:
        first = unframe(stored.frames[0])
        run = Run(stored.run_id, first.run_started.spec, self.store)
        run.frames = list(stored.frames)
        run.released = len(run.frames)
        run.released_bytes = sum(map(len, run.frames))
        last = unframe(run.frames[-1])
        if last.WhichOneof("payload") in ("run_completed", "run_failed", "run_cancelled"):
            run.ended = True
            run._finish(_terminal_of(last))
            return run
        crashed = events_pb2.RunEvent(
            run_id=run.run_id, sequence=len(run.frames) + 1, time=convert.timestamp()
        )
        crashed.run_failed.code = grpc.StatusCode.UNAVAILABLE.value[0]
        crashed.run_failed.message = (
            "the sidecar stopped while this run was live; its log was recovered at restart"
        )
        crashed.run_failed.result.CopyFrom(_partial_result(run.run_id, run.frames))
        run.end(crashed)
        run.log.warning("run was live at a crash", events=len(run.frames))
        return run

    @property
    def live_count(self) -> int:
        """How many runs are in flight."""
        return len(self._live)

    def live_runs(self) -> list[Run]:
        """The runs in flight."""
        return list(self._live.values())

    def retained_runs(self) -> list[Run]:
        """Finished runs still kept, oldest first."""
        self._expire()
        return list(self._finished.values())

    def get(self, run_id: str) -> Run | None:
        """A live or retained run."""
        self._expire()
        return self._live.get(run_id) or self._finished.get(run_id)

    def require(self, run_id: str) -> Run:
        """A live or retained run, or ``NOT_FOUND``."""
        run = self.get(run_id)
        if run is None:
            raise SidecarError.not_found(f"no run with id {run_id!r} (unknown, or expired)")
        return run

    def start(
        self,
        spec: types_pb2.RunSpec,
        runtime: ToolCallingRuntime,
        context: ToolActorContext,
        *,
        timeout_s: float | None,
        listener: Listener | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Run:
        """Accept ``spec`` (its ``run_id`` filled in), log ``run_started`` and start the loop.

        ``listener`` is attached before the first event, so the stream that started the run
        sees every event.
        """
        if not self.accepting:
            raise SidecarError(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
        run_id = spec.run_id or uuid.uuid4().hex
        if len(run_id) > _MAX_RUN_ID:
            raise SidecarError.invalid(f"run_id is longer than {_MAX_RUN_ID} characters")
        if run_id in self._live:
            raise SidecarError(grpc.StatusCode.ALREADY_EXISTS, f"run {run_id!r} is still running")
        if len(self._live) >= self.max_concurrent_runs:
            raise SidecarError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the sidecar already runs {len(self._live)} runs, its limit; retry later",
            )
        if self._finished.pop(run_id, None) is not None:
            self.store.forget(run_id)
        spec.run_id = run_id
        run = Run(run_id, spec, self.store, self.observers, self.stats)
        for observer in self.observers:
            observer.run_started(run, metadata or {})
        if listener is not None:
            run.listeners.append(listener)
        self._live[run_id] = run
        run.emit_started()
        run.task = asyncio.create_task(
            self._drive(run, runtime, context, timeout_s), name=f"run-{run_id}"
        )
        run.log.info("run started", tools=list(runtime.registry.names()))
        return run

    def cancel(self, run: Run, reason: str) -> None:
        """Cancel a live run; it ends with ``run_cancelled`` carrying ``reason``."""
        if not run.ended and run.task is not None:
            run.task.cancel(reason)

    def follow(self, run: Run, after_sequence: int) -> Follower:
        """A watcher's reader of ``run``, dropped when it falls too far behind."""
        return run.follow(after_sequence, self.watcher_queue_size)

    async def drain(self, grace_s: float) -> None:
        """Stop accepting runs, let live ones finish within ``grace_s``, then cancel the rest."""
        self.accepting = False
        tasks = [run.task for run in self._live.values() if run.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for run in list(self._live.values()):
            self.cancel(run, "the sidecar is shutting down")
        if pending:
            await asyncio.wait(pending)

    async def _drive(
        self,
        run: Run,
        runtime: ToolCallingRuntime,
        context: ToolActorContext,
        timeout_s: float | None,
    ) -> None:
        try:
            await runtime.arun_tool_loop(
                run.spec.prompt,
                context,
                run_id=run.run_id,
                timeout_s=timeout_s,
                on_event=run.emit,
            )
        except asyncio.CancelledError as exc:
            if not run.ended:  # cancelled before the loop began
                reason = str(exc.args[0]) if exc.args and exc.args[0] else "cancelled"
                run.emit(RunCancelled(reason, _empty_result(run.run_id, StopReason.CANCELLED)))
        except LLMCallError:
            pass  # the loop has logged run_failed
        except Exception as exc:
            run.log.exception("run crashed")
            if not run.ended:
                result = _empty_result(run.run_id, StopReason.ERROR)
                run.emit(RunFailed(f"internal error: {exc}", result, None))
        finally:
            self._retire(run)

    def _retire(self, run: Run) -> None:
        self._live.pop(run.run_id, None)
        if self.max_finished_runs > 0:
            self._finished[run.run_id] = run
        self._expire()

    def _expire(self) -> None:
        while len(self._finished) > self.max_finished_runs:
            self._forget(self._finished.popitem(last=False)[1])
        horizon = time.time() - self.finished_run_ttl_s
        while self._finished:
            oldest = next(iter(self._finished.values()))
            if oldest.finished_at is None or oldest.finished_at > horizon:
                break
            self._forget(self._finished.popitem(last=False)[1])

    def _forget(self, run: Run) -> None:
        self.store.forget(run.run_id)


def _partial_result(run_id: str, frames: list[bytes]) -> types_pb2.ToolCallRunResult:
    """What a log shows of a run that never ended: its records, iterations, usage and text."""
    result = types_pb2.ToolCallRunResult(run_id=run_id, stop_reason=types_pb2.STOP_REASON_ERROR)
    texts = []
    for item in frames:
        event = unframe(item)
        kind = event.WhichOneof("payload")
        if kind == "tool_call_completed":
            result.tool_call_history.append(event.tool_call_completed.record)
        elif kind == "llm_responded":
            responded = event.llm_responded
            result.iterations = responded.iteration
            result.usage.input_tokens += responded.usage.input_tokens
            result.usage.output_tokens += responded.usage.output_tokens
            if responded.content:
                texts.append(responded.content)
    result.content = "\n".join(texts)
    return result


def _empty_result(run_id: str, stop_reason: StopReason) -> ToolCallRunResult:
    return ToolCallRunResult("", (), 0, False, stop_reason=stop_reason, run_id=run_id)
