"""Run events as protobuf ``RunEvent``s and back, and a run's events encoded once as frames.

The dispatch is a ``match`` over every event type ending in ``assert_never``, so that mypy
names an event type this module forgets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

from google.protobuf.message import DecodeError

from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    IterationStarted,
    LLMDelta,
    LLMRefused,
    LLMResponded,
    Reasoning,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunResumed,
    RunStarted,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallRecord,
    ToolCallStarted,
)
from cleveragents.tool.frozen import quick_init
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, session_pb2, types_pb2
from cleveragents.wire.bounds import fit_frame
from cleveragents.wire.deltas import delta_from_pb, fill_delta
from cleveragents.wire.frames import frame, unframe
from cleveragents.wire.jsonfields import dumps, parse_json_object
from cleveragents.wire.requests import RunRequest, run_request_from_pb, started_spec
from cleveragents.wire.timestamps import seconds_of, set_time
from cleveragents.wire.values import (
    ConvertedRecords,
    RecordDecoder,
    call_from_pb,
    fill_call,
    fill_record,
    fill_result,
    record_from_pb,
    result_from_pb,
    usage_from_pb,
)

__all__ = [
    "SKIPPED_RECORD",
    "EventEncoder",
    "LoggedEvent",
    "check_frame",
    "decode_frame",
    "event_from_pb",
    "event_to_pb",
    "events_of",
    "request_of_started",
    "result_message",
]


class EventEncoder:
    """Encodes the events of one run as frames, each stamped with its sequence and the time.

    ``accepted`` is the request as the sidecar accepted it: ``run_started`` carries it. A
    frame over ``limit`` bytes (0: no limit) is made to fit (``cleveragents.wire.bounds``);
    ``OversizedEvent`` when it cannot be. A frame under it costs nothing more. One known to be
    over it from its outputs' sizes is not serialised whole first, and a result whose records
    cannot fit is converted without them (the bytes are those the whole one cut gives).

    Each record is converted once: its ``tool_call_completed`` event's protobuf is kept until
    the terminal event, and copied into its result. What is kept is bounded: records whose
    outputs add up to ``limit`` bytes (a result past it omits its history anyway), or to
    ``KEPT_OUTPUT_BYTES`` with no limit; a record beyond that is converted again.
    """

    __slots__ = ("_accepted", "_converted", "_keep", "_limit", "_run_id")

    def __init__(self, run_id: str, accepted: RunRequest, limit: int = 0) -> None:
        self._run_id = run_id
        self._accepted = accepted
        self._limit = limit
        #: The records whose frames were made whole (not cut to fit), converted.
        self._converted: dict[int, tuple[ToolCallRecord, types_pb2.ToolCallRecord]] = {}
        #: The outputs' bytes still to be kept converted.
        self._keep = limit or KEPT_OUTPUT_BYTES

    def encode(self, sequence: int, event: RunEvent, failure_code: int = 0) -> bytes:
        """The frame of ``event``; ``failure_code`` is the status code a ``RunFailed`` carries."""
        pb = events_pb2.RunEvent(run_id=self._run_id, sequence=sequence)
        set_time(pb.time)
        limit = self._limit
        if limit and isinstance(event, _TERMINALS):
            records = event.result.tool_call_history
            if sum(r.known_output_size() for r in records) > limit:
                result = dataclasses.replace(event.result, tool_call_history=())
                event_to_pb(
                    dataclasses.replace(event, result=result), pb, failure_code=failure_code
                )
                omitted = getattr(pb, pb.WhichOneof("payload") or "").result
                omitted.tool_call_count, omitted.history_omitted = len(records), True
                return fit_frame(pb, limit)
        event_to_pb(
            event, pb, failure_code=failure_code, accepted=self._accepted,
            converted=self._converted,
        )  # fmt: skip
        if type(event) is ToolCallCompleted:
            record = event.record
            if limit and record.known_output_size() > limit:
                return fit_frame(pb, limit)
            item = frame(pb)
            if limit and len(item) > limit:
                return fit_frame(pb, limit)
            converted = pb.tool_call_completed.record
            if (size := len(converted.output)) <= self._keep:
                self._keep -= size
                self._converted[id(record)] = (record, converted)
            return item
        if type(event) in _TERMINAL_TYPES:
            self._converted.clear()  # the last event: nothing is converted again
        item = frame(pb)
        if limit and len(item) > limit:
            return fit_frame(pb, limit)
        return item


_TERMINALS = (RunCompleted, RunFailed, RunCancelled)
_TERMINAL_TYPES = frozenset(_TERMINALS)
#: Outputs' bytes an encoder with no frame limit keeps converted for its run's terminal result.
KEPT_OUTPUT_BYTES = 1 << 20


def event_to_pb(
    event: RunEvent,
    run_event: events_pb2.RunEvent,
    *,
    failure_code: int,
    accepted: RunRequest | None = None,
    converted: ConvertedRecords | None = None,
) -> None:
    """Fill ``run_event``'s payload from a core event.

    A ``RunStarted`` carries the ``accepted`` request (with only the event's own fields when
    there is none); a terminal event's result copies the records found in ``converted``.
    """
    match event:
        case ToolCallCompleted():
            fill_record(run_event.tool_call_completed.record, event.record)
        case ToolCallStarted():
            payload = run_event.tool_call_started
            payload.call_id = event.call_id
            payload.tool_name = event.tool_name
            payload.inputs = dumps(event.inputs)
            payload.iteration = event.iteration
        case ToolCallProgress():
            progress = run_event.tool_call_progress
            progress.call_id, progress.tool_name = event.call_id, event.tool_name
            progress.progress, progress.message = event.progress, event.message
            progress.iteration = event.iteration
            if event.total is not None:
                progress.total = event.total
        case IterationStarted():
            run_event.iteration_started.iteration = event.iteration
        case LLMResponded():
            responded = run_event.llm_responded
            responded.iteration = event.iteration
            responded.content = event.content
            calls = responded.tool_calls
            for call in event.tool_calls:
                fill_call(calls.add(), call)
            if event.usage is not None:
                responded.usage.input_tokens = event.usage.input_tokens
                responded.usage.output_tokens = event.usage.output_tokens
                responded.usage.reported_total_tokens = event.usage.reported_total_tokens
            if (reasoning := event.reasoning) is not None:
                pb_reasoning = responded.reasoning
                pb_reasoning.provider, pb_reasoning.summary = reasoning.provider, reasoning.summary
                pb_reasoning.items = reasoning.items
            if type(event) is LLMRefused:
                responded.refusal = event.refusal
        case ApprovalRequested():
            asked = run_event.approval_requested
            asked.call_id, asked.tool_name = event.call_id, event.tool_name
            asked.inputs, asked.iteration = dumps(event.inputs), event.iteration
            asked.reason, asked.how_to_answer = event.reason, event.how_to_answer
        case ApprovalDecided():
            decided = run_event.approval_decided
            decided.call_id, decided.approved = event.call_id, event.approved
            decided.reason, decided.decided_by = event.reason, event.by
            decided.iteration, decided.identity = event.iteration, event.identity
        case LLMDelta():
            fill_delta(run_event.llm_delta, event)
        case RunStarted():
            request = accepted if accepted is not None else RunRequest(event.prompt)
            started_spec(run_event.run_started.spec, request, event)
        case RunResumed():
            resumed = run_event.run_resumed
            resumed.after_sequence, resumed.iteration = event.after_sequence, event.iteration
            resumed.reason = event.reason
            resumed.rerun_call_ids.extend(event.rerun_call_ids)
            resumed.interrupted_call_ids.extend(event.interrupted_call_ids)
        case RunCompleted():
            fill_result(run_event.run_completed.result, event.result, converted)
        case RunFailed():
            failed = run_event.run_failed
            failed.code = failure_code
            failed.message = event.message
            fill_result(failed.result, event.result, converted)
        case RunCancelled():
            run_event.run_cancelled.reason = event.reason
            fill_result(run_event.run_cancelled.result, event.result, converted)
        case _:  # pragma: no cover - mypy checks that every event type is handled
            assert_never(event)


def event_from_pb(
    pb: events_pb2.RunEvent,
    record_from: RecordDecoder = record_from_pb,
    history_from: RecordDecoder | None = None,
) -> RunEvent:
    """A core event from a protobuf ``RunEvent`` (``RunFailed.error`` is left empty);
    ``record_from`` decodes the records it carries, ``history_from`` (else ``record_from``)
    those of a terminal event's result. ``ValueError`` when it has no payload."""
    kind = pb.WhichOneof("payload")
    history = record_from if history_from is None else history_from
    if kind == "tool_call_completed":
        return ToolCallCompleted(record_from(pb.tool_call_completed.record))
    if kind == "tool_call_started":
        s = pb.tool_call_started
        return ToolCallStarted(
            s.call_id, s.tool_name, parse_json_object(s.inputs, "inputs"), s.iteration
        )
    if kind == "tool_call_progress":
        p = pb.tool_call_progress
        total = p.total if p.HasField("total") else None
        return ToolCallProgress(p.call_id, p.tool_name, p.progress, total, p.message, p.iteration)
    if kind == "iteration_started":
        return IterationStarted(pb.iteration_started.iteration)
    if kind == "llm_responded":
        r = pb.llm_responded
        usage = usage_from_pb(r.usage) if r.HasField("usage") else None
        reasoning = None
        if r.HasField("reasoning"):  # items_omitted: "" items, so the turn goes back plain
            reasoning = Reasoning(r.reasoning.provider, r.reasoning.summary, r.reasoning.items)
        calls = tuple(map(call_from_pb, r.tool_calls))
        if r.refusal:
            return LLMRefused(r.iteration, r.content, calls, usage, reasoning, r.refusal)
        return LLMResponded(r.iteration, r.content, calls, usage, reasoning)
    if kind == "llm_delta":
        return delta_from_pb(pb.llm_delta)
    if kind == "run_started":
        spec = pb.run_started.spec
        return RunStarted(spec.run_id, spec.prompt, tuple(spec.tool_names), spec.max_iterations)
    if kind == "run_completed":
        return RunCompleted(result_from_pb(pb.run_completed.result, history))
    if kind == "run_failed":
        return RunFailed(pb.run_failed.message, result_from_pb(pb.run_failed.result, history))
    if kind == "run_cancelled":
        c = pb.run_cancelled
        return RunCancelled(c.reason, result_from_pb(c.result, history))
    if kind == "approval_requested":
        a = pb.approval_requested
        return ApprovalRequested(
            a.call_id,
            a.tool_name,
            parse_json_object(a.inputs, "inputs"),
            a.iteration,
            a.reason,
            a.how_to_answer,
        )
    if kind == "approval_decided":
        d = pb.approval_decided
        return ApprovalDecided(
            d.call_id, d.approved, d.reason, d.decided_by, d.iteration, d.identity
        )
    if kind == "run_resumed":
        b = pb.run_resumed
        return RunResumed(
            b.after_sequence, b.iteration, b.reason, tuple(b.rerun_call_ids),
            tuple(b.interrupted_call_ids),
        )  # fmt: skip
    raise ValueError(f"RunEvent {pb.sequence} has no payload")


