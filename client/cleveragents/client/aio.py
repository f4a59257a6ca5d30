"""``AsyncSidecarClient``: the asyncio client of the sidecar."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Unpack

import grpc

from cleveragents.client import _wire
from cleveragents.client._wire import RunOptions, Tools
from cleveragents.client.errors import SidecarRpcError
from cleveragents.client.types import RunInfo, RunSummary, StreamedEvent
from cleveragents.sidecar import convert
from cleveragents.tool import (
    ApprovalDecision,
    ApprovalRequested,
    LLMCaller,
    LLMResponse,
    ToolCallRunResult,
    ToolRunner,
    ToolSpec,
)
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, session_pb2

__all__ = ["AsyncSidecarClient"]

Metadata = Sequence[tuple[str, str]]


class AsyncSidecarClient:
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
            channel = (
                grpc.aio.insecure_channel(target, options=options)
                if credentials is None
                else grpc.aio.secure_channel(target, credentials, options=options)
            )
        self._channel = channel
        self._stub = service_pb2_grpc.ToolRuntimeServiceStub(self._channel)
        self._metadata = tuple(metadata) + _wire.auth_metadata(token)

    async def close(self) -> None:
        """Close the channel (if this client opened it)."""
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> AsyncSidecarClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def run_tool_loop(
        self,
        prompt: str,
        *,
        detach: bool = False,
        timeout: float | None = None,
        **options: Unpack[RunOptions],
    ) -> ToolCallRunResult:
        """Run the loop with the sidecar's tools and LLM profile; return the result."""
        spec = _wire.run_spec(prompt, detach=detach, **options)
        try:
            response = await self._stub.RunToolLoop(
                service_pb2.RunToolLoopRequest(spec=spec),
                metadata=self._metadata,
                timeout=timeout,
            )
        except grpc.RpcError as exc:
            raise _wire.rpc_error(exc) from None
        return convert.result_from_pb(response.result)

    async def stream_tool_loop(
        self,
        prompt: str,
        *,
        detach: bool = False,
        timeout: float | None = None,
        **options: Unpack[RunOptions],
    ) -> AsyncGenerator[StreamedEvent, None]:
        """Start a run and yield its events as they happen, ending with the terminal one."""
        spec = _wire.run_spec(prompt, detach=detach, **options)
        call = self._stub.StreamToolLoop(
            service_pb2.StreamToolLoopRequest(spec=spec, batch_events=True),
            metadata=self._metadata,
            timeout=timeout,
        )
        async for event in self._events(call):
            yield event

    async def watch(
        self, run_id: str, *, after_sequence: int = 0
    ) -> AsyncGenerator[StreamedEvent, None]:
        """Follow a run from ``after_sequence``: what was missed, then live, to its end."""
        call = self._stub.WatchRun(
            service_pb2.WatchRunRequest(
                run_id=run_id, after_sequence=after_sequence, batch_events=True
            ),
            metadata=self._metadata,
        )
        async for event in self._events(call):
            yield event

    async def get_run(self, run_id: str) -> RunInfo:
        """A run's state, last sequence and (once ended) result."""
        try:
            response = await self._stub.GetRun(
                service_pb2.GetRunRequest(run_id=run_id), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return _wire.run_info(response)

    async def cancel_run(self, run_id: str, *, reason: str = "") -> str:
        """Cancel a run; returns its state afterwards (``cancelled`` unless it had ended)."""
        try:
            response = await self._stub.CancelRun(
                service_pb2.CancelRunRequest(run_id=run_id, reason=reason), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return _wire.state_name(response.state)

    async def list_tools(self) -> list[ToolSpec]:
        """The sidecar's own tools."""
        try:
            response = await self._stub.ListTools(
                service_pb2.ListToolsRequest(), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return [convert.spec_from_pb(t) for t in response.tools]

    async def decide_approval(
        self, run_id: str, call_id: str, *, approved: bool, reason: str = ""
    ) -> None:
        """Approve or deny a tool call of ``run_id`` that waits for approval."""
        request = service_pb2.DecideApprovalRequest(
            run_id=run_id, call_id=call_id, approved=approved, reason=reason
        )
        try:
            await self._stub.DecideApproval(request, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None

    async def list_runs(self, *, limit: int = 100) -> list[RunSummary]:
        """Live runs and the finished runs the sidecar keeps, newest first."""
        try:
            response = await self._stub.ListRuns(
                service_pb2.ListRunsRequest(limit=limit), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return [_wire.summary(s) for s in response.runs]

    async def session(
        self,
        prompt: str,
        *,
        tools: Tools = (),
        llm: LLMCaller | None = None,
        approver: _wire.SessionApprover | None = None,
        timeout: float | None = None,
        **options: Unpack[RunOptions],
    ) -> AsyncGenerator[StreamedEvent, None]:
        """Run a loop whose tools (and, with ``llm``, whose LLM) live in this process.

        ``tools`` is a ``ToolRegistry`` or plain functions; the sidecar calls them back over
        the stream, concurrently when the model asks for several at once. ``approver``
        decides the run's approval requests (``True``/``False`` or an ``ApprovalDecision``,
        directly or awaited). Yields every event. Leaving the iteration early cancels the run.
        """
        registry = _wire.as_registry(tools)
        runner = ToolRunner(registry)
        spec = _wire.run_spec(prompt, **options)
        call = self._stub.Session(metadata=self._metadata, timeout=timeout)
        lock = asyncio.Lock()
        pending: set[asyncio.Task[None]] = set()
        conversation = _wire.Conversation()
        decode = _wire.EventDecoder()

        async def send(message: session_pb2.SessionRequest) -> None:
            async with lock:
                await call.write(message)

        async def answer_tool(invocation: session_pb2.ToolInvocation) -> None:
            try:
                inputs = convert.parse_json_object(invocation.inputs, "inputs")
                output = await runner.invoke(invocation.tool_name, inputs)
            except Exception as exc:
                await send(_wire.tool_answer(invocation.call_id, None, _wire.describe(exc)))
            else:
                await send(_wire.tool_answer(invocation.call_id, output, None))

        async def answer_llm(invocation: session_pb2.LlmInvocation) -> None:
            assert llm is not None
            try:
                # Tasks start in the order spawned: invocations extend the conversation in order.
                response: Any = llm.call(conversation.request(invocation))
                if inspect.isawaitable(response):
                    response = await response
                if not isinstance(response, LLMResponse):
                    raise TypeError(f"the LLM caller returned {type(response).__name__}")
            except Exception as exc:
                await send(_wire.llm_answer(invocation.request_id, None, _wire.describe(exc)))
            else:
                await send(_wire.llm_answer(invocation.request_id, response, None))

        async def answer_approval(event: ApprovalRequested) -> None:
            assert approver is not None
            try:
                answer = approver(_wire.approval_request(event))
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception as exc:
                answer = ApprovalDecision(False, f"the approver failed: {_wire.describe(exc)}")
            await send(_wire.approval_answer(event.call_id, answer))

        def spawn(coro: Any) -> None:
            task = asyncio.create_task(coro)
            pending.add(task)
            task.add_done_callback(pending.discard)

        try:
            await send(_wire.session_start(spec, registry, llm is not None, approver is not None))
            async for response in call:
                # The events batched with an invocation come before it, but the sidecar waits
                # on the invocation alone: its task gets one turn (to run a quick tool and
                # send the answer) before the events are converted and handed out.
                kind = response.WhichOneof("kind")
                if kind == "tool_invocation":
                    spawn(answer_tool(response.tool_invocation))
                elif kind == "llm_invocation" and llm is not None:
                    spawn(answer_llm(response.llm_invocation))
                if kind in ("tool_invocation", "llm_invocation") and response.events:
                    await asyncio.sleep(0)
                for event in _wire.events_of(response):
                    streamed = decode(event)
                    if approver is not None and isinstance(streamed.event, ApprovalRequested):
                        spawn(answer_approval(streamed.event))
                    yield streamed
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        finally:
            for task in pending:
                task.cancel()
            call.cancel()

    async def _events(self, call: Any) -> AsyncGenerator[StreamedEvent, None]:
        decode = _wire.EventDecoder()
        try:
            async for response in call:
                for event in _wire.events_of(response):
                    yield decode(event)
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        finally:
            call.cancel()
