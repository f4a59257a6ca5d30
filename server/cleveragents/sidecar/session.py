"""Client-hosted tools and LLM over a ``Session`` stream.

The server sends an invocation with an id and waits; the client owes exactly one answer per
id. Answers to ids that timed out are ignored (the client could not know); answers to ids
never sent, or sent twice, are protocol violations that end the session.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import grpc

from cleveragents.sidecar import convert
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.streams import Listener, Message, Subscriber
from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    ToolError,
    ToolRegistry,
    ToolRuntimeError,
    ToolSpec,
)
from cleveragents.tool.runner import current_call
from cleveragents.toolruntime.v1 import session_pb2, types_pb2

__all__ = ["ClientLLMCaller", "ClientToolError", "SessionChannel"]

_EXPIRED_MEMORY = 4096


class OrderedLog(Protocol):
    """A run's log, which hands a listener an item only after the events logged before it."""

    def push_in_order(self, listener: Listener, item: bytes) -> None: ...


class ClientToolError(ToolError):
    """The client answered a tool invocation with an error; the record carries its text."""


class SessionChannel:
    """Pending invocations of one session and the ordered outbox of frames to its client."""

    def __init__(self, default_tool_timeout_s: float, incremental_messages: bool = False) -> None:
        self.outbox = Subscriber()
        #: Whether the client keeps the conversation (each LLM invocation sends only news).
        self.incremental_messages = incremental_messages
        self._deliver: Callable[[bytes], None] = self.outbox.push
        self.default_tool_timeout_s = default_tool_timeout_s
        self.pending_tools: dict[str, asyncio.Future[session_pb2.ToolResult]] = {}
        self.pending_llm: dict[str, asyncio.Future[session_pb2.LlmResult]] = {}
        self._expired: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.violation: SidecarError | None = None

    @property
    def has_pending(self) -> bool:
        """Whether the run waits on the client."""
        return bool(self.pending_tools or self.pending_llm)

    def register_tools(self, registry: ToolRegistry, specs: Sequence[ToolSpec]) -> None:
        """Add a proxy to ``registry`` for each client-hosted tool."""
        for spec in specs:
            registry.register(spec, self._proxy(spec))

    def resolve_tool(self, result: session_pb2.ToolResult) -> None:
        """Deliver a tool result; raises ``FAILED_PRECONDITION`` for an id not awaited."""
        future = self.pending_tools.pop(result.call_id, None)
        if future is None:
            if result.call_id in self._expired:
                del self._expired[result.call_id]
                return
            raise SidecarError.out_of_order(
                f"tool_result for call_id {result.call_id!r}, which is not awaiting a result "
                "(unknown, or already answered)"
            )
        if not future.done():
            future.set_result(result)

    def resolve_llm(self, result: session_pb2.LlmResult) -> None:
        """Deliver an LLM result; raises ``FAILED_PRECONDITION`` for an id not awaited."""
        future = self.pending_llm.pop(result.request_id, None)
        if future is None:
            raise SidecarError.out_of_order(
                f"llm_result for request_id {result.request_id!r}, which is not awaiting a "
                "result (unknown, or already answered)"
            )
        if not future.done():
            future.set_result(result)

    def attach(self, log: OrderedLog) -> None:
        """Deliver messages through the run's ``log``, after the events logged before them."""
        self._deliver = functools.partial(log.push_in_order, self.outbox)

    def send(self, response: session_pb2.SessionResponse) -> None:
        """Queue a message for the client, after every event logged before it."""
        self._deliver(Message(response.SerializeToString()))

    def _forget(self, call_id: str) -> None:
        self._expired[call_id] = None
        while len(self._expired) > _EXPIRED_MEMORY:
            self._expired.popitem(last=False)

    def _proxy(self, spec: ToolSpec) -> Any:
        async def invoke(inputs: Mapping[str, Any]) -> Any:
            scope = current_call()
            if scope is None:  # pragma: no cover - only the runner calls handlers
                raise ToolRuntimeError("client tools run only inside the tool loop")
            call_id = scope.call.id
            if call_id in self.pending_tools:
                raise ToolRuntimeError(
                    f"call id {call_id!r} is already awaiting the client; the model reused an id"
                )
            timeout_s = scope.timeout_s or self.default_tool_timeout_s
            future: asyncio.Future[session_pb2.ToolResult] = (
                asyncio.get_running_loop().create_future()
            )
            self.pending_tools[call_id] = future
            response = session_pb2.SessionResponse()  # filled in place: no submessage copies
            invocation = response.tool_invocation
            invocation.call_id = call_id
            invocation.tool_name = spec.name
            invocation.inputs = convert.dumps(inputs)
            invocation.iteration = scope.iteration
            convert.set_time(invocation.deadline, time.time() + timeout_s)
            self.send(response)
            try:
                result = await future
            finally:
                if self.pending_tools.get(call_id) is future:
                    del self.pending_tools[call_id]
                    self._forget(call_id)
            if result.WhichOneof("outcome") == "error":
                raise ClientToolError(result.error or "the client reported an error")
            if not result.output.strip():
                return {}
            # Any JSON value: the runner wraps a non-object x as {"result": x}.
            return convert.parse_json(result.output, f"output of {spec.name!r}")

        return invoke