@quick_init
@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """A frame of a run's log, decoded: where it sits, when it happened and what it says.

    ``failure_code`` is the status code of a ``run_failed`` event (0 for any other).
    """

    run_id: str
    sequence: int
    time: float
    event: RunEvent
    failure_code: int = 0


#: What stands for each record of a terminal event's history read with ``history=False``.
SKIPPED_RECORD = ToolCallRecord("", {}, {}, 0.0, True, None, 0)


def decode_frame(item: bytes, *, history: bool = True) -> LoggedEvent:
    """The event a frame holds; ``ValueError`` (or protobuf's ``DecodeError``) if it is bad.

    ``history=False``: each record of a terminal event's result is ``SKIPPED_RECORD`` (their
    number is kept), for a reader that had them from their own ``tool_call_completed``
    events: a long run's last frame is then not decoded record by record again."""
    pb = unframe(item)
    code = pb.run_failed.code if pb.WhichOneof("payload") == "run_failed" else 0
    event = event_from_pb(pb) if history else event_from_pb(pb, history_from=_skipped)
    return LoggedEvent(pb.run_id, pb.sequence, seconds_of(pb.time), event, code)


def _skipped(pb: types_pb2.ToolCallRecord) -> ToolCallRecord:
    return SKIPPED_RECORD


