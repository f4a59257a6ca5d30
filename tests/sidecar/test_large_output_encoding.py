"""A large tool output is encoded as JSON once per run, and every form of it stays as it was.

The count is structural: a counting stand-in for the JSON encoders (``jsontext.Encoder``, the
one the core and the wire use, and ``json.dumps``) counts the texts of at least the output's
size made while a real sidecar runs the tool, redacts the record, logs and streams its events
and feeds the result to the model. The other tests pin the bytes that must not change: the
frame, the model's tool message, the redaction and the frame size limit at its boundary.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.secrets import REDACTED, RedactingRunner
from cleveragents.tool import (
    RunCompleted,
    RunEvent,
    ToolCall,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    ToolRegistry,
    ToolSpec,
    jsontext,
)
from cleveragents.tool.loop.batch import feedback
from cleveragents.toolruntime.v1 import events_pb2
from cleveragents.wire import EventEncoder, RunRequest, event_to_pb, timestamps
from cleveragents.wire.bounds import fit_frame
from cleveragents.wire.frames import frame, unframe

from .conftest import ServerTools, SidecarFactory, call, turn

MIB = 1024 * 1024
SECRET = "k4-test-secret-value-0123"
#: A top-level string (the usual large output) and rows of nested JSON, about 256 KiB each; the
#: strings hold what a separator-blind shortcut would get wrong.
SHAPES = ("string", "nested")


def _output(shape: str) -> dict[str, Any]:
    if shape == "string":
        return {"result": 'a, b: "c"\n\\ é ✓ ' * (MIB // 64), "n": 1, "ok": True}
    return {"rows": [{"id": i, "text": "x, y: z é", "v": [0.5, None]} for i in range(MIB // 160)]}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _CountingEncodes:
    """Counts the JSON texts of ``size`` characters or more that the encoders make."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
        self.count = 0
        encode, dumps = jsontext.Encoder.__call__, json.dumps

        def counted_encode(encoder: jsontext.Encoder, value: Any) -> str:
            return self._seen(encode(encoder, value), size)

        def counted_dumps(value: Any, **options: Any) -> str:
            return self._seen(dumps(value, **options), size)

        monkeypatch.setattr(jsontext.Encoder, "__call__", counted_encode)
        monkeypatch.setattr(json, "dumps", counted_dumps)

    def _seen(self, text: str, size: int) -> str:
        self.count += len(text) >= size
        return text


@pytest.fixture
def large_tool(server_tools: ServerTools) -> dict[str, Any]:
    """A server tool ``large`` returning the output put in the yielded dict's ``output``."""
    holder: dict[str, Any] = {}

    async def large(inputs: Any) -> dict[str, Any]:
        output: dict[str, Any] = holder["output"]
        return output

    server_tools.registry.register(ToolSpec("large", "A large output."), large)
    return holder


@pytest.mark.parametrize(("shape", "encodes"), [("string", 1), ("nested", 2)])
async def test_a_large_output_is_encoded_once_per_form_in_a_sidecar_run(
    make_sidecar: SidecarFactory,
    large_tool: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    shape: str,
    encodes: int,
) -> None:
    large_tool["output"] = output = _output(shape)
    monkeypatch.setenv("K4_TEST_API_KEY", SECRET)  # so that the runner redacts every output
    sidecar = await make_sidecar()
    counting = _CountingEncodes(monkeypatch, len(_compact(output)) * 9 // 10)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e.event async for e in client.stream_tool_loop(
            "go", script=[turn("", call("c1", "large")), turn("done")], tool_names=["large"]
        )]  # fmt: skip

    records = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert [dict(r.output) for r in records] == [output]
    # One text serves the redaction, the model's message, the frame and the final result: a
    # top-level string's compact form is cut from it; a nested output's is encoded once more.
    assert counting.count == encodes


