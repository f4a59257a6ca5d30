"""``SidecarClient``: the blocking client of the sidecar, on a plain gRPC channel."""

from __future__ import annotations

import asyncio
import inspect
import queue
from collections.abc import Generator, Iterator, Sequence
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

__all__ = ["SidecarClient"]

Metadata = Sequence[tuple[str, str]]


class SidecarClient:
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
            channel = (
                grpc.insecure_channel(target, options=options)
                if credentials is None
                else grpc.secure_channel(target, credentials, options=options)
            )
        self._channel = channel
        self._stub = service_pb2_grpc.ToolRuntimeServiceStub(self._channel)
        self._metadata = tuple(metadata) + _wire.auth_metadata(token)

    def close(self) -> None:
        """Close the channel (if this client opened it)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> SidecarClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run_tool_loop(
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
            response = self._stub.RunToolLoop(
                service_pb2.RunToolLoopRequest(spec=spec), metadata=self._metadata, timeout=timeout
            )
        except grpc.RpcError as exc:
            raise _wire.rpc_error(exc) from None
        return convert.result_from_pb(response.result)

    def stream_tool_loop(
        self,
        prompt: str,
        *,
        detach: bool = False,
        timeout: float | None = None,
        **options: Unpack[RunOptions],
    ) -> Generator[StreamedEvent, None, None]:
        """Start a run and yield its events as they happen, ending with the terminal one."""
        spec = _wire.run_spec(prompt, detach=detach, **options)
        call = self._stub.StreamToolLoop(
            service_pb2.StreamToolLoopRequest(spec=spec, batch_events=True),
            metadata=self._metadata,
            timeout=timeout,
        )
        return self._events(call)

    def watch(
        self, run_id: str, *, after_sequence: int = 0
    ) -> Generator[StreamedEvent, None, None]:
        """Follow a run from ``after_sequence``: what was missed, then live, to its end."""
        call = self._stub.WatchRun(
            service_pb2.WatchRunRequest(
                run_id=run_id, after_sequence=after_sequence, batch_events=True
            ),
            metadata=self._metadata,
        )
        return self._events(call)

    def get_run(self, run_id: str) -> RunInfo:
        """A run's state, last sequence and (once ended) result."""
        try:
            response = self._stub.GetRun(
                service_pb2.GetRunRequest(run_id=run_id), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return _wire.run_info(response)

    def cancel_run(self, run_id: str, *, reason: str = "") -> str:
        """Cancel a run; returns its state afterwards (``cancelled`` unless it had ended)."""
        try:
            response = self._stub.CancelRun(
                service_pb2.CancelRunRequest(run_id=run_id, reason=reason), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return _wire.state_name(response.state)

    def list_tools(self) -> list[ToolSpec]:
        """The sidecar's own tools."""
        try:
            response = self._stub.ListTools(service_pb2.ListToolsRequest(), metadata=self._metadata)
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return [convert.spec_from_pb(t) for t in response.tools]

    def decide_approval(
        self, run_id: str, call_id: str, *, approved: bool, reason: str = ""
    ) -> None:
        """Approve or deny a tool call of ``run_id`` that waits for approval."""
        request = service_pb2.DecideApprovalRequest(
            run_id=run_id, call_id=call_id, approved=approved, reason=reason
        )
        try:
            self._stub.DecideApproval(request, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None

    def list_runs(self, *, limit: int = 100) -> list[RunSummary]:
        """Live runs and the finished runs the sidecar keeps, newest first."""
        try:
            response = self._stub.ListRuns(
                service_pb2.ListRunsRequest(limit=limit), metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        return [_wire.summary(s) for s in response.runs]

    def session(
        self,
        prompt: str,
        *,
        tools: Tools = (),
        llm: LLMCaller | None = None,
        approver: _wire.SessionApprover | None = None,
        timeout: float | None = None,
        **options: Unpack[RunOptions],
    ) -> Generator[StreamedEvent, None, None]:
        """Run a loop whose tools (and, with ``llm``, whose LLM) live in this process.

        Yields every event; tools and the LLM are called in this thread as the sidecar asks.
        Leaving the iteration early cancels the run.
        """
        registry = _wire.as_registry(tools)
        spec = _wire.run_spec(prompt, **options)
        outgoing: queue.SimpleQueue[session_pb2.SessionRequest | None] = queue.SimpleQueue()
        outgoing.put(_wire.session_start(spec, registry, llm is not None, approver is not None))

        def requests() -> Iterator[session_pb2.SessionRequest]:
            while (message := outgoing.get()) is not None:
                yield message

        call = self._stub.Session(requests(), metadata=self._metadata, timeout=timeout)
        return self._session(call, outgoing, ToolRunner(registry), llm, approver)

    def _session(
        self,
        call: Any,
        outgoing: queue.SimpleQueue[session_pb2.SessionRequest | None],
        runner: ToolRunner,
        llm: LLMCaller | None,
        approver: _wire.SessionApprover | None,
    ) -> Generator[StreamedEvent, None, None]:
        loop = asyncio.new_event_loop()
        conversation = _wire.Conversation()
        decode = _wire.EventDecoder()
        try:
            for response in call:
                for event in _wire.events_of(response):  # they come before the invocation
                    streamed = decode(event)
                    if approver is not None and isinstance(streamed.event, ApprovalRequested):
                        outgoing.put(_answer_approval(loop, approver, streamed.event))
                    yield streamed
                kind = response.WhichOneof("kind")
                if kind == "tool_invocation":
                    outgoing.put(_answer_tool(loop, runner, response.tool_invocation))
                elif kind == "llm_invocation" and llm is not None:
                    outgoing.put(_answer_llm(loop, llm, conversation, response.llm_invocation))
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        finally:
            outgoing.put(None)
            call.cancel()
            loop.close()

    def _events(self, call: Any) -> Generator[StreamedEvent, None, None]:
        decode = _wire.EventDecoder()
        try:
            for response in call:
                for event in _wire.events_of(response):
                    yield decode(event)
        except grpc.RpcError as exc:
            raise SidecarRpcError.from_rpc_error(exc) from None
        finally:
            call.cancel()


def _answer_tool(
    loop: asyncio.AbstractEventLoop, runner: ToolRunner, invocation: session_pb2.ToolInvocation
) -> session_pb2.SessionRequest:
    try:
        inputs = convert.parse_json_object(invocation.inputs, "inputs")
        output = loop.run_until_complete(runner.invoke(invocation.tool_name, inputs))
    except Exception as exc:
        return _wire.tool_answer(invocation.call_id, None, _wire.describe(exc))
    return _wire.tool_answer(invocation.call_id, output, None)


def _answer_llm(
    loop: asyncio.AbstractEventLoop,
    llm: LLMCaller,
    conversation: _wire.Conversation,
    invocation: session_pb2.LlmInvocation,
) -> session_pb2.SessionRequest:
    try:
        response: Any = llm.call(conversation.request(invocation))
        if inspect.isawaitable(response):
            response = loop.run_until_complete(response)
        if not isinstance(response, LLMResponse):
            raise TypeError(f"the LLM caller returned {type(response).__name__}")
    except Exception as exc:
        return _wire.llm_answer(invocation.request_id, None, _wire.describe(exc))
    return _wire.llm_answer(invocation.request_id, response, None)


def _answer_approval(
    loop: asyncio.AbstractEventLoop, approver: _wire.SessionApprover, event: ApprovalRequested
) -> session_pb2.SessionRequest:
    try:
        answer = approver(_wire.approval_request(event))
        if inspect.isawaitable(answer):
            answer = loop.run_until_complete(answer)
    except Exception as exc:
        answer = ApprovalDecision(False, f"the approver failed: {_wire.describe(exc)}")
    return _wire.approval_answer(event.call_id, answer)
