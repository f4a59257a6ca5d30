"""How the clients decode a stream's events: records decoded once, JSON fast paths."""

from __future__ import annotations

import dataclasses
import time

from cleveragents import wire as convert
from cleveragents.client import AsyncSidecarClient
from cleveragents.client.exchange import EventDecoder
from cleveragents.tool import (
    ErrorKind,
    LLMResponded,
    Message,
    Role,
    RunCompleted,
    ToolCall,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    ToolCallStarted,
    Usage,
    parse_call,
)
from cleveragents.toolruntime.v1 import events_pb2

from .conftest import echo_script


def _encoded(event: ToolCallCompleted | RunCompleted, sequence: int) -> events_pb2.RunEvent:
    pb = events_pb2.RunEvent(run_id="r1", sequence=sequence)
    convert.set_time(pb.time)
    convert.event_to_pb(event, pb, failure_code=0)
    return events_pb2.RunEvent.FromString(pb.SerializeToString())


def _record(call_id: str, output: dict[str, object]) -> ToolCallRecord:
    return ToolCallRecord(
        "echo", {"text": call_id}, output, 1.5, True, None, 1, call_id, None, time.time()
    )


async def test_the_result_shares_the_records_its_stream_already_delivered(
    client: AsyncSidecarClient,
) -> None:
    events = [e async for e in client.stream_tool_loop("go", script=echo_script(3))]
    delivered = [e.event.record for e in events if isinstance(e.event, ToolCallCompleted)]
    terminal = events[-1].event

    assert isinstance(terminal, RunCompleted)
    assert len(delivered) == 3
    assert all(a is b for a, b in zip(terminal.result.tool_call_history, delivered, strict=True))


def test_a_decoder_that_joins_late_decodes_the_records_it_did_not_see() -> None:
    seen, unseen = _record("c1", {"echo": "c1"}), _record("c2", {})
    result = ToolCallRunResult("done", (seen, unseen), 3, False, run_id="r1")
    decode = EventDecoder()

    first = decode(_encoded(ToolCallCompleted(seen), 5)).event
    last = decode(_encoded(RunCompleted(result), 12)).event

    assert isinstance(first, ToolCallCompleted)
    assert isinstance(last, RunCompleted)
    assert last.result.tool_call_history[0] is first.record
    assert last.result.tool_call_history == (seen, unseen)


def test_records_that_differ_in_any_field_are_not_confused() -> None:
    one = _record("c1", {"n": 1})
    failed = ToolCallRecord(
        "echo", one.inputs, {}, 0.0, False, "boom", 1, "c1", ErrorKind.EXCEPTION, one.started_at
    )
    decode = EventDecoder()

    decoded = [decode(_encoded(ToolCallCompleted(r), i)).event for i, r in enumerate((one, failed))]

    assert [e.record for e in decoded if isinstance(e, ToolCallCompleted)] == [one, failed]


def test_an_empty_object_decodes_to_a_new_dict_each_time() -> None:
    first = convert.parse_json_object("{}", "output")
    first["changed"] = True

    assert convert.parse_json_object("{}", "output") == {}


def test_an_empty_json_value_parses_to_a_new_dict_each_time() -> None:
    first = convert.parse_json("{}", "output")
    first["changed"] = True

    assert convert.parse_json("{}", "output") == {}


def test_a_logged_llm_responded_keeps_its_tool_calls_in_order() -> None:
    calls = (ToolCall("c1", "echo", {"text": "é"}), ToolCall("c2", "noop", {}))
    pb = events_pb2.RunEvent(run_id="r1", sequence=3)
    convert.event_to_pb(LLMResponded(1, "", calls, None), pb, failure_code=0)
    decoded = convert.event_from_pb(events_pb2.RunEvent.FromString(pb.SerializeToString()))

    assert isinstance(decoded, LLMResponded)
    assert decoded.tool_calls == calls


def test_a_message_with_tool_calls_survives_its_protobuf_form() -> None:
    calls = [ToolCall("c1", "echo", {"text": "é"}), ToolCall("c2", "noop", {})]
    message = Message(Role.ASSISTANT, "thinking", calls)

    assert convert.message_from_pb(convert.message_to_pb(message)) == message


def test_a_call_without_arguments_decodes_as_parse_call_makes_it_with_its_own_dict() -> None:
    pb = convert.call_to_pb(ToolCall("c1", "noop", {}))
    first, second = convert.call_from_pb(pb), convert.call_from_pb(pb)
    first.arguments["changed"] = True  # type: ignore[index]

    assert second == parse_call("c1", "noop", "{}") == ToolCall("c1", "noop", {})


def test_a_record_with_empty_inputs_and_output_decodes_to_new_dicts_each_time() -> None:
    record = _record("c1", {})
    record = dataclasses.replace(record, inputs={})
    pb = convert.record_to_pb(record)
    first = convert.record_from_pb(pb)
    first.inputs["changed"] = first.output["changed"] = True  # type: ignore[index]

    assert convert.record_from_pb(pb) == record


def test_a_started_call_without_inputs_decodes_to_a_new_dict_each_time() -> None:
    pb = events_pb2.RunEvent(run_id="r1", sequence=2)
    convert.event_to_pb(ToolCallStarted("c1", "noop", {}, 1), pb, failure_code=0)
    first = convert.event_from_pb(pb)
    assert isinstance(first, ToolCallStarted)
    first.inputs["changed"] = True  # type: ignore[index]

    assert convert.event_from_pb(pb) == ToolCallStarted("c1", "noop", {}, 1)


def test_a_logged_llm_responded_keeps_a_provider_total_above_input_plus_output() -> None:
    # A resumed run rebuilds its token count from the log: Gemini-style thinking tokens,
    # counted only in the provider's total, must survive it.
    usage = Usage(input_tokens=10, output_tokens=5, reported_total_tokens=40)
    pb = events_pb2.RunEvent(run_id="r1", sequence=3)
    convert.event_to_pb(LLMResponded(1, "hi", (), usage), pb, failure_code=0)
    decoded = convert.event_from_pb(events_pb2.RunEvent.FromString(pb.SerializeToString()))

    assert isinstance(decoded, LLMResponded)
    assert decoded.usage == usage