@pytest.mark.parametrize("shape", SHAPES)
async def test_the_frame_and_the_model_message_of_a_large_output_are_unchanged(
    shape: str,
) -> None:
    output = _output(shape)
    registry = ToolRegistry()
    registry.register(ToolSpec("large", "A large output."), lambda inputs: output)
    record = await RedactingRunner(registry, secrets=(SECRET,)).run(
        ToolCall("c1", "large", {}), iteration=1
    )

    item = EventEncoder("run-1", RunRequest("go")).encode(3, ToolCallCompleted(record))

    decoded = unframe(item)
    expected = events_pb2.RunEvent(run_id="run-1", sequence=3)
    expected.time.CopyFrom(decoded.time)
    pb = expected.tool_call_completed.record
    pb.tool_name, pb.inputs, pb.output = "large", "{}", _compact(output)
    pb.duration_ms, pb.success, pb.iteration, pb.call_id = record.duration_ms, True, 1, "c1"
    pb.started_at.CopyFrom(decoded.tool_call_completed.record.started_at)
    assert item == frame(expected)
    message = feedback(record)
    assert message.content == json.dumps(output, ensure_ascii=False)
    assert not message.is_error


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_secret_deep_inside_a_large_output_is_in_none_of_its_forms(shape: str) -> None:
    output = _output(shape)
    if shape == "string":
        middle = len(output["result"]) // 2
        output["result"] = f"{output['result'][:middle]} {SECRET} {output['result'][middle:]}"
    else:
        output["rows"][len(output["rows"]) // 2]["text"] = f"key {SECRET}"
    registry = ToolRegistry()
    registry.register(ToolSpec("large", "A large output."), lambda inputs: output)
    record = await RedactingRunner(registry, secrets=(SECRET,)).run(
        ToolCall("c1", "large", {}), iteration=1
    )

    item = EventEncoder("run-1", RunRequest("go")).encode(3, ToolCallCompleted(record))

    redacted = json.loads(json.dumps(output).replace(SECRET, REDACTED))
    assert record.success
    assert dict(record.output) == redacted
    assert unframe(item).tool_call_completed.record.output == _compact(redacted)
    assert feedback(record).content == json.dumps(redacted, ensure_ascii=False)
    assert SECRET.encode() not in item


class _FixedClock:
    """The clock events are stamped with, stopped: a frame's size then depends on nothing else."""

    @staticmethod
    def time_ns() -> int:
        return 1_700_000_000_123_456_789


async def test_a_frame_of_exactly_the_limit_is_kept_and_one_byte_more_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timestamps, "time", _FixedClock)
    output = _output("string")
    registry = ToolRegistry()
    registry.register(ToolSpec("large", "A large output."), lambda inputs: output)
    record = await RedactingRunner(registry, secrets=(SECRET,)).run(
        ToolCall("c1", "large", {}), iteration=1
    )
    whole = EventEncoder("run-1", RunRequest("go")).encode(3, ToolCallCompleted(record))

    kept = EventEncoder("run-1", RunRequest("go"), len(whole)).encode(3, ToolCallCompleted(record))
    cut = EventEncoder("run-1", RunRequest("go"), len(whole) - 1).encode(
        3, ToolCallCompleted(record)
    )

    assert kept == whole
    assert len(cut) <= len(whole) - 1
    pb = unframe(cut).tool_call_completed.record
    assert pb.output_truncated
    assert pb.output_bytes == len(_compact(output).encode())
    kept_text = json.loads(pb.output)["truncated_output"]
    assert _compact(output).startswith(kept_text)
    assert pb.output == json.dumps({"truncated_output": kept_text}, ensure_ascii=False)


async def _oversized_events(limit: int) -> list[RunEvent]:
    output = _output("string")
    registry = ToolRegistry()
    registry.register(ToolSpec("large", "A large output."), lambda inputs: output)
    record = await RedactingRunner(registry, secrets=(SECRET,)).run(
        ToolCall("c1", "large", {}), iteration=1
    )
    assert len(_compact(output)) > limit
    result = ToolCallRunResult("done", (record,), 2, False)
    return [ToolCallCompleted(record), RunCompleted(result)]


async def test_an_oversized_event_is_the_frame_cutting_the_whole_one_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timestamps, "time", _FixedClock)
    limit = 64 * 1024
    encoder = EventEncoder("run-1", RunRequest("go"), limit)

    for event in await _oversized_events(limit):
        whole = events_pb2.RunEvent(run_id="run-1", sequence=3)
        timestamps.set_time(whole.time)
        event_to_pb(event, whole, failure_code=0)

        assert encoder.encode(3, event) == fit_frame(whole, limit)


async def test_a_result_whose_records_cannot_fit_is_framed_without_converting_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = 64 * 1024
    _, completed = await _oversized_events(limit)
    made: list[str] = []
    compact = ToolCallRecord.output_json_compact

    def counted(record: ToolCallRecord) -> str:
        made.append(record.call_id)
        return compact(record)

    monkeypatch.setattr(ToolCallRecord, "output_json_compact", counted)

    item = EventEncoder("run-1", RunRequest("go"), limit).encode(9, completed)

    result = unframe(item).run_completed.result
    assert (result.history_omitted, result.tool_call_count, result.content) == (True, 1, "done")
    assert made == []  # its record's text was neither cut from its spaced text nor copied


async def test_an_output_cut_to_fit_its_frame_is_not_encoded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = 64 * 1024
    completed, _ = await _oversized_events(limit)
    counting = _CountingEncodes(monkeypatch, limit // 2)

    item = EventEncoder("run-1", RunRequest("go"), limit).encode(3, completed)

    assert unframe(item).tool_call_completed.record.output_truncated
    assert counting.count == 0  # its kept start is quoted by two replacements, not re-escaped
