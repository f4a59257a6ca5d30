"""The one place where core dataclasses and protobuf messages meet.

JSON values travel as JSON text on the wire; parsing failures raise ``ValueError`` naming the
field, which the service maps to ``INVALID_ARGUMENT``. The client library uses the same
functions in the other direction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    ErrorKind,
    IterationStarted,
    LLMResponded,
    Message,
    Role,
    RunBudget,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunStarted,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    ToolCallStarted,
    ToolSpec,
    Usage,
    jsontext,
)
from cleveragents.tool.router import parse_call
from cleveragents.toolruntime.v1 import events_pb2, types_pb2

__all__ = [
    "budget_from_pb",
    "call_from_pb",
    "call_to_pb",
    "context_from_pb",
    "context_to_pb",
    "dumps",
    "duration",
    "event_from_pb",
    "event_to_pb",
    "message_from_pb",
    "message_to_pb",
    "parse_json",
    "parse_json_object",
    "record_from_pb",
    "record_to_pb",
    "result_from_pb",
    "result_to_pb",
    "seconds_of",
    "spec_from_pb",
    "spec_to_pb",
    "stop_reason_from_pb",
    "timestamp",
    "usage_from_pb",
    "usage_to_pb",
]

_ERROR_KINDS: dict[ErrorKind | None, types_pb2.ErrorKind.ValueType] = {
    None: types_pb2.ERROR_KIND_UNSPECIFIED,
    ErrorKind.UNKNOWN_TOOL: types_pb2.ERROR_KIND_UNKNOWN_TOOL,
    ErrorKind.INVALID_ARGUMENTS: types_pb2.ERROR_KIND_INVALID_ARGUMENTS,
    ErrorKind.TIMEOUT: types_pb2.ERROR_KIND_TIMEOUT,
    ErrorKind.EXCEPTION: types_pb2.ERROR_KIND_EXCEPTION,
    ErrorKind.CANCELLED: types_pb2.ERROR_KIND_CANCELLED,
    ErrorKind.DENIED: types_pb2.ERROR_KIND_DENIED,
}
_ERROR_KINDS_BACK = {v: k for k, v in _ERROR_KINDS.items()}
_STOP_REASONS: dict[StopReason, types_pb2.StopReason.ValueType] = {
    StopReason.FINAL_ANSWER: types_pb2.STOP_REASON_FINAL_ANSWER,
    StopReason.MAX_ITERATIONS: types_pb2.STOP_REASON_MAX_ITERATIONS,
    StopReason.CANCELLED: types_pb2.STOP_REASON_CANCELLED,
    StopReason.DEADLINE: types_pb2.STOP_REASON_DEADLINE,
    StopReason.ERROR: types_pb2.STOP_REASON_ERROR,
    StopReason.TOOL_CALL_BUDGET: types_pb2.STOP_REASON_TOOL_CALL_BUDGET,
    StopReason.TOKEN_BUDGET: types_pb2.STOP_REASON_TOKEN_BUDGET,
}
_STOP_REASONS_BACK = {v: k for k, v in _STOP_REASONS.items()}
_ROLES: dict[Role, types_pb2.Role.ValueType] = {
    Role.SYSTEM: types_pb2.ROLE_SYSTEM,
    Role.USER: types_pb2.ROLE_USER,
    Role.ASSISTANT: types_pb2.ROLE_ASSISTANT,
    Role.TOOL: types_pb2.ROLE_TOOL,
}
_ROLES_BACK = {v: k for k, v in _ROLES.items()}

_encode = jsontext.Encoder(separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact JSON text, UTF-8 kept as is."""
    return _encode(value)


def parse_json(text: str, field: str) -> Any:
    """Parse JSON text from a request field; ``ValueError`` names the field on failure."""
    try:
        return jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{field} is not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise ValueError(f"{field} is nested too deeply") from None


def parse_json_object(text: str, field: str, *, empty: Any = None) -> dict[str, Any]:
    """Parse a field that must hold a JSON object; empty text gives ``empty`` (or ``{}``)."""
    if text == "{}":  # no arguments, or an empty output: common enough to skip the parser
        return {}
    if not text.strip():
        return dict(empty) if empty is not None else {}
    value = parse_json(text, field)
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a JSON object, got {type(value).__name__}")
    return value


# -- time ------------------------------------------------------------------------------------


