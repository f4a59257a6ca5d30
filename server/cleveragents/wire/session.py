"""The ``Session`` stream's own messages: invocations the sidecar sends, answers it receives.

The sidecar side builds invocations (``tool_invocation``, ``LlmInvocationEncoder``) and reads
answers (``tool_answer_from_pb``, ``llm_answer_from_pb``); the client side reads invocations
(``Conversation``) and builds answers (``tool_result_request`` and its siblings). Answers are
plain values, so the code that waits for them never touches protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cleveragents.tool import (
    LLMRefusal,
    LLMRequest,
    LLMResponse,
    Message,
    OutputSchema,
    StructuredRequest,
)
from cleveragents.tool.frozen import quick_init
from cleveragents.toolruntime.v1 import session_pb2, types_pb2
from cleveragents.wire.jsonfields import dumps
from cleveragents.wire.timestamps import set_time
from cleveragents.wire.values import (
    call_from_pb,
    call_to_pb,
    message_from_pb,
    message_to_pb,
    output_schema_from_pb,
    output_schema_to_pb,
    spec_from_pb,
    usage_from_pb,
)

__all__ = [
    "Conversation",
    "LlmAnswer",
    "LlmInvocationEncoder",
    "ToolAnswer",
    "approval_request",
    "llm_answer_from_pb",
    "llm_result_request",
    "tool_answer_from_pb",
    "tool_invocation",
    "tool_result_request",
]


# -- the sidecar's side ------------------------------------------------------------------------


def tool_invocation(
    call_id: str,
    tool_name: str,
    inputs: Mapping[str, Any],
    iteration: int,
    deadline: float,
    idempotency_key: str = "",
) -> bytes:
    """A serialised ``SessionResponse`` asking the client to run one tool call by ``deadline``
    (Unix seconds); ``idempotency_key`` is the call's ``RUN_ID:CALL_ID``."""
    response = session_pb2.SessionResponse()  # filled in place: no submessage copies
    invocation = response.tool_invocation
    invocation.call_id = call_id
    invocation.tool_name = tool_name
    invocation.inputs = dumps(inputs)
    invocation.iteration = iteration
    invocation.idempotency_key = idempotency_key
    set_time(invocation.deadline, deadline)
    return response.SerializeToString()


class LlmInvocationEncoder:
    """Builds one session's LLM invocations, converting each conversation message once.

    The conversation only grows. With ``incremental`` (the client keeps the conversation),
    each message is also sent once: an iteration then costs the same however long the
    conversation is, instead of resending all of it every time.
    """

    __slots__ = ("_incremental", "_messages", "_output", "_sent", "_tools", "_tools_source")

    def __init__(self, *, incremental: bool) -> None:
        self._incremental = incremental
        #: The run's output schema as protobuf, converted once (``None``: the run has none).
        self._output: types_pb2.OutputSchema | None = None
        self._tools: list[types_pb2.ToolSpec] = []
        self._tools_source: Sequence[Mapping[str, Any]] | None = None
        self._messages: list[types_pb2.Message] = []
        self._sent = 0  # messages the client holds (incremental only)

    def encode(self, request_id: str, request: LLMRequest, deadline: float | None = None) -> bytes:
        """A serialised ``SessionResponse`` asking the client's LLM to answer ``request``, by
        ``deadline`` (Unix seconds) when one is given."""
        for message in request.messages[len(self._messages) :]:
            self._messages.append(message_to_pb(message))
        if request.tools is not self._tools_source:
            # The tools the runtime offers (already filtered by the automation profile), in
            # its neutral {name, description, input_schema} form: one list for the whole run,
            # converted once (a closing summary call offers none).
            self._tools_source = request.tools
            self._tools = [
                types_pb2.ToolSpec(
                    name=str(t["name"]),
                    description=str(t.get("description", "")),
                    input_schema=dumps(dict(t.get("input_schema", {}))),
                )
                for t in request.tools
            ]
        response = session_pb2.SessionResponse()  # filled in place: no submessage copies
        invocation = response.llm_invocation
        invocation.request_id = request_id
        invocation.iteration = request.iteration
        invocation.accepts_delta_batches = True
        invocation.tools.extend(self._tools)
        if request.output is not None:
            if self._output is None:
                self._output = types_pb2.OutputSchema()
                output_schema_to_pb(request.output, self._output)
            invocation.output_schema.CopyFrom(self._output)
        if self._incremental:
            invocation.message_offset = self._sent
            invocation.messages.extend(self._messages[self._sent :])
            self._sent = len(self._messages)
        else:
            invocation.messages.extend(self._messages)
        if deadline is not None:
            set_time(invocation.deadline, deadline)
        return response.SerializeToString()


