"""``AsyncSidecarClient``: the asyncio client of the sidecar."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any, TypeVar, Unpack

import grpc
from grpc_health.v1 import health_pb2_grpc

from cleveragents.client._ready import HEALTH_REQUEST, RECONNECT_OPTIONS, ReadyPoll
from cleveragents.client.eager import Finished, Resumed, started
from cleveragents.client.errors import RunFailedError, SidecarRpcError, rpc_errors
from cleveragents.client.exchange import (
    EventDecoder,
    RunOptions,
    Tools,
    auth_metadata,
    event_with_history,
    follow_ack,
    follow_start,
    history_records,
    next_page_after,
    omits_history,
    run_spec,
    with_history,
)
from cleveragents.client.output import OutputSpec, OutputType, output_type_of
from cleveragents.client.session_logic import LEAVING, Job, SessionApprover, SessionLogic
from cleveragents.client.typed_runs import AsyncTypedRuns
from cleveragents.client.types import RunInfo, RunSummary, StreamedEvent
from cleveragents.tool import LLMCaller, ToolCallRecord, ToolCallRunResult, ToolSpec
from cleveragents.toolruntime.v1 import (
    events_pb2,
    service_pb2,
    service_pb2_grpc,
    session_pb2,
    types_pb2,
)
from cleveragents.wire import (
    events_of,
    result_from_pb,
    run_info_from_pb,
    run_state_from_pb,
    spec_from_pb,
    summary_from_pb,
)

__all__ = ["AsyncSidecarClient"]

Metadata = Sequence[tuple[str, str]]
T = TypeVar("T")


class AsyncSidecarClient(AsyncTypedRuns):
    """Talks to a sidecar at ``target`` (``host:port`` or ``unix:/path``) from asyncio code.

    Results and events come back as the core's dataclasses. A non-OK status raises
    :class:`SidecarRpcError`; a run that fails raises :class:`RunFailedError`. ``token`` is
    the sidecar's shared auth token; ``credentials`` (``grpc.ssl_channel_credentials``) turn
    on TLS.
    """

    def __init__(
        self,
        target: str = "",
        *,
        channel: grpc.aio.Channel | None = None,
        metadata: Metadata = (),
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        max_message_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        if channel is None and not target:
            raise ValueError("give a target address or a channel")
        self._owns_channel = channel is None
        if channel is None:
            # Receive what the sidecar may send (its max_message_bytes, 16 MiB by default).
            options = [("grpc.max_receive_message_length", max_message_bytes)]
            options += RECONNECT_OPTIONS  # a sidecar still starting is seen promptly
            channel = (
                grpc.aio.insecure_channel(target, options=options)
                if credentials is None
                else grpc.aio.secure_channel(target, credentials, options=options)
            )
        self._target = target
        self._channel = channel
        self._stub = service_pb2_grpc.ToolRuntimeServiceStub(self._channel)
        self._metadata = tuple(metadata) + auth_metadata(token)

    async def close(self) -> None:
        """Close the channel (if this client opened it)."""
        if self._owns_channel:
            await self._channel.close()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the sidecar serves runs: for a runtime that has just started it.

        Asks the standard health service (no token needed) until the sidecar's service is
        ``SERVING``, connecting again while nothing listens yet. Raises ``SidecarRpcError``
        (``DEADLINE_EXCEEDED``, saying what it saw last) if that takes over ``timeout`` s.
        """
        poll = ReadyPoll(self._target, timeout)
        health: Any = health_pb2_grpc.HealthStub(self._channel)  # its stubs lack Check
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                response = await health.Check(HEALTH_REQUEST, timeout=left, wait_for_ready=True)
            except grpc.RpcError as exc:
                if (error := poll.failed(exc)) is not None:
                    raise error from None
            else:
                if poll.answered(response):
                    return
            await asyncio.sleep(poll.next_pause(deadline - loop.time()))
        raise poll.not_ready()

    async def __aenter__(self) -> AsyncSidecarClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _run_spec(self, spec: types_pb2.RunSpec, timeout: float | None) -> ToolCallRunResult:
        """Send ``spec`` with RunToolLoop; the result, its records read by pages if need be."""
        request = service_pb2.RunToolLoopRequest(spec=spec)
        try:
            with rpc_errors():
                response = await self._stub.RunToolLoop(
                    request, metadata=self._metadata, timeout=timeout
                )
        except RunFailedError as exc:
            if exc.history_omitted:  # the partial result's records, read by pages
                exc.result = with_history(exc.result, await self._records(exc.result.run_id))
            raise
        if omits_history(response.result):  # too large for one message: read by pages
            return with_history(response.result, await self._records(response.result.run_id))
        return result_from_pb(response.result)

    async def stream_tool_loop(
        self,
        prompt: str,
        *,
        detach: bool = False,
        timeout: float | None = None,
        stream_deltas: bool = False,
        output_type: OutputSpec | OutputType[Any] | None = None,
        **options: Unpack[RunOptions],
    ) -> AsyncGenerator[StreamedEvent, None]:
        """Start a run and yield its events as they happen, ending with the terminal one;
        with ``stream_deltas``, also each ``LLMDelta`` of the model's answer as it streams.
        With ``output_type`` (as for ``run_tool_loop``), the terminal event's result is a
        ``TypedResult`` of it."""
        output = output_type_of(output_type)
        spec = run_spec(prompt, detach=detach, output_type=output, **options)
        call = self._stub.StreamToolLoop(
            service_pb2.StreamToolLoopRequest(
                spec=spec, batch_events=True, stream_deltas=stream_deltas
            ),
            metadata=self._metadata,
            timeout=timeout,
        )
        async for event in self._events(call, output=output):
            yield event

    async def watch(
        self, run_id: str, *, after_sequence: int = 0, stream_deltas: bool = False
    ) -> AsyncGenerator[StreamedEvent, None]:
        """Follow a run from ``after_sequence``: what was missed, then live, to its end.

        Each event counts as handled (and is acknowledged to the sidecar, which sends no more
        than its window ahead of that) once the next one is asked for. With
        ``stream_deltas``, also each ``LLMDelta`` (sequence 0) of the model's answer: joining
        mid-call, first the answer so far as one delta. ``LLMResponded`` supersedes its call's
        deltas: show them as a preview and replace them with its content. Rejoining after a
        call ended brings that call's kept deltas again from index 0, or none once they are
        gone, never the rest later.
        """
        call = self._stub.FollowRun(metadata=self._metadata)
        with rpc_errors():
            await call.write(follow_start(run_id, after_sequence, stream_deltas))
        async for event in self._events(call, follows=True, after=after_sequence):
            yield event

    async def get_run(self, run_id: str) -> RunInfo:
        """A run's state, last sequence and (once ended) result."""
        with rpc_errors():
            response = await self._stub.GetRun(
                service_pb2.GetRunRequest(run_id=run_id), metadata=self._metadata
            )
        info = run_info_from_pb(response)
        if info.result is not None and omits_history(response.result):
            records = await self._records(run_id)
            info = dataclasses.replace(info, result=with_history(info.result, records))
        return info

    async def run_history(
        self, run_id: str, *, after_sequence: int = 0, max_bytes: int = 0
    ) -> AsyncGenerator[StreamedEvent, None]:
        """The events of a run's log after ``after_sequence``, as stored now, read page by
        page (GetRunHistory, ``max_bytes`` a page; 0: the sidecar's page size). Every page is
        one bounded message: any run can be read back this way, however long it was."""
        decode = EventDecoder()
        async for event in self._history(run_id, after_sequence, max_bytes):
            yield decode(event)

    async def _history(
        self, run_id: str, after: int | None, max_bytes: int = 0
    ) -> AsyncIterator[events_pb2.RunEvent]:
        while after is not None:
            request = service_pb2.GetRunHistoryRequest(
                run_id=run_id, after_sequence=after, max_bytes=max_bytes
            )
            with rpc_errors():
                page = await self._stub.GetRunHistory(request, metadata=self._metadata)
            for event in page.events:
                yield event
            after = next_page_after(page, after)

    async def _records(self, run_id: str) -> list[ToolCallRecord]:
        """Every record of a run, from its history (for a result that came without them)."""
        return history_records([event async for event in self._history(run_id, 0)])

    async def cancel_run(self, run_id: str, *, reason: str = "") -> str:
        """Cancel a run; returns its state afterwards (``cancelled`` unless it had ended)."""
        with rpc_errors():
            response = await self._stub.CancelRun(
                service_pb2.CancelRunRequest(run_id=run_id, reason=reason), metadata=self._metadata
            )
        return run_state_from_pb(response.state)

    async def list_tools(self) -> list[ToolSpec]:
        """The sidecar's own tools."""
        with rpc_errors():
            response = await self._stub.ListTools(
                service_pb2.ListToolsRequest(), metadata=self._metadata
            )
        return [spec_from_pb(t) for t in response.tools]

    async def decide_approval(
        self, run_id: str, call_id: str, *, approved: bool, reason: str = ""
    ) -> None:
        """Approve or deny a tool call of ``run_id`` that waits for approval."""
        request = service_pb2.DecideApprovalRequest(
            run_id=run_id, call_id=call_id, approved=approved, reason=reason
        )
        with rpc_errors():
            await self._stub.DecideApproval(request, metadata=self._metadata)

    async def list_runs(self, *, limit: int = 100) -> list[RunSummary]:
        """Live runs and the finished runs the sidecar keeps, newest first."""
        with rpc_errors():
            response = await self._stub.ListRuns(
                service_pb2.ListRunsRequest(limit=limit), metadata=self._metadata
            )
        return [summary_from_pb(s) for s in response.runs]

    async def session(
        self,
        prompt: str,
        *,
        tools: Tools = (),
        llm: LLMCaller | None = None,
        approver: SessionApprover | None = None,
        timeout: float | None = None,
        stream_deltas: bool = False,
        reattach: bool = False,
        reattach_timeout: float = 60.0,
        output_type: OutputSpec | OutputType[Any] | None = None,
        **options: Unpack[RunOptions],
    ) -> AsyncGenerator[StreamedEvent, None]:
        """Run a loop whose tools (and, with ``llm``, whose LLM) live in this process.

        ``tools`` is a ``ToolRegistry`` or plain functions; the sidecar calls them back over
        the stream, concurrently when the model asks for several at once. ``approver``
        decides the run's approval requests (``True``/``False`` or an ``ApprovalDecision``,
        directly or awaited). Yields every event. Leaving the iteration early cancels the run,
        and the work still running for it.

        With ``reattach``, a stream that breaks (the connection dropped, the sidecar
        restarted) is opened again for up to ``reattach_timeout`` seconds from the break
        (counted anew once a stream delivers again) and re-attaches to the run after the last
        event yielded: the same tools serve it, a call still running goes on, and one
        answered already is answered again, not run twice.
        """
        logic = SessionLogic(
            prompt, tools=tools, llm=llm, approver=approver, options=dict(options),
            stream_deltas=stream_deltas, output_type=output_type_of(output_type),
        )  # fmt: skip
        call = self._stub.Session(metadata=self._metadata, timeout=timeout)
        lock = asyncio.Lock()
        pending: set[asyncio.Task[None]] = set()

        async def send(message: session_pb2.SessionRequest) -> None:
            await lock.acquire()  # not ``async with``: two coroutines fewer a message
            try:
                await call.write(message)  # the current stream, a re-attached one included
            finally:
                lock.release()

        async def work(job: Job) -> None:
            key = job.key
            answer = logic.answered(job)
            if answer is None:
                logic.working.add(key)
                try:
                    answer = await logic.answer(job, send)
                finally:
                    logic.working.discard(key)
                logic.remember(job, answer)
            await send(answer)

        def settled(task: asyncio.Task[None]) -> None:
            pending.discard(task)
            if not task.cancelled():
                task.exception()  # a late answer to a call that has ended: nothing to do

        def spawn(job: Job) -> None:
            task = asyncio.create_task(work(job))
            pending.add(task)
            task.add_done_callback(settled)

        async def finish(job: Job, rest: Resumed[session_pb2.SessionRequest]) -> None:
            try:
                answer = await logic.bounded(job, rest)
            finally:
                logic.working.discard(job.key)
            logic.remember(job, answer)
            await send(answer)

        def begin(job: Job) -> session_pb2.SessionRequest | None:
            """``job``'s answer, to be sent now, if it is known already or its work is done
            at once (an instant tool's, started in a context of its own as a task's would
            be); else its work goes on in a task, which sends the answer."""
            answer = logic.answered(job)
            if answer is not None:
                return answer
            if not logic.instant(job):
                spawn(job)
                return None
            context = contextvars.copy_context()
            # A tool's failure is its answer already: what raises here is this client's own
            # fault, and ends the session with it rather than leave the sidecar waiting.
            step = context.run(started, logic.work(job, send))
            if isinstance(step, Finished):
                logic.remember(job, step.value)
                return step.value
            logic.working.add(job.key)  # it waited after all: a task finishes it
            task = asyncio.create_task(finish(job, step), context=context)
            pending.add(task)
            task.add_done_callback(settled)
            return None

        finished, first, attempt = False, logic.start, 0
        loop = asyncio.get_running_loop()
        give_up_at: float | None = None  # the window counts from the break, not the start
        try:
            while not finished:
                try:
                    with rpc_errors():
                        await send(first)
                        async for response in call:
                            attempt, give_up_at = 0, None
                            # The events batched with an invocation come before it, but the
                            # sidecar waits on the invocation alone: an instant tool's answer
                            # is sent, or another job's task gets one turn (to run a quick
                            # call and send the answer), before the events are converted and
                            # handed out. Tasks start in the order spawned: LLM invocations
                            # extend the conversation in order.
                            job = logic.invocation(response)
                            if job is not None:
                                if (answer := begin(job)) is not None:
                                    # A failed write is a failed task's: reading on says how
                                    # the call ended (a try costs nothing until it raises).
                                    try:  # noqa: SIM105
                                        await send(answer)
                                    except (grpc.RpcError, asyncio.InvalidStateError):
                                        pass
                                elif response.events:
                                    await asyncio.sleep(0)
                            for streamed, approval in logic.events(response):
                                if approval is not None:
                                    spawn(approval)
                                yield streamed
                    finished = True
                except SidecarRpcError as exc:
                    wait = logic.retry_after(exc.code, str(exc), attempt) if reattach else None
                    if give_up_at is None:  # the first failure since a message came
                        give_up_at = loop.time() + reattach_timeout
                    if wait is None or loop.time() + wait > give_up_at:
                        raise
                    await asyncio.sleep(wait)  # a backoff between attempts, not a sync point
                    attempt += 1
                    first = logic.reattach_start()
                    call = self._stub.Session(metadata=self._metadata, timeout=timeout)
        finally:
            if not finished:  # left early: the run is cancelled, not left waiting for us
                with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                    await asyncio.wait_for(send(LEAVING), 1.0)
            call.cancel()
            for task in pending:
                task.cancel()
            # Every task is awaited: none outlives the session.
            await asyncio.gather(*pending, return_exceptions=True)

    async def _events(
        self,
        call: Any,
        *,
        follows: bool = False,
        after: int = 0,
        output: OutputType[Any] | None = None,
    ) -> AsyncGenerator[StreamedEvent, None]:
        """The events of a streaming ``call``; a ``FollowRun`` call (``follows``, from after
        sequence ``after``) is acked; ``output`` types the terminal event's result."""
        decode, handled = EventDecoder(output), after
        try:
            with rpc_errors():
                async for response in call:
                    events = response.events if follows else events_of(response)
                    for event in events:
                        streamed = decode(event)
                        if decode.missing_history(event):
                            records = await self._records(event.run_id)
                            streamed = dataclasses.replace(
                                streamed, event=event_with_history(streamed.event, records)
                            )
                        yield streamed
                        handled = event.sequence or handled  # a delta has sequence 0
                    if follows and (ack := follow_ack(response, handled)) is not None:
                        # The call may have ended meanwhile; reading on reports how.
                        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                            await call.write(ack)
        finally:
            call.cancel()
