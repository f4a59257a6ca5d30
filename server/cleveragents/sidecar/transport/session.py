"""The ``Session`` RPC: a run whose tools (and optionally LLM) its client hosts.

The first message starts the run. Then two things happen at once, in one task group: the
handler writes the run's frames and invocations as they come, and a reader task hands the
client's answers, approvals and cancellation to the run. When the run's frames are all sent,
the reader is cancelled and awaited. A stream that goes away early leaves its run waiting
for the client to re-attach (``reattach``), when the run waits on that client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import grpc

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.gateway import Gateway, Reattach
from cleveragents.sidecar.gateway.sessions import DEADLINE_SLACK_S, Opened
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.runs import Run, StreamQueue
from cleveragents.sidecar.transport.caller import current_caller
from cleveragents.sidecar.transport.calls import (
    Context,
    Limits,
    abort,
    end_if_lost,
    metadata_of,
    read_start,
)
from cleveragents.sidecar.transport.opening import read_opening
from cleveragents.toolruntime.v1 import session_pb2
from cleveragents.wire import (
    LlmAnswer,
    llm_answer_from_pb,
    response_delta_from_pb,
    session_messages,
    tool_answer_from_pb,
)

__all__ = ["Sessions"]

#: How long after the end of a client's messages its call must end for that end to count as
#: the client going away (it may re-attach) rather than a half-close (the run is cancelled).
_HALF_CLOSE_GRACE_S = 1.0


class Sessions:
    """Serves ``Session`` streams: each asks ``gateway``; ``openings`` parse large schemas."""

    def __init__(
        self,
        gateway: Gateway,
        config: SidecarConfig,
        limits: Limits,
        openings: concurrent.futures.Executor,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self.limits = limits
        self.openings = openings

    async def serve(self, context: Context) -> None:
        """Serve one ``Session`` stream."""
        first = await read_start(context, session_pb2.SessionRequest)
        if first is None:
            return
        start, caller, gateway = first.start, current_caller(), self.gateway
        hosts = bool(start.tools) or start.client_llm
        try:
            if start.handles_approvals:
                gateway.check_self_approval(caller)
            if start.reattach_run_id:
                run, host = await gateway.reattach(caller, self._reattach(start))
            else:
                opening, host = await self._open(start)
                run = await gateway.start(
                    caller,
                    opening.request,
                    deadline_s=context.time_remaining(),
                    metadata=metadata_of(context),
                    sink=host.outbox,
                    host=host,
                    client_tools=opening.tools,
                    client_llm=opening.client_llm,
                    answers_approvals=opening.handles_approvals,
                    spec_bytes=start.spec.ByteSize(),
                )
                host.attach(run.log)
        except SidecarError as exc:
            await abort(context, exc)
        if host is not None and start.stream_deltas:
            run.log.stream_deltas(host.outbox)
        limit = self.limits.batch if start.batch_events else 0
        if host is None:  # re-attached to a run that has ended: the rest of its log
            ended = StreamQueue()
            for item in run.log.frames[start.after_sequence :]:
                ended.push(item)
            ended.close()
            while items := await ended.get_many(limit):
                for message in session_messages(items):
                    await context.write(message)
            return
        await self._pump(context, run, host, hosts, limit)

    async def _open(self, start: session_pb2.SessionStart) -> Opened:
        return await read_opening(start, self.config, self.limits.frame, self.openings)

    def _reattach(self, start: session_pb2.SessionStart) -> Reattach:
        """The re-attach ``start`` asks for, as the gateway takes it."""

        async def open_for(prompt: str) -> Opened:
            if not start.spec.prompt:  # the spec is the run's own; only the tools are new
                start.spec.prompt = prompt
            return await self._open(start)

        names = tuple(tool.name for tool in start.tools)
        return Reattach(start.reattach_run_id, start.after_sequence, names, open_for)

    async def _pump(
        self, context: Context, run: Run, host: ClientHost, hosts: bool, limit: int
    ) -> None:
        """Write the run's frames and invocations while a reader hands the client's answers
        on."""
        reader = _Reader(self.gateway, self.config, context, host, run, hosts)
        finished = False
        try:
            async with asyncio.TaskGroup() as group:
                reading = group.create_task(reader.read())
                try:
                    while items := await host.outbox.get_many(limit):
                        for message in session_messages(items):
                            await context.write(message)
                    finished = True
                finally:
                    reading.cancel()
        except BaseExceptionGroup as failure:  # the writer's own error, not a group's
            raise failure.exceptions[0] from None
        finally:
            # Nobody reads the outbox any more: no frames for it, its approvals go unanswered.
            run.log.unsubscribe(host.outbox)
            if not finished:
                self.gateway.session_gone(run, host, context.time_remaining(), hosts)
        if host.violation is not None:
            await abort(context, host.violation)
        await end_if_lost(run, context)


async def _went_away(context: Context) -> bool:
    """Whether the end of the client's messages is its call ending (a dropped connection, or
    a cancel), not a half-close: gRPC shows both as EOF, and only the first ends the call."""
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(ctx: Context) -> None:
        if not ended.done():
            ended.set_result(None)

    context.add_done_callback(done)  # type: ignore[arg-type]  # a Protocol in grpc-stubs
    try:
        await asyncio.wait_for(ended, _HALF_CLOSE_GRACE_S)
    except TimeoutError:
        return False
    return True


class _Reader:
    """Reads the client's messages for the run until EOF or a protocol violation."""

    def __init__(
        self,
        gateway: Gateway,
        config: SidecarConfig,
        context: Context,
        host: ClientHost,
        run: Run,
        hosts: bool,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self.context = context
        self.host = host
        self.run = run
        self.hosts = hosts

    async def read(self) -> None:
        """Hand each message to the run; a violation cancels it and ends the reading."""
        run, host, gateway = self.run, self.host, self.gateway
        while True:
            message = await self.context.read()
            if message is grpc.aio.EOF:
                remaining = self.context.time_remaining()
                at_deadline = remaining is not None and remaining <= DEADLINE_SLACK_S
                if self.hosts and not run.ended and not at_deadline:
                    waits = self.config.session_reattach_s > 0
                    if waits and await _went_away(self.context):
                        return  # not a half-close: ``session_gone`` lets the run wait
                    gateway.stop(run, "the client closed its side of the session")
                return
            try:
                self._handle(message)
            except SidecarError as exc:
                run.logger.warning("session protocol error", error=exc.message)
                host.violation = exc
                gateway.stop(run, f"session protocol error: {exc.message}")
                return

    def _llm_answer(self, result: session_pb2.LlmResult) -> LlmAnswer:
        """The client LLM's answer; one asking for too many calls is not even converted."""
        cap = self.config.limits.max_calls_per_response
        if len(result.tool_calls) > cap:
            return LlmAnswer(
                result.request_id,
                error=f"it asked for {len(result.tool_calls)} tool calls in one response, more "
                f"than this sidecar's max_calls_per_response of {cap}",
            )
        return llm_answer_from_pb(result)

    def _handle(self, message: Any) -> None:
        run, host = self.run, self.host
        if not isinstance(message, session_pb2.SessionRequest):  # did not parse
            raise SidecarError.invalid(str(message.message))
        kind = message.WhichOneof("kind")
        if kind == "tool_result":
            host.resolve_tool(tool_answer_from_pb(message.tool_result))
        elif kind == "llm_delta":
            delta = message.llm_delta
            host.stream_llm(delta.request_id, delta.index, response_delta_from_pb(delta))
        elif kind == "llm_deltas":  # each as if it came alone, in order
            for delta in message.llm_deltas.deltas:
                host.stream_llm(delta.request_id, delta.index, response_delta_from_pb(delta))
        elif kind == "llm_result":
            host.resolve_llm(self._llm_answer(message.llm_result))
        elif kind == "cancel":
            self.gateway.stop(run, message.cancel.reason or "cancelled by the client")
        elif kind == "approval_decision":
            decision = message.approval_decision
            if run.approvals is None:  # pragma: no cover - every run has a broker
                raise SidecarError.out_of_order("this run has no approvals")
            run.approvals.decide(
                decision.call_id, decision.approved, decision.reason, "session", run.owner
            )
        elif kind == "start":
            raise SidecarError.out_of_order("the session has already started")
        else:
            raise SidecarError.invalid("empty SessionRequest: set one of its fields")
