"""The core's values as protobuf messages and back: specs, calls, messages, records, results.

Each function converts one value; ``ValueError`` (naming the field) is the only error a
malformed message raises.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping

from cleveragents.tool import (
    ErrorKind,
    Message,
    OutputSchema,
    Role,
    RunBudget,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallRecord,
    ToolCallRunResult,
    ToolSpec,
    Usage,
    parse_call,
)
from cleveragents.toolruntime.v1 import types_pb2
from cleveragents.wire.jsonfields import dumps, parse_json_object
from cleveragents.wire.timestamps import duration, seconds_of, set_time

__all__ = [
    "ConvertedRecords",
    "RecordDecoder",
    "RunState",
    "budget_from_pb",
    "budget_to_pb",
    "call_from_pb",
    "call_to_pb",
    "context_from_pb",
    "context_to_pb",
    "fill_call",
    "fill_record",
    "fill_result",
    "message_from_pb",
    "message_to_pb",
    "output_schema_from_pb",
    "output_schema_to_pb",
    "record_from_pb",
    "record_to_pb",
    "result_from_pb",
    "result_to_pb",
    "run_state_from_pb",
    "run_state_to_pb",
    "spec_from_pb",
    "spec_to_pb",
    "stop_reason_from_pb",
    "stop_reason_to_pb",
    "usage_from_pb",
    "usage_to_pb",
]


class RunState(enum.StrEnum):
    """Where a run known to the sidecar is in its life."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


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
    StopReason.WALL_CLOCK_BUDGET: types_pb2.STOP_REASON_WALL_CLOCK_BUDGET,
    StopReason.MAX_OUTPUT_RETRIES: types_pb2.STOP_REASON_MAX_OUTPUT_RETRIES,
    StopReason.REFUSAL: types_pb2.STOP_REASON_REFUSAL,
}
_STOP_REASONS_BACK = {v: k for k, v in _STOP_REASONS.items()}
_ROLES: dict[Role, types_pb2.Role.ValueType] = {
    Role.SYSTEM: types_pb2.ROLE_SYSTEM,
    Role.USER: types_pb2.ROLE_USER,
    Role.ASSISTANT: types_pb2.ROLE_ASSISTANT,
    Role.TOOL: types_pb2.ROLE_TOOL,
}
_ROLES_BACK = {v: k for k, v in _ROLES.items()}
_RUN_STATES: dict[RunState, types_pb2.RunState.ValueType] = {
    RunState.RUNNING: types_pb2.RUN_STATE_RUNNING,
    RunState.COMPLETED: types_pb2.RUN_STATE_COMPLETED,
    RunState.FAILED: types_pb2.RUN_STATE_FAILED,
    RunState.CANCELLED: types_pb2.RUN_STATE_CANCELLED,
}
_RUN_STATES_BACK = {v: k for k, v in _RUN_STATES.items()}


def run_state_to_pb(state: RunState) -> types_pb2.RunState.ValueType:
    """A run state as protobuf."""
    return _RUN_STATES[state]


def run_state_from_pb(value: types_pb2.RunState.ValueType) -> str:
    """A run state from protobuf: a ``RunState``, or the lower-case name of an unknown one."""
    state = _RUN_STATES_BACK.get(value)
    if state is not None:
        return state
    return types_pb2.RunState.Name(value).removeprefix("RUN_STATE_").lower()


def stop_reason_to_pb(reason: StopReason) -> types_pb2.StopReason.ValueType:
    """A stop reason as protobuf."""
    return _STOP_REASONS[reason]


def stop_reason_from_pb(value: types_pb2.StopReason.ValueType) -> StopReason | None:
    """A stop reason from protobuf (``None`` for unspecified)."""
    return _STOP_REASONS_BACK.get(value)


def usage_to_pb(usage: Usage | None) -> types_pb2.Usage | None:
    """Usage as protobuf (``None`` stays unset)."""
    if usage is None:
        return None
    pb = types_pb2.Usage()
    fill_usage(pb, usage)
    return pb


def fill_usage(pb: types_pb2.Usage, usage: Usage) -> None:
    """Fill ``pb`` (a field of a message being built, which this sets) from ``usage``."""
    pb.SetInParent()
    pb.input_tokens = usage.input_tokens
    pb.output_tokens = usage.output_tokens
    pb.reported_total_tokens = usage.reported_total_tokens


def usage_from_pb(pb: types_pb2.Usage) -> Usage:
    """Usage from protobuf."""
    return Usage(int(pb.input_tokens), int(pb.output_tokens), int(pb.reported_total_tokens))


def spec_to_pb(spec: ToolSpec, origin: str = "") -> types_pb2.ToolSpec:
    """A tool spec as protobuf, its schema as JSON text; ``origin`` only in ``ListTools``."""
    pb = types_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        input_schema=dumps(dict(spec.input_schema)),
        side_effects=spec.side_effects,
        origin=origin,
        idempotent=spec.idempotent,
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
    return ToolSpec(
        pb.name, pb.description, schema, timeout_s, pb.side_effects, pb.idempotent, pb.origin
    )


def call_to_pb(call: ToolCall) -> types_pb2.ToolCall:
    """A tool call as protobuf, arguments as JSON text."""
    return types_pb2.ToolCall(id=call.id, name=call.name, arguments=dumps(dict(call.arguments)))


def fill_call(pb: types_pb2.ToolCall, call: ToolCall) -> None:
    """Fill an empty ``pb`` (an element of a message being built, ``add()``-ed) from ``call``:
    a call made apart and then added would be copied."""
    pb.id = call.id
    pb.name = call.name
    pb.arguments = dumps(dict(call.arguments))