@quick_init
@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A client's answer to a tool invocation: the output as JSON text, or an error."""

    call_id: str
    output: str = ""
    error: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class LlmAnswer:
    """A client's answer to an LLM invocation: a response, or an error."""

    request_id: str
    response: LLMResponse | None = None
    error: str | None = None


def tool_answer_from_pb(pb: session_pb2.ToolResult) -> ToolAnswer:
    """A ``tool_result`` as a :class:`ToolAnswer`."""
    if pb.WhichOneof("outcome") == "error":
        return ToolAnswer(pb.call_id, error=pb.error or "the client reported an error")
    return ToolAnswer(pb.call_id, output=pb.output)


def llm_answer_from_pb(pb: session_pb2.LlmResult) -> LlmAnswer:
    """An ``llm_result`` as an :class:`LlmAnswer`."""
    if pb.HasField("error"):
        return LlmAnswer(pb.request_id, error=pb.error)
    usage = usage_from_pb(pb.usage) if pb.HasField("usage") else None
    if pb.refusal:
        return LlmAnswer(pb.request_id, LLMRefusal(pb.content, (), usage, refusal=pb.refusal))
    response = LLMResponse(
        content=pb.content, tool_calls=[call_from_pb(c) for c in pb.tool_calls], usage=usage
    )
    return LlmAnswer(pb.request_id, response)


# -- the client's side -------------------------------------------------------------------------


class Conversation:
    """A session's conversation, kept by the client so that each LLM invocation need only
    carry the messages added since the previous one (``incremental_messages``)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._output: OutputSchema | None = None

    def request(self, invocation: session_pb2.LlmInvocation) -> LLMRequest:
        """The ``LLMRequest`` a client-hosted LLM receives: the whole conversation so far,
        and the run's output schema when it has one.

        Its ``messages`` is this conversation's live list, as in the core runtime. Raises
        ``ValueError`` if the invocation does not continue the messages held. One at offset 0
        carries the whole conversation (a sidecar that restarted, or took the run over, sends
        it again to a re-attached client): it replaces what was held.
        """
        if invocation.message_offset == 0 and self.messages:
            self.messages = []  # a request still answering keeps the list it was given
        if invocation.message_offset != len(self.messages):
            raise ValueError(
                f"the sidecar's LLM invocation continues its conversation at message "
                f"{invocation.message_offset}, but this client holds {len(self.messages)}"
            )
        self.messages.extend(message_from_pb(m) for m in invocation.messages)
        tools = [
            {"name": t.name, "description": t.description, "input_schema": spec.input_schema}
            for t in invocation.tools
            for spec in (spec_from_pb(t),)
        ]
        output = None
        if invocation.HasField("output_schema"):
            output = output_schema_from_pb(invocation.output_schema, "output_schema")
            if self._output == output:  # the same schema each time: compiled once
                output = self._output
            self._output = output
        if output is None:
            return LLMRequest(self.messages, tools, invocation.iteration)
        return StructuredRequest(self.messages, tools, invocation.iteration, output=output)


def tool_result_request(
    call_id: str, output: Mapping[str, Any] | None, error: str | None
) -> session_pb2.SessionRequest:
    """A ``tool_result`` message: the output as JSON text, or the error. Each of these
    builders fills its message in place: a submessage given to a constructor is copied (5.5k
    instructions of a hosted call)."""
    request = session_pb2.SessionRequest()
    result = request.tool_result
    result.call_id = call_id
    if error is not None:
        result.error = error
    else:
        result.output = dumps(output or {})
    return request


def llm_result_request(
    request_id: str, response: LLMResponse | None, error: str | None
) -> session_pb2.SessionRequest:
    """An ``llm_result`` message."""
    request = session_pb2.SessionRequest()
    result = request.llm_result
    result.request_id = request_id
    if error is not None or response is None:
        result.error = error or "the LLM caller returned nothing"
    else:
        result.content = response.content
        result.tool_calls.extend(call_to_pb(c) for c in response.tool_calls)
        if response.usage is not None:
            result.usage.input_tokens = response.usage.input_tokens
            result.usage.output_tokens = response.usage.output_tokens
        if isinstance(response, LLMRefusal):
            result.refusal = response.refusal or "the model refused"
    return request


def approval_request(call_id: str, approved: bool, reason: str) -> session_pb2.SessionRequest:
    """An ``approval_decision`` message."""
    request = session_pb2.SessionRequest()
    decision = request.approval_decision
    decision.call_id, decision.approved, decision.reason = call_id, approved, reason
    return request
