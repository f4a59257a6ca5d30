"""``SidecarClient``: the blocking client of the sidecar, on a plain gRPC channel."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, TypeVar, Unpack

import grpc
from grpc_health.v1 import health_pb2_grpc

from cleveragents.client._ready import HEALTH_REQUEST, RECONNECT_OPTIONS, ReadyPoll
from cleveragents.client._streams import OpenStreams
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
from cleveragents.client.typed_runs import TypedRuns
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

__all__ = ["SidecarClient"]

Metadata = Sequence[tuple[str, str]]
T = TypeVar("T")
#: A session's call and the queue of the messages its request thread sends.
_SessionCall = tuple[Any, "queue.SimpleQueue[session_pb2.SessionRequest | None]"]
#: How long leaving a session early waits for the sidecar to read the cancel it was sent.
_LEAVING_S = 1.0


class SidecarClient(TypedRuns):
    """Talks to a sidecar at ``target`` (``host:port`` or ``unix:/path``), blocking.

    The same calls as :class:`AsyncSidecarClient`; streams are plain iterators. In a
    ``session`` the client's tools run one at a time in the calling thread: use the asyncio
    client when the model's parallel calls should run concurrently.
    """

    def __init__(
        self,
        target: str = "",
        *,
        channel: grpc.Channel | None = None,
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
                grpc.insecure_channel(target, options=options)
                if credentials is None
                else grpc.secure_channel(target, credentials, options=options)
            )
        self._target = target
        self._channel = channel
        self._stub = service_pb2_grpc.ToolRuntimeServiceStub(self._channel)
        self._metadata = tuple(metadata) + auth_metadata(token)
        #: The ``watch`` and ``session`` streams under way, which ``close`` ends.
        self._open = OpenStreams()

    def close(self) -> None:
        """End the ``watch`` and ``session`` streams still open (their threads with them),
        then close the channel (if this client opened it)."""
        self._open.close_all()
        if self._owns_channel:
            self._channel.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the sidecar serves runs: for a runtime that has just started it.

        Asks the standard health service (no token needed) until the sidecar's service is
        ``SERVING``, connecting again while nothing listens yet. Raises ``SidecarRpcError``
        (``DEADLINE_EXCEEDED``, saying what it saw last) if that takes over ``timeout`` s.
        """
        poll = ReadyPoll(self._target, timeout)
        health: Any = health_pb2_grpc.HealthStub(self._channel)  # its stubs lack Check
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                response = health.Check(HEALTH_REQUEST, timeout=left, wait_for_ready=True)
            except grpc.RpcError as exc:
                if (error := poll.failed(exc)) is not None:
                    raise error from None
            else:
                if poll.answered(response):
                    return
            time.sleep(poll.next_pause(deadline - time.monotonic()))
        raise poll.not_ready()

    def __enter__(self) -> SidecarClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run_spec(self, spec: types_pb2.RunSpec, timeout: float | None) -> ToolCallRunResult:
        """Send ``spec`` with RunToolLoop; the result, its records read by pages if need be."""
        request = service_pb2.RunToolLoopRequest(spec=spec)
        try:
            with rpc_errors():
                response = self._stub.RunToolLoop(request, metadata=self._metadata, timeout=timeout)
        except RunFailedError as exc:
            if exc.history_omitted:  # the partial result's records, read by pages
                exc.result = with_history(exc.result, self._records(exc.result.run_id))
            raise
        if omits_history(response.result):  # too large for one message: read by pages
            return with_history(response.result, self._records(response.result.run_id))
        return result_from_pb(response.result)

    def stream_tool_loop(
        self,
        prompt: str,
        *,
        detach: bool = False,
        timeout: float | None = None,
        stream_deltas: bool = False,
        output_type: OutputSpec | OutputType[Any] | None = None,
        **options: Unpack[RunOptions],
    ) -> Generator[StreamedEvent, None, None]:
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
        return self._events(call, output=output)

    def watch(
        self, run_id: str, *, after_sequence: int = 0, stream_deltas: bool = False
    ) -> Generator[StreamedEvent, None, None]:
        """Follow a run from ``after_sequence``: what was missed, then live, to its end.

        Each event counts as handled (and is acknowledged to the sidecar, which sends no more
        than its window ahead of that) once the next one is asked for. With
        ``stream_deltas``, also each ``LLMDelta`` (sequence 0) of the model's answer: joining
        mid-call, first the answer so far as one delta. ``LLMResponded`` supersedes its
        call's deltas (see ``AsyncSidecarClient.watch``). The call starts at the first
        ``next``; one left part way ends when the iterator is closed or collected, or the
        client is closed.
        """
        return self._follow(run_id, after_sequence, stream_deltas)

    def _follow(
        self, run_id: str, after_sequence: int, stream_deltas: bool
    ) -> Generator[StreamedEvent, None, None]:
        outgoing: queue.SimpleQueue[service_pb2.FollowRunRequest | None] = queue.SimpleQueue()
        outgoing.put(follow_start(run_id, after_sequence, stream_deltas))

        def requests() -> Iterator[service_pb2.FollowRunRequest]:
            while (message := outgoing.get()) is not None:
                yield message

        call = self._stub.FollowRun(requests(), metadata=self._metadata)
        yield from self._events(call, outgoing, after_sequence)

    def get_run(self, run_id: str) -> RunInfo:
        """A run's state, last sequence and (once ended) result."""
        with rpc_errors():
            response = self._stub.GetRun(
                service_pb2.GetRunRequest(run_id=run_id), metadata=self._metadata
            )
        info = run_info_from_pb(response)
        if info.result is not None and omits_history(response.result):
            records = self._records(run_id)
            info = dataclasses.replace(info, result=with_history(info.result, records))
        return info

    def run_history(
        self, run_id: str, *, after_sequence: int = 0, max_bytes: int = 0
    ) -> Iterator[StreamedEvent]:
        """The events of a run's log after ``after_sequence``, as stored now, read page by
        page (GetRunHistory, ``max_bytes`` a page; 0: the sidecar's page size). Every page is
        one bounded message: any run can be read back this way, however long it was."""
        decode = EventDecoder()
        return (decode(e) for e in self._history(run_id, after_sequence, max_bytes))

    def _history(
        self, run_id: str, after: int | None, max_bytes: int = 0
    ) -> Iterator[events_pb2.RunEvent]:
        while after is not None:
            request = service_pb2.GetRunHistoryRequest(
                run_id=run_id, after_sequence=after, max_bytes=max_bytes
            )
            with rpc_errors():
                page = self._stub.GetRunHistory(request, metadata=self._metadata)
            yield from page.events
            after = next_page_after(page, after)

    def _records(self, run_id: str) -> list[ToolCallRecord]:
        """Every record of a run, from its history (for a result that came without them)."""
        return history_records(self._history(run_id, 0))

    def cancel_run(self, run_id: str, *, reason: str = "") -> str:
        """Cancel a run; returns its state afterwards (``cancelled`` unless it had ended)."""
        with rpc_errors():
            response = self._stub.CancelRun(
                service_pb2.CancelRunRequest(run_id=run_id, reason=reason), metadata=self._metadata
            )
        return run_state_from_pb(response.state)

    def list_tools(self) -> list[ToolSpec]:
        """The sidecar's own tools."""
        with rpc_errors():
            response = self._stub.ListTools(service_pb2.ListToolsRequest(), metadata=self._metadata)
        return [spec_from_pb(t) for t in response.tools]

    def decide_approval(
        self, run_id: str, call_id: str, *, approved: bool, reason: str = ""
    ) -> None:
        """Approve or deny a tool call of ``run_id`` that waits for approval."""
        request = service_pb2.DecideApprovalRequest(
            run_id=run_id, call_id=call_id, approved=approved, reason=reason
        )
        with rpc_errors():
            self._stub.DecideApproval(request, metadata=self._metadata)

    def list_runs(self, *, limit: int = 100) -> list[RunSummary]:
        """Live runs and the finished runs the sidecar keeps, newest first."""
        with rpc_errors():
            response = self._stub.ListRuns(
                service_pb2.ListRunsRequest(limit=limit), metadata=self._metadata
            )
        return [summary_from_pb(s) for s in response.runs]

    def session(
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
    ) -> Generator[StreamedEvent, None, None]:
        """Run a loop whose tools (and, with ``llm``, whose LLM) live in this process.

        Yields every event; tools and the LLM are called in this thread as the sidecar asks.
        The run starts at the first ``next``. Leaving the iteration early (closing the
        iterator, dropping it, or closing the client) cancels the run. With ``reattach``, a
        stream that breaks is opened again for up to ``reattach_timeout`` seconds from the
        break and re-attaches to the run after the last event yielded (as
        ``AsyncSidecarClient.session`` does).
        """
        logic = SessionLogic(
            prompt, tools=tools, llm=llm, approver=approver, options=dict(options),
            stream_deltas=stream_deltas, output_type=output_type_of(output_type),
        )  # fmt: skip

        def open_call(first: session_pb2.SessionRequest) -> _SessionCall:
            outgoing: queue.SimpleQueue[session_pb2.SessionRequest | None] = queue.SimpleQueue()
            outgoing.put(first)

            def requests() -> Iterator[session_pb2.SessionRequest]:
                return logic.requests(outgoing)

            return self._stub.Session(
                requests(), metadata=self._metadata, timeout=timeout
            ), outgoing

        return self._session(open_call, logic, reattach_timeout if reattach else None)

    def _session(
        self,
        open_call: Callable[[session_pb2.SessionRequest], _SessionCall],
        logic: SessionLogic,
        reattach_s: float | None,
    ) -> Generator[StreamedEvent, None, None]:
        loop = asyncio.new_event_loop()
        call, outgoing = open_call(logic.start)
        stop = self._open.opened(outgoing, call)
        finished, attempt = False, 0
        give_up_at: float | None = None  # the window counts from the break, not the start

        def send(message: session_pb2.SessionRequest) -> None:
            outgoing.put(message)  # the current stream's queue, a re-attached one's included

        def answer(job: Job) -> session_pb2.SessionRequest:
            done = logic.answered(job)
            if done is None:
                done = loop.run_until_complete(logic.answer(job, send, threadsafe=True))
                logic.remember(job, done)
            return done

        try:
            while not finished:
                try:
                    with rpc_errors():
                        for response in call:
                            attempt, give_up_at = 0, None
                            for streamed, approval in logic.events(response):  # before the job
                                if approval is not None:
                                    outgoing.put(answer(approval))
                                yield streamed
                            job = logic.invocation(response)
                            if job is not None:
                                outgoing.put(answer(job))
                    finished = True
                except SidecarRpcError as exc:
                    wait = None
                    if reattach_s is not None and stop in self._open:  # not closed by close()
                        wait = logic.retry_after(exc.code, str(exc), attempt)
                    if give_up_at is None:  # the first failure since a message came
                        give_up_at = time.monotonic() + (reattach_s or 0.0)
                    if wait is None or time.monotonic() + wait > give_up_at:
                        raise
                    time.sleep(wait)  # a backoff between attempts, not a sync point
                    self._open.closed(stop)
                    attempt += 1
                    call, outgoing = open_call(logic.reattach_start())
                    stop = self._open.opened(outgoing, call)
        finally:
            if not finished:  # left early: the run is cancelled, not left waiting for us
                outgoing.put(LEAVING)
                outgoing.put(None)
                with contextlib.suppress(Exception):
                    call.exception(timeout=_LEAVING_S)  # the sidecar ends the call once it read it
            self._open.closed(stop)
            loop.close()

    def _events(
        self,
        call: Any,
        acks: queue.SimpleQueue[service_pb2.FollowRunRequest | None] | None = None,
        after: int = 0,
        output: OutputType[Any] | None = None,
    ) -> Generator[StreamedEvent, None, None]:
        """The events of a streaming ``call``; a ``FollowRun`` call's acks (from after sequence
        ``after``) go to ``acks``; ``output`` types the terminal event's result."""
        decode, handled = EventDecoder(output), after
        stop = self._open.opened(acks, call)
        try:
            with rpc_errors():
                for response in call:
                    events = response.events if acks is not None else events_of(response)
                    for event in events:
                        streamed = decode(event)
                        if decode.missing_history(event):
                            records = self._records(event.run_id)
                            streamed = dataclasses.replace(
                                streamed, event=event_with_history(streamed.event, records)
                            )
                        yield streamed
                        handled = event.sequence or handled  # a delta has sequence 0
                    if acks is not None and (ack := follow_ack(response, handled)) is not None:
                        acks.put(ack)
        finally:
            self._open.closed(stop)
