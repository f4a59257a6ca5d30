"""A run's last event carries every record its ``tool_call_completed`` events did, converted
once: the result's history holds the records those events' frames hold, and a record that no
event carried (or another record equal to one that did) is converted itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from cleveragents.tool import (
    ErrorKind,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    Usage,
)
from cleveragents.toolruntime.v1 import types_pb2
from cleveragents.wire import EventEncoder, RunRequest, record_to_pb, result_to_pb
from cleveragents.wire.events import KEPT_OUTPUT_BYTES
from cleveragents.wire.frames import unframe

TERMINALS: dict[str, Callable[[ToolCallRunResult], RunEvent]] = {
    "run_completed": RunCompleted,
    "run_failed": lambda result: RunFailed("it broke", result),
    "run_cancelled": lambda result: RunCancelled("asked to", result),
}


def _record(call_id: str, **output: object) -> ToolCallRecord:
    return ToolCallRecord(
        "probe", {"q": call_id}, output, 1.5, True, None, 1, call_id, None, 1_700_000_000.25
    )


def _terminal_result(item: bytes, kind: str) -> types_pb2.ToolCallRunResult:
    pb = unframe(item)
    assert pb.WhichOneof("payload") == kind
    result: types_pb2.ToolCallRunResult = getattr(pb, kind).result
    return result


@pytest.mark.parametrize("kind", TERMINALS)
def test_a_terminal_result_holds_the_records_its_events_carried(kind: str) -> None:
    first, second = _record("c1", n=1), _record("c2", text="é ✓")
    failed = ToolCallRecord("probe", {}, {}, 0.5, False, "no", 2, "c3", ErrorKind.EXCEPTION)
    encoder = EventEncoder("run-1", RunRequest("go"))
    carried = [
        unframe(encoder.encode(sequence, ToolCallCompleted(record))).tool_call_completed.record
        for sequence, record in enumerate((first, second, failed), 2)
    ]
    result = ToolCallRunResult("done", (first, second, failed), 3, False, Usage(4, 5, 9))

    held = _terminal_result(encoder.encode(9, TERMINALS[kind](result)), kind)

    assert list(held.tool_call_history) == carried
    assert held == result_to_pb(result)


def test_a_record_no_event_carried_is_converted_in_the_terminal_result() -> None:
    seen, unseen = _record("c1", n=1), _record("c2", n=2)
    encoder = EventEncoder("run-1", RunRequest("go"))
    encoder.encode(2, ToolCallCompleted(seen))
    result = ToolCallRunResult("done", (seen, unseen), 2, False)

    held = _terminal_result(encoder.encode(3, RunCompleted(result)), "run_completed")

    assert list(held.tool_call_history) == [record_to_pb(seen), record_to_pb(unseen)]


def test_another_record_with_the_same_call_id_is_not_taken_for_the_one_carried() -> None:
    carried = _record("c1", n=1)
    other = dataclasses.replace(carried, output={"n": 2})
    encoder = EventEncoder("run-1", RunRequest("go"))
    encoder.encode(2, ToolCallCompleted(carried))
    result = ToolCallRunResult("done", (other,), 2, False)

    held = _terminal_result(encoder.encode(3, RunCompleted(result)), "run_completed")

    assert held.tool_call_history[0].output == '{"n":2}'


def test_records_past_what_the_encoder_keeps_are_converted_in_the_terminal_result() -> None:
    kept, big, after = (
        _record("c1", n=1),
        _record("c2", text="x" * KEPT_OUTPUT_BYTES),
        _record("c3"),
    )
    encoder = EventEncoder("run-1", RunRequest("go"))
    for sequence, record in enumerate((kept, big, after), 2):
        encoder.encode(sequence, ToolCallCompleted(record))
    result = ToolCallRunResult("done", (kept, big, after), 3, False)

    held = _terminal_result(encoder.encode(9, RunCompleted(result)), "run_completed")

    assert held == result_to_pb(result)