def timestamp(seconds: float | None = None) -> timestamp_pb2.Timestamp:
    """A Timestamp for a Unix time in seconds (now when omitted)."""
    ts = timestamp_pb2.Timestamp()
    set_time(ts, seconds)
    return ts


def set_time(ts: timestamp_pb2.Timestamp, seconds: float | None = None) -> None:
    """Set ``ts`` (a field of a message being built) in place: no temporary message."""
    ns = time.time_ns() if seconds is None else int(seconds * 1e9)
    ts.seconds, ts.nanos = divmod(ns, 1_000_000_000)


def seconds_of(ts: timestamp_pb2.Timestamp) -> float:
    """A Timestamp as Unix seconds."""
    return ts.seconds + ts.nanos / 1e9


def duration(seconds: float) -> duration_pb2.Duration:
    """A Duration of ``seconds``."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


# -- values ----------------------------------------------------------------------------------


def usage_to_pb(usage: Usage | None) -> types_pb2.Usage | None:
    """Usage as protobuf (``None`` stays unset)."""
    if usage is None:
        return None
    return types_pb2.Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)


def usage_from_pb(pb: types_pb2.Usage) -> Usage:
    """Usage from protobuf."""
    return Usage(int(pb.input_tokens), int(pb.output_tokens))


def spec_to_pb(spec: ToolSpec) -> types_pb2.ToolSpec:
    """A tool spec as protobuf, its schema as JSON text."""
    pb = types_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        input_schema=dumps(dict(spec.input_schema)),
        side_effects=spec.side_effects,
    )
    if spec.timeout_s is not None:
        pb.timeout.CopyFrom(duration(spec.timeout_s))
    return pb


def spec_from_pb(pb: types_pb2.ToolSpec) -> ToolSpec:
    """A tool spec from protobuf; an empty schema means any object. ``ValueError`` if bad."""
    schema = parse_json_object(
        pb.input_schema, f"tools[{pb.name}].input_schema", empty={"type": "object"}
    )
    timeout_s = None
    if pb.HasField("timeout"):
        timeout_s = pb.timeout.ToNanoseconds() / 1e9
        if timeout_s <= 0:
            raise ValueError(f"tools[{pb.name}].timeout must be positive")
    return ToolSpec(pb.name, pb.description, schema, timeout_s, pb.side_effects)


def call_to_pb(call: ToolCall) -> types_pb2.ToolCall:
    """A tool call as protobuf, arguments as JSON text."""
    return types_pb2.ToolCall(id=call.id, name=call.name, arguments=dumps(dict(call.arguments)))


def call_from_pb(pb: types_pb2.ToolCall) -> ToolCall:
    """A tool call from protobuf; unparseable arguments set ``arguments_error``."""
    return parse_call(pb.id, pb.name, pb.arguments)


def message_to_pb(message: Message) -> types_pb2.Message:
    """A conversation message as protobuf."""
    return types_pb2.Message(
        role=_ROLES[message.role],
        content=message.content,
        tool_calls=[call_to_pb(c) for c in message.tool_calls],
        tool_call_id=message.tool_call_id,
        is_error=message.is_error,
    )


def message_from_pb(pb: types_pb2.Message) -> Message:
    """A conversation message from protobuf."""
    return Message(
        _ROLES_BACK.get(pb.role, Role.USER),
        pb.content,
        [call_from_pb(c) for c in pb.tool_calls],
        pb.tool_call_id,
        pb.is_error,
    )


def record_to_pb(record: ToolCallRecord) -> types_pb2.ToolCallRecord:
    """A record as protobuf; inputs and output as JSON text."""
    pb = types_pb2.ToolCallRecord()
    fill_record(pb, record)
    return pb


def fill_record(pb: types_pb2.ToolCallRecord, record: ToolCallRecord) -> None:
    """Fill an empty ``pb`` (a field of a message being built) from ``record``."""
    pb.tool_name = record.tool_name
    pb.inputs = dumps(record.inputs)
    pb.output = dumps(record.output)
    pb.duration_ms = record.duration_ms
    pb.success = record.success
    pb.iteration = record.iteration
    pb.call_id = record.call_id
    set_time(pb.started_at, record.started_at)
    pb.error_kind = _ERROR_KINDS[record.error_kind]
    if record.error is not None:
        pb.error = record.error


def record_from_pb(pb: types_pb2.ToolCallRecord) -> ToolCallRecord:
    """A record from protobuf."""
    return ToolCallRecord(
        tool_name=pb.tool_name,
        inputs=parse_json_object(pb.inputs, "record.inputs"),
        output=parse_json_object(pb.output, "record.output"),
        duration_ms=pb.duration_ms,
        success=pb.success,
        error=pb.error if pb.HasField("error") else None,
        iteration=pb.iteration,
        call_id=pb.call_id,
        error_kind=_ERROR_KINDS_BACK.get(pb.error_kind),
        started_at=seconds_of(pb.started_at),
    )


#: Decodes one record (``record_from_pb``, or one that reuses records already decoded).
RecordDecoder = Callable[[types_pb2.ToolCallRecord], ToolCallRecord]


def result_to_pb(result: ToolCallRunResult) -> types_pb2.ToolCallRunResult:
    """A run result as protobuf."""
    return types_pb2.ToolCallRunResult(
        run_id=result.run_id,
        content=result.content,
        tool_call_history=[record_to_pb(r) for r in result.tool_call_history],
        iterations=result.iterations,
        terminated_by_limit=result.terminated_by_limit,
        usage=usage_to_pb(result.usage),
        stop_reason=_STOP_REASONS[result.stop_reason],
    )


def stop_reason_from_pb(value: types_pb2.StopReason.ValueType) -> StopReason | None:
    """A stop reason from protobuf (``None`` for unspecified)."""
    return _STOP_REASONS_BACK.get(value)


def result_from_pb(
    pb: types_pb2.ToolCallRunResult, record_from: RecordDecoder = record_from_pb
) -> ToolCallRunResult:
    """A run result from protobuf; ``record_from`` decodes each record of its history."""
    return ToolCallRunResult(
        content=pb.content,
        tool_call_history=tuple(record_from(r) for r in pb.tool_call_history),
        iterations=pb.iterations,
        terminated_by_limit=pb.terminated_by_limit,
        usage=usage_from_pb(pb.usage),
        stop_reason=_STOP_REASONS_BACK.get(pb.stop_reason, StopReason.ERROR),
        run_id=pb.run_id,
    )


def context_from_pb(pb: types_pb2.ToolActorContext) -> ToolActorContext:
    """A run context from protobuf; ``ValueError`` when a JSON field is not an object."""
    return ToolActorContext(
        plan_id=pb.plan_id,
        phase=pb.phase,
        sandbox_root=pb.sandbox_root or None,
        automation_profile=pb.automation_profile,
        resource_bindings=parse_json_object(pb.resource_bindings, "context.resource_bindings"),
        project_resources=parse_json_object(pb.project_resources, "context.project_resources"),
        tool_call_history=[record_from_pb(r) for r in pb.tool_call_history],
    )


def context_to_pb(context: ToolActorContext) -> types_pb2.ToolActorContext:
    """A run context as protobuf."""
    return types_pb2.ToolActorContext(
        plan_id=context.plan_id,
        phase=context.phase,
        sandbox_root=context.sandbox_root or "",
        automation_profile=context.automation_profile,
        resource_bindings=dumps(context.resource_bindings) if context.resource_bindings else "",
        project_resources=dumps(context.project_resources) if context.project_resources else "",
        tool_call_history=[record_to_pb(r) for r in context.tool_call_history],
    )


def budget_from_pb(pb: types_pb2.RunBudget) -> tuple[RunBudget, float | None]:
    """The core budget and the wall-clock budget in seconds (``None``: none) of a spec.

    ``ValueError`` for negative limits.
    """
    for name in ("max_tool_calls", "max_total_tokens", "max_concurrent_tool_calls"):
        if getattr(pb, name) < 0:
            raise ValueError(f"spec.budget.{name} must not be negative")
    wall_clock = pb.max_wall_clock.ToNanoseconds() / 1e9 if pb.HasField("max_wall_clock") else 0
    if wall_clock < 0:
        raise ValueError("spec.budget.max_wall_clock must not be negative")
    budget = RunBudget(
        max_tool_calls=pb.max_tool_calls or None,
        max_total_tokens=pb.max_total_tokens or None,
        max_concurrent_tool_calls=pb.max_concurrent_tool_calls or None,
        summarize_on_stop=pb.summarize_on_stop,
    )
    return budget, wall_clock or None


# -- events ----------------------------------------------------------------------------------


def event_to_pb(event: RunEvent, run_event: events_pb2.RunEvent, *, failure_code: int) -> None:
    """Fill ``run_event``'s payload from a core event (``RunStarted`` is the caller's job)."""
    if isinstance(event, ToolCallCompleted):
        fill_record(run_event.tool_call_completed.record, event.record)
    elif isinstance(event, ToolCallStarted):
        payload = run_event.tool_call_started
        payload.call_id = event.call_id
        payload.tool_name = event.tool_name
        payload.inputs = dumps(event.inputs)
        payload.iteration = event.iteration
    elif isinstance(event, IterationStarted):
        run_event.iteration_started.iteration = event.iteration
    elif isinstance(event, LLMResponded):
        responded = run_event.llm_responded
        responded.iteration = event.iteration
        responded.content = event.content
        responded.tool_calls.extend(call_to_pb(c) for c in event.tool_calls)
        if event.usage is not None:
            responded.usage.input_tokens = event.usage.input_tokens
            responded.usage.output_tokens = event.usage.output_tokens
    elif isinstance(event, RunCompleted):
        run_event.run_completed.result.CopyFrom(result_to_pb(event.result))
    elif isinstance(event, RunFailed):
        failed = run_event.run_failed
        failed.code = failure_code
        failed.message = event.message
        failed.result.CopyFrom(result_to_pb(event.result))
    elif isinstance(event, RunCancelled):
        run_event.run_cancelled.reason = event.reason
        run_event.run_cancelled.result.CopyFrom(result_to_pb(event.result))
    elif isinstance(event, ApprovalRequested):
        asked = run_event.approval_requested
        asked.call_id, asked.tool_name = event.call_id, event.tool_name
        asked.inputs, asked.iteration = dumps(event.inputs), event.iteration
        asked.reason = event.reason
    elif isinstance(event, ApprovalDecided):
        decided = run_event.approval_decided
        decided.call_id, decided.approved = event.call_id, event.approved
        decided.reason, decided.decided_by = event.reason, event.by
        decided.iteration = event.iteration
    else:  # pragma: no cover - RunStarted is built by the run manager
        raise TypeError(f"cannot convert {type(event).__name__} here")


def event_from_pb(pb: events_pb2.RunEvent, record_from: RecordDecoder = record_from_pb) -> RunEvent:
    """A core event from a protobuf ``RunEvent`` (``RunFailed.error`` is left empty);
    ``record_from`` decodes the records it carries."""
    kind = pb.WhichOneof("payload")
    if kind == "tool_call_completed":
        return ToolCallCompleted(record_from(pb.tool_call_completed.record))
    if kind == "tool_call_started":
        s = pb.tool_call_started
        return ToolCallStarted(
            s.call_id, s.tool_name, parse_json_object(s.inputs, "inputs"), s.iteration
        )
    if kind == "iteration_started":
        return IterationStarted(pb.iteration_started.iteration)
    if kind == "llm_responded":
        r = pb.llm_responded
        usage = usage_from_pb(r.usage) if r.HasField("usage") else None
        return LLMResponded(
            r.iteration, r.content, tuple(call_from_pb(c) for c in r.tool_calls), usage
        )
    if kind == "run_started":
        spec = pb.run_started.spec
        return RunStarted(spec.run_id, spec.prompt, tuple(spec.tool_names), spec.max_iterations)
    if kind == "run_completed":
        return RunCompleted(result_from_pb(pb.run_completed.result, record_from))
    if kind == "run_failed":
        return RunFailed(pb.run_failed.message, result_from_pb(pb.run_failed.result, record_from))
    if kind == "run_cancelled":
        c = pb.run_cancelled
        return RunCancelled(c.reason, result_from_pb(c.result, record_from))
    if kind == "approval_requested":
        a = pb.approval_requested
        return ApprovalRequested(
            a.call_id, a.tool_name, parse_json_object(a.inputs, "inputs"), a.iteration, a.reason
        )
    if kind == "approval_decided":
        d = pb.approval_decided
        return ApprovalDecided(d.call_id, d.approved, d.reason, d.decided_by, d.iteration)
    raise ValueError(f"RunEvent {pb.sequence} has no payload")
