"""The run manager: one ordered event log per run, its subscribers, cancellation and retention.

Each event is serialised once, as a frame that is at the same time a valid
``StreamToolLoopResponse``, ``WatchRunResponse`` and ``SessionResponse`` (all three carry the
``RunEvent`` as field 1), so streaming it to any number of clients costs no re-encoding.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Sequence
from typing import Protocol

import grpc
import structlog

from cleveragents.providers import ProviderError
from cleveragents.sidecar import convert
from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import (
    LLMCallError,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunStarted,
    StopReason,
    ToolActorContext,
    ToolCallingRuntime,
    ToolCallRunResult,
)
from cleveragents.toolruntime.v1 import events_pb2, types_pb2

__all__ = ["Listener", "Run", "RunManager", "Subscriber"]

log = structlog.get_logger("cleveragents.sidecar.runs")

RUNNING = types_pb2.RUN_STATE_RUNNING
COMPLETED = types_pb2.RUN_STATE_COMPLETED
FAILED = types_pb2.RUN_STATE_FAILED
CANCELLED = types_pb2.RUN_STATE_CANCELLED
_MAX_RUN_ID = 128


def frame(event: events_pb2.RunEvent) -> bytes:
    """Serialise ``event`` wrapped as field 1 of a response message."""
    data = event.SerializeToString()
    size = len(data)
    prefix = bytearray(b"\x0a")
    while size > 0x7F:
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + data


class Listener(Protocol):
    """Receives each frame of a run as it is logged, and ``close`` after the last one."""

    def push(self, item: bytes) -> None: ...

    def close(self) -> None: ...


class Subscriber:
    """A bounded queue of frames for one stream; too far behind, it is dropped.

    ``limit=None`` means unbounded (the stream that started the run: its queue is bounded by
    the run itself). Frames replayed at subscription do not count against the limit: only
    live frames piling up behind a reader that does not keep up do.
    """

    __slots__ = ("_backlog", "_items", "_limit", "_waiter", "closed", "dropped")

    def __init__(self, limit: int | None, replay: Sequence[bytes] = ()) -> None:
        self._items: collections.deque[bytes] = collections.deque(replay)
        self._backlog = len(self._items)
        self._limit = limit
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.dropped = False

    def push(self, item: bytes) -> None:
        if self.closed:
            return
        if self._limit is not None and len(self._items) - self._backlog >= self._limit:
            self.dropped = True
            self.close()
            return
        self._items.append(item)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    async def get(self) -> bytes | None:
        """The next frame; ``None`` once closed and drained (or dropped)."""
        while not self._items:
            if self.closed:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.dropped:
            return None
        if self._backlog:
            self._backlog -= 1
        return self._items.popleft()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Run:
    """One run: its accepted spec, state, event log, listeners and result."""

    __slots__ = (
        "_done",
        "detach",
        "failure",
        "finished_at",
        "frames",
        "listeners",
        "log",
        "result",
        "run_id",
        "spec",
        "state",
        "task",
    )

    def __init__(self, run_id: str, spec: types_pb2.RunSpec) -> None:
        self.run_id = run_id
        self.spec = spec
        self.detach = spec.detach
        self.state: types_pb2.RunState.ValueType = RUNNING
        self.frames: list[bytes] = []
        self.listeners: list[Listener] = []
        self.result: types_pb2.ToolCallRunResult | None = None
        self.failure: tuple[grpc.StatusCode, str] | None = None
        self.finished_at: float | None = None
        self.task: asyncio.Task[None] | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.log = log.bind(run_id=run_id)

    @property
    def finished(self) -> bool:
        """Whether the run's terminal event is in its log."""
        return self.state != RUNNING

    @property
    def last_sequence(self) -> int:
        """The sequence number of the newest event (0 before any)."""
        return len(self.frames)

    async def wait(self) -> None:
        """Wait until the run has ended."""
        await asyncio.shield(self._done)

    def subscribe(self, after_sequence: int, limit: int | None) -> Subscriber:
        """A subscriber that first replays the events after ``after_sequence``, then follows."""
        sub = Subscriber(limit, self.frames[after_sequence:])
        if self.finished:
            sub.close()
        else:
            self.listeners.append(sub)
        return sub

    def unsubscribe(self, listener: Listener) -> None:
        """Stop sending events to ``listener``."""
        if listener in self.listeners:
            self.listeners.remove(listener)

    def emit(self, event: RunEvent) -> None:
        """Log a core event (the runtime's ``on_event`` sink)."""
        if self.finished or isinstance(event, RunStarted):
            return  # run_started is logged by the manager, before the task runs
        pb = events_pb2.RunEvent(
            run_id=self.run_id, sequence=len(self.frames) + 1, time=convert.timestamp()
        )
        code = grpc.StatusCode.UNAVAILABLE
        if isinstance(event, RunFailed):
            code = _failure_code(event)
        convert.event_to_pb(event, pb, failure_code=code.value[0])
        self._append(pb)
        if isinstance(event, RunCompleted | RunFailed | RunCancelled):
            self._finish(event, pb, code)

    def emit_started(self) -> None:
        """Log ``run_started`` with the spec as accepted."""
        pb = events_pb2.RunEvent(run_id=self.run_id, sequence=1, time=convert.timestamp())
        pb.run_started.spec.CopyFrom(self.spec)
        self._append(pb)

    def _append(self, pb: events_pb2.RunEvent) -> None:
        item = frame(pb)
        self.frames.append(item)
        for listener in tuple(self.listeners):
            listener.push(item)
            if isinstance(listener, Subscriber) and listener.dropped:
                self.listeners.remove(listener)
                self.log.warning("watcher dropped", reason="too far behind")

    def _finish(
        self,
        event: RunCompleted | RunFailed | RunCancelled,
        pb: events_pb2.RunEvent,
        code: grpc.StatusCode,
    ) -> None:
        if isinstance(event, RunCompleted):
            self.state, self.result = COMPLETED, pb.run_completed.result
        elif isinstance(event, RunFailed):
            self.state, self.result = FAILED, pb.run_failed.result
            self.failure = (code, event.message)
        else:
            self.state, self.result = CANCELLED, pb.run_cancelled.result
        self.finished_at = time.monotonic()
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()
        if not self._done.done():
            self._done.set_result(None)
        self.log.info(
            "run finished",
            state=types_pb2.RunState.Name(self.state),
            stop_reason=types_pb2.StopReason.Name(self.result.stop_reason),
            iterations=self.result.iterations,
            tool_calls=len(self.result.tool_call_history),
        )


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
    ) -> None:
        self.max_concurrent_runs = max_concurrent_runs
        self.max_finished_runs = max_finished_runs
        self.finished_run_ttl_s = finished_run_ttl_s
        self.watcher_queue_size = watcher_queue_size
        self.accepting = True
        self._live: dict[str, Run] = {}
        self._finished: collections.OrderedDict[str, Run] = collections.OrderedDict()

    @property
    def live_count(self) -> int:
        """How many runs are in flight."""
        return len(self._live)

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
        self._finished.pop(run_id, None)
        spec.run_id = run_id
        run = Run(run_id, spec)
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
        if not run.finished and run.task is not None:
            run.task.cancel(reason)

    def subscribe(self, run: Run, after_sequence: int) -> Subscriber:
        """A bounded subscriber for a watcher of ``run``."""
        return run.subscribe(after_sequence, self.watcher_queue_size)

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
            if not run.finished:  # cancelled before the loop began
                reason = str(exc.args[0]) if exc.args and exc.args[0] else "cancelled"
                run.emit(RunCancelled(reason, _empty_result(run.run_id, StopReason.CANCELLED)))
        except LLMCallError:
            pass  # the loop has logged run_failed
        except Exception as exc:
            run.log.exception("run crashed")
            if not run.finished:
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
            self._finished.popitem(last=False)
        horizon = time.monotonic() - self.finished_run_ttl_s
        while self._finished:
            oldest = next(iter(self._finished.values()))
            if oldest.finished_at is None or oldest.finished_at > horizon:
                break
            self._finished.popitem(last=False)


def _empty_result(run_id: str, stop_reason: StopReason) -> ToolCallRunResult:
    return ToolCallRunResult("", (), 0, False, stop_reason=stop_reason, run_id=run_id)
