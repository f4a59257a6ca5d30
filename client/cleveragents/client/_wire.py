"""Request building and response reading shared by the sync and asyncio clients."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict

import grpc

from cleveragents.client.errors import RunFailedError, SidecarRpcError
from cleveragents.client.types import RunInfo, RunSummary, StreamedEvent
from cleveragents.sidecar import convert
from cleveragents.tool import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    LLMRequest,
    LLMResponse,
    Message,
    RunBudget,
    ToolActorContext,
    ToolCallRecord,
    ToolRegistry,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, session_pb2, types_pb2

Script = Sequence[LLMResponse | Mapping[str, Any]]
Tools = ToolRegistry | Iterable[Callable[..., Any]]


class RunOptions(TypedDict, total=False):
    """What a run may say besides its prompt, for every client method that starts one.

    ``context``: the run's ``ToolActorContext``; ``max_iterations`` (0: the sidecar's
    default); ``profile`` and ``model``: the LLM profile and a model override; ``script``: LLM
    turns for a scripted dry run; ``tool_names``: a subset of the sidecar's tools; ``run_id``:
    your own id; ``budget`` and ``max_wall_clock_s``: limits beyond the iteration count.
    """

    context: ToolActorContext | None
    max_iterations: int
    profile: str
    model: str
    script: Script | None
    tool_names: Sequence[str]
    run_id: str
    budget: RunBudget | None
    max_wall_clock_s: float | None


def run_spec(
    prompt: str,
    *,
    context: ToolActorContext | None = None,
    max_iterations: int = 0,
    profile: str = "",
    model: str = "",
    script: Script | None = None,
    tool_names: Sequence[str] = (),
    run_id: str = "",
    detach: bool = False,
    budget: RunBudget | None = None,
    max_wall_clock_s: float | None = None,
) -> types_pb2.RunSpec:
    """The ``RunSpec`` for these arguments."""
    spec = types_pb2.RunSpec(
        prompt=prompt,
        max_iterations=max_iterations,
        tool_names=list(tool_names),
        run_id=run_id,
        detach=detach,
        llm=types_pb2.LlmSelection(profile=profile, model=model),
    )
    if context is not None:
        spec.context.CopyFrom(convert.context_to_pb(context))
    if script is not None:
        spec.llm.script = json.dumps([_turn(t) for t in script])
    if budget is not None:
        spec.budget.max_tool_calls = budget.max_tool_calls or 0
        spec.budget.max_total_tokens = budget.max_total_tokens or 0
        spec.budget.max_concurrent_tool_calls = budget.max_concurrent_tool_calls or 0
        spec.budget.summarize_on_stop = budget.summarize_on_stop
    if max_wall_clock_s is not None:
        spec.budget.max_wall_clock.CopyFrom(convert.duration(max_wall_clock_s))
    return spec


def _turn(turn: LLMResponse | Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(turn, LLMResponse):
        return turn
    out: dict[str, Any] = {"content": turn.content}
    if turn.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in turn.tool_calls
        ]
    if turn.usage is not None:
        out["usage"] = {
            "input_tokens": turn.usage.input_tokens,
            "output_tokens": turn.usage.output_tokens,
        }
    return out


def as_registry(tools: Tools) -> ToolRegistry:
    """A registry from a registry, or from plain functions (registered with ``@tool``)."""
    if isinstance(tools, ToolRegistry):
        return tools
    registry = ToolRegistry()
    for fn in tools:
        registry.tool(fn)
    return registry


def session_start(
    spec: types_pb2.RunSpec, registry: ToolRegistry, client_llm: bool, approvals: bool = False
) -> session_pb2.SessionRequest:
    """The first message of a session."""
    return session_pb2.SessionRequest(
        start=session_pb2.SessionStart(
            spec=spec,
            tools=[convert.spec_to_pb(s) for s in registry.specs()],
            client_llm=client_llm,
            handles_approvals=approvals,
            batch_events=True,
            incremental_messages=client_llm,
        )
    )


#: Decides an approval request in a session: ``True``/``False``, or an ``ApprovalDecision``
#: (for a reason), returned directly or awaited.
SessionApprover = Callable[[ApprovalRequest], Any]


def approval_request(event: ApprovalRequested) -> ApprovalRequest:
    """The request an ``approval_requested`` event stands for."""
    return ApprovalRequest(
        event.call_id, event.tool_name, event.inputs, event.iteration, event.reason
    )


def approval_answer(call_id: str, answer: Any) -> session_pb2.SessionRequest:
    """An ``approval_decision`` message from an approver's answer (anything else: deny)."""
    if isinstance(answer, ApprovalDecision):
        approved, reason = answer.approved, answer.reason
    else:
        approved, reason = answer is True, ""
    return session_pb2.SessionRequest(
        approval_decision=session_pb2.ApprovalDecision(
            call_id=call_id, approved=approved, reason=reason
        )
    )


def summary(pb: service_pb2.RunSummary) -> RunSummary:
    """A ``RunSummary`` message as the client's dataclass."""
    return RunSummary(
        run_id=pb.run_id,
        state=state_name(pb.state),
        stop_reason=convert.stop_reason_from_pb(pb.stop_reason),
        last_sequence=pb.last_sequence,
        started_at=convert.seconds_of(pb.started_at),
        finished_at=convert.seconds_of(pb.finished_at) if pb.HasField("finished_at") else None,
        iterations=pb.iterations,
        tool_calls=pb.tool_calls,
        prompt=pb.prompt,
    )