def call_from_pb(pb: types_pb2.ToolCall) -> ToolCall:
    """A tool call from protobuf; unparseable arguments set ``arguments_error``."""
    arguments = pb.arguments
    if arguments == "{}":  # no arguments, the common case: what parse_call gives, unparsed
        return ToolCall(pb.id, pb.name, {})
    return parse_call(pb.id, pb.name, arguments)


def message_to_pb(message: Message) -> types_pb2.Message:
    """A conversation message as protobuf."""
    pb = types_pb2.Message(
        role=_ROLES[message.role],
        content=message.content,
        tool_call_id=message.tool_call_id,
        is_error=message.is_error,
    )
    calls = pb.tool_calls
    for call in message.tool_calls:
        fill_call(calls.add(), call)
    return pb


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
    pb.output = record.output_json_compact()  # encoded once per record, however many uses
    pb.duration_ms = record.duration_ms
    pb.success = record.success
    pb.iteration = record.iteration
    pb.call_id = record.call_id
    set_time(pb.started_at, record.started_at)
    pb.error_kind = _ERROR_KINDS[record.error_kind]
    if record.error is not None:
        pb.error = record.error


def record_from_pb(pb: types_pb2.ToolCallRecord) -> ToolCallRecord:
    """A record from protobuf (its fields in order: one is decoded for each hosted call a
    client answers)."""
    return ToolCallRecord(
        pb.tool_name,
        parse_json_object(pb.inputs, "record.inputs"),
        parse_json_object(pb.output, "record.output"),
        pb.duration_ms,
        pb.success,
        pb.error if pb.HasField("error") else None,
        pb.iteration,
        pb.call_id,
        _ERROR_KINDS_BACK.get(pb.error_kind),
        seconds_of(pb.started_at),
    )


#: Decodes one record (``record_from_pb``, or one that reuses records already decoded).
RecordDecoder = Callable[[types_pb2.ToolCallRecord], ToolCallRecord]


#: Records already converted, by ``id``, each with the record it was converted from (held, so
#: that its ``id`` is not reused while it is looked up).
ConvertedRecords = Mapping[int, tuple[ToolCallRecord, types_pb2.ToolCallRecord]]


def result_to_pb(result: ToolCallRunResult) -> types_pb2.ToolCallRunResult:
    """A run result as protobuf."""
    pb = types_pb2.ToolCallRunResult()
    fill_result(pb, result)
    return pb


def fill_result(
    pb: types_pb2.ToolCallRunResult,
    result: ToolCallRunResult,
    converted: ConvertedRecords | None = None,
) -> None:
    """Fill an empty ``pb`` (a field of a message being built) from ``result``, in place.

    A record of its history found in ``converted`` (the very record) is copied from its
    protobuf, not converted again: a run's last event carries every record its events did.
    """
    pb.run_id = result.run_id
    pb.content = result.content
    history = pb.tool_call_history
    for record in result.tool_call_history:
        known = converted.get(id(record)) if converted else None
        if known is not None and known[0] is record:
            history.add().CopyFrom(known[1])
        else:
            fill_record(history.add(), record)
    pb.iterations = result.iterations
    pb.terminated_by_limit = result.terminated_by_limit
    if result.usage is not None:
        fill_usage(pb.usage, result.usage)
    pb.stop_reason = _STOP_REASONS[result.stop_reason]
    pb.output = result.output_json
    pb.output_error = result.output_error


def result_from_pb(
    pb: types_pb2.ToolCallRunResult, record_from: RecordDecoder = record_from_pb
) -> ToolCallRunResult:
    """A run result from protobuf; ``record_from`` decodes each record of its history."""
    return ToolCallRunResult(
        content=pb.content,
        tool_call_history=tuple(map(record_from, pb.tool_call_history)),
        iterations=pb.iterations,
        terminated_by_limit=pb.terminated_by_limit,
        usage=usage_from_pb(pb.usage),
        stop_reason=_STOP_REASONS_BACK.get(pb.stop_reason, StopReason.ERROR),
        run_id=pb.run_id,
        output_json=pb.output,
        output_error=pb.output_error,
    )


def output_schema_to_pb(output: OutputSchema, pb: types_pb2.OutputSchema) -> None:
    """Fill ``pb`` (a message's empty ``output_schema``, in place) from ``output``."""
    pb.name, pb.description = output.name, output.description
    pb.schema = dumps(dict(output.schema))


def output_schema_from_pb(pb: types_pb2.OutputSchema, where: str) -> OutputSchema:
    """An output schema from protobuf (not compiled yet: see ``OutputSchema.prepare``);
    ``ValueError`` names ``where`` and what is wrong."""
    schema = parse_json_object(pb.schema, f"{where}.schema")
    try:
        return OutputSchema(pb.name, schema, pb.description)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None


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


def budget_to_pb(
    pb: types_pb2.RunBudget, budget: RunBudget, max_wall_clock_s: float | None
) -> None:
    """Fill ``pb`` (a spec's ``budget``, in place) from a core budget and a wall clock
    (``None``: the budget's own ``max_wall_clock_s``)."""
    pb.max_tool_calls = budget.max_tool_calls or 0
    pb.max_total_tokens = budget.max_total_tokens or 0
    pb.max_concurrent_tool_calls = budget.max_concurrent_tool_calls or 0
    pb.summarize_on_stop = budget.summarize_on_stop
    if max_wall_clock_s is None:
        max_wall_clock_s = budget.max_wall_clock_s
    if max_wall_clock_s is not None:
        pb.max_wall_clock.CopyFrom(duration(max_wall_clock_s))