class ClientLLMCaller:
    """An ``LLMCaller`` whose answers come from the client over the session.

    The conversation only grows, so each message is converted once. A client that asked for
    ``incremental_messages`` is sent each message once too: an iteration then costs the same
    however long the conversation is, instead of resending all of it every time.
    """

    def __init__(self, channel: SessionChannel) -> None:
        self._channel = channel
        self._tools: list[types_pb2.ToolSpec] = []
        self._tools_source: Sequence[Mapping[str, Any]] | None = None
        self._messages: list[types_pb2.Message] = []
        self._sent = 0  # messages the client holds (incremental_messages only)

    async def call(self, request: LLMRequest) -> LLMResponse:
        """Send the conversation to the client and wait for its answer."""
        for message in request.messages[len(self._messages) :]:
            self._messages.append(convert.message_to_pb(message))
        if request.tools is not self._tools_source:
            # The tools the runtime offers (already filtered by the automation profile), in
            # its neutral {name, description, input_schema} form: one list for the whole run,
            # converted once (a closing summary call offers none).
            self._tools_source = request.tools
            self._tools = [
                types_pb2.ToolSpec(
                    name=str(t["name"]),
                    description=str(t.get("description", "")),
                    input_schema=convert.dumps(dict(t.get("input_schema", {}))),
                )
                for t in request.tools
            ]
        request_id = f"llm_{request.iteration}"
        future: asyncio.Future[session_pb2.LlmResult] = asyncio.get_running_loop().create_future()
        self._channel.pending_llm[request_id] = future
        response = session_pb2.SessionResponse()  # filled in place: no submessage copies
        invocation = response.llm_invocation
        invocation.request_id = request_id
        invocation.iteration = request.iteration
        invocation.tools.extend(self._tools)
        if self._channel.incremental_messages:
            invocation.message_offset = self._sent
            invocation.messages.extend(self._messages[self._sent :])
            self._sent = len(self._messages)
        else:
            invocation.messages.extend(self._messages)
        self._channel.send(response)
        try:
            result = await future
        finally:
            self._channel.pending_llm.pop(request_id, None)
        if result.HasField("error"):
            raise SidecarError(
                grpc.StatusCode.UNAVAILABLE, f"the client's LLM failed: {result.error}"
            )
        return LLMResponse(
            content=result.content,
            tool_calls=[convert.call_from_pb(c) for c in result.tool_calls],
            usage=convert.usage_from_pb(result.usage) if result.HasField("usage") else None,
        )