def events_of(
    response: service_pb2.StreamToolLoopResponse
    | service_pb2.WatchRunResponse
    | session_pb2.SessionResponse,
) -> Sequence[events_pb2.RunEvent]:
    """The events one streamed response carries, oldest first (the clients ask for batches).

    The sidecar sets ``events`` or ``event``, never both; were both set, ``event`` would come
    last (as the Node.js client reads it too).
    """
    if not response.HasField("event"):
        return response.events
    return [*response.events, response.event] if response.events else (response.event,)


class EventDecoder:
    """Turns the ``RunEvent``s of one stream into ``StreamedEvent``s.

    A run's terminal event repeats in its result every record that its ``tool_call_completed``
    events carried. Those seen on this stream are reused instead of decoded again, as an
    in-process run shares them: a long run's last event then costs what one event costs.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[bytes, ToolCallRecord] = {}

    def __call__(self, event: events_pb2.RunEvent) -> StreamedEvent:
        at = event.time
        return StreamedEvent(
            event.run_id,
            event.sequence,
            at.seconds + at.nanos / 1e9,
            convert.event_from_pb(event, self._record),
        )

    def _record(self, pb: types_pb2.ToolCallRecord) -> ToolCallRecord:
        # The sidecar encodes a record the same way wherever it appears: equal bytes, equal
        # record.
        key = pb.SerializeToString()
        record = self._seen.get(key)
        if record is None:
            record = self._seen[key] = convert.record_from_pb(pb)
        return record


def run_info(response: service_pb2.GetRunResponse) -> RunInfo:
    """A ``GetRunResponse`` as ``RunInfo``."""
    state = types_pb2.RunState.Name(response.state).removeprefix("RUN_STATE_").lower()
    result = convert.result_from_pb(response.result) if response.HasField("result") else None
    return RunInfo(response.run_id, state, response.last_sequence, result)


def state_name(state: types_pb2.RunState.ValueType) -> str:
    """``RUN_STATE_CANCELLED`` -> ``cancelled``."""
    return types_pb2.RunState.Name(state).removeprefix("RUN_STATE_").lower()


def tool_answer(
    call_id: str, output: Mapping[str, Any] | None, error: str | None
) -> session_pb2.SessionRequest:
    """A ``tool_result`` message: the output as JSON text, or the error."""
    result = session_pb2.ToolResult(call_id=call_id)
    if error is not None:
        result.error = error
    else:
        result.output = convert.dumps(output or {})
    return session_pb2.SessionRequest(tool_result=result)


class Conversation:
    """A session's conversation, kept by the client so that each LLM invocation need only
    carry the messages added since the previous one (``incremental_messages``)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def request(self, invocation: session_pb2.LlmInvocation) -> LLMRequest:
        """The ``LLMRequest`` a client-hosted LLM receives: the whole conversation so far.

        Its ``messages`` is this conversation's live list, as in the core runtime. Raises
        ``ValueError`` if the invocation does not continue the messages held.
        """
        if invocation.message_offset != len(self.messages):
            raise ValueError(
                f"the sidecar's LLM invocation continues its conversation at message "
                f"{invocation.message_offset}, but this client holds {len(self.messages)}"
            )
        self.messages.extend(convert.message_from_pb(m) for m in invocation.messages)
        tools = [
            {"name": t.name, "description": t.description, "input_schema": spec.input_schema}
            for t in invocation.tools
            for spec in (convert.spec_from_pb(t),)
        ]
        return LLMRequest(self.messages, tools, invocation.iteration)


def llm_answer(
    request_id: str, response: LLMResponse | None, error: str | None
) -> session_pb2.SessionRequest:
    """An ``llm_result`` message."""
    result = session_pb2.LlmResult(request_id=request_id)
    if error is not None or response is None:
        result.error = error or "the LLM caller returned nothing"
    else:
        result.content = response.content
        result.tool_calls.extend(convert.call_to_pb(c) for c in response.tool_calls)
        if response.usage is not None:
            result.usage.input_tokens = response.usage.input_tokens
            result.usage.output_tokens = response.usage.output_tokens
    return session_pb2.SessionRequest(llm_result=result)


def describe(exc: BaseException) -> str:
    """``Type: message`` for an exception."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


#: Trailing metadata key under which the sidecar returns a failed run's partial result.
RESULT_TRAILER = "cleveragents-result-bin"


def rpc_error(error: grpc.RpcError) -> SidecarRpcError:
    """A ``RunFailedError`` when the status carries a run's partial result, else the status."""
    wrapped = SidecarRpcError.from_rpc_error(error)
    trailers: Any = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in tuple(trailers or ()):
        if key == RESULT_TRAILER and isinstance(value, bytes):
            result = types_pb2.ToolCallRunResult.FromString(value)
            return RunFailedError(wrapped.code, wrapped.details, convert.result_from_pb(result))
    return wrapped


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata that carries the sidecar's shared token, if any."""
    return (("authorization", f"Bearer {token}"),) if token else ()