def check_frame(item: bytes, run_id: str, sequence: int) -> None:
    """Raise ``ValueError`` unless ``item`` is the frame of event ``sequence`` of ``run_id``."""
    try:
        pb = unframe(item)
    except (IndexError, DecodeError) as exc:
        raise ValueError(f"event {sequence} does not decode: {exc}") from None
    if pb.run_id != run_id or pb.sequence != sequence or pb.WhichOneof("payload") is None:
        raise ValueError(
            f"event {sequence} is not what the log holds there (run {pb.run_id!r}, "
            f"sequence {pb.sequence}, payload {pb.WhichOneof('payload')})"
        )


def request_of_started(item: bytes) -> RunRequest:
    """The accepted request that a ``run_started`` frame carries."""
    return run_request_from_pb(unframe(item).run_started.spec)


def result_message(item: bytes) -> types_pb2.ToolCallRunResult | None:
    """The result a terminal frame carries, still encoded as protobuf (``None`` if the frame
    does not end a run): the sidecar answers ``GetRun`` with it without converting it again."""
    pb = unframe(item)
    kind = pb.WhichOneof("payload")
    if kind == "run_completed":
        return pb.run_completed.result
    if kind == "run_failed":
        return pb.run_failed.result
    if kind == "run_cancelled":
        return pb.run_cancelled.result
    return None


def events_of(
    response: service_pb2.StreamToolLoopResponse
    | service_pb2.WatchRunResponse
    | session_pb2.SessionResponse,
) -> Sequence[events_pb2.RunEvent]:
    """The events one streamed response carries, oldest first.

    The sidecar sets ``events`` or ``event``, never both; were both set, ``event`` would come
    last (as the Node.js client reads it too).
    """
    if not response.HasField("event"):
        return response.events
    return [*response.events, response.event] if response.events else (response.event,)
