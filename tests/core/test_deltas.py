"""Streamed LLM answers: ScriptedLLMCaller's deltas and the runtime's LLMDelta events."""

import json
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.tool import (
    IterationStarted,
    LLMDelta,
    LLMRequest,
    LLMResponded,
    LLMResponse,
    ResponseDelta,
    RunEvent,
    ScriptedLLMCaller,
    ToolCall,
    ToolRegistry,
    Usage,
)
from cleveragents.tool.streaming import split_response
from cleveragents.toolruntime.v1 import events_pb2
from cleveragents.wire import delta_from_pb, fill_delta, llm_delta_request, response_delta_from_pb

from .conftest import asks, collect, final, make_runtime


def assemble(deltas: list[ResponseDelta] | list[LLMDelta]) -> tuple[str, list[dict[str, Any]]]:
    """The content and tool calls (id, name, parsed arguments) a list of deltas spells."""
    text, calls = "", dict[int, dict[str, str]]()
    for delta in deltas:
        if delta.tool_call_index is None:
            text += delta.text
            continue
        call = calls.setdefault(delta.tool_call_index, {"id": "", "name": "", "arguments": ""})
        call["id"] = call["id"] or delta.tool_call_id
        call["name"] = call["name"] or delta.tool_name
        call["arguments"] += delta.arguments
    return text, [
        {"id": c["id"], "name": c["name"], "arguments": json.loads(c["arguments"])}
        for _, c in sorted(calls.items())
    ]


def streamed(script: list[LLMResponse]) -> ScriptedLLMCaller:
    return ScriptedLLMCaller(script, stream=True)


async def test_streaming_scripted_caller_sends_deltas_that_spell_its_answer() -> None:
    answer = asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="Adding two numbers now.")
    got: list[ResponseDelta] = []
    response = await streamed([answer]).call(LLMRequest([], [], 1, got.append))

    assert response is answer
    assert len(got) > 3
    assert assemble(got) == (
        "Adding two numbers now.",
        [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}],
    )


async def test_a_scripted_caller_that_does_not_stream_sends_no_deltas() -> None:
    got: list[ResponseDelta] = []
    await ScriptedLLMCaller([final("hello world")]).call(LLMRequest([], [], 1, got.append))

    assert got == []


class _Unread:
    """A deltas sink that says no one reads it (as the loop's does, see ``deltas_read``)."""

    read = False

    def __init__(self) -> None:
        self.got: list[ResponseDelta] = []

    def __call__(self, delta: ResponseDelta) -> None:
        self.got.append(delta)


async def test_a_scripted_caller_splits_no_answer_for_a_sink_no_one_reads() -> None:
    sink = _Unread()
    response = await streamed([final("hello world")]).call(LLMRequest([], [], 1, sink))

    assert response == final("hello world")
    assert sink.got == []


async def test_a_scripted_caller_with_a_delay_streams_to_a_sink_no_one_reads_yet() -> None:
    sink = _Unread()  # someone may come to read it while the answer streams
    llm = ScriptedLLMCaller([final("hello world")], stream=True, delta_delay_s=0.001)
    await llm.call(LLMRequest([], [], 1, sink))

    assert assemble(sink.got) == ("hello world", [])


async def test_a_run_whose_consumer_reads_no_deltas_emits_none_until_it_does(
    registry: ToolRegistry,
) -> None:
    llm = streamed([asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="let me add"),
                    final("three it is")])  # fmt: skip
    events: list[RunEvent] = []
    reading = False

    def emit(event: RunEvent) -> None:
        nonlocal reading
        events.append(event)
        reading = reading or isinstance(event, LLMResponded)  # from the second call on

    await make_runtime(registry, llm).arun_tool_loop(
        "add", on_event=emit, deltas_read=lambda: reading
    )

    deltas = [e for e in events if isinstance(e, LLMDelta)]
    assert {d.iteration for d in deltas} == {2}
    assert assemble(deltas) == ("three it is", [])


async def test_usage_rides_on_the_last_delta() -> None:
    got: list[ResponseDelta] = []
    await streamed([final("a b c", Usage(3, 4))]).call(LLMRequest([], [], 1, got.append))

    assert [d.usage for d in got] == [None, None, Usage(3, 4)]


async def test_runtime_emits_llm_deltas_between_iteration_started_and_llm_responded(
    registry: ToolRegistry,
) -> None:
    llm = streamed([asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="let me add"),
                    final("three it is")])  # fmt: skip
    events = await collect(make_runtime(registry, llm).stream_tool_loop("add"))

    for iteration in (1, 2):
        begin = events.index(IterationStarted(iteration))
        end = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, LLMResponded) and e.iteration == iteration
        )
        between = events[begin + 1 : end]
        assert between
        assert all(isinstance(e, LLMDelta) for e in between)
        assert [e.index for e in between] == list(range(len(between)))  # type: ignore[union-attr]
        assert {e.iteration for e in between} == {iteration}  # type: ignore[union-attr]
        responded = events[end]
        assert isinstance(responded, LLMResponded)
        text, calls = assemble(between)  # type: ignore[arg-type]
        assert text == responded.content
        assert calls == [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
            for c in responded.tool_calls
        ]


async def test_a_consumer_that_skips_deltas_sees_the_events_of_a_caller_that_does_not_stream(
    registry: ToolRegistry,
) -> None:
    script = [asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="adding"), final("3")]

    def comparable(events: list[RunEvent]) -> list[Any]:
        out: list[Any] = []
        for event in events:
            if isinstance(event, LLMDelta):
                continue
            item: Any = event
            if hasattr(event, "record"):
                item = event.record.call_id  # durations differ
            elif hasattr(event, "result"):
                item = (type(event), event.result.content, event.result.iterations)
            out.append(item)
        return out

    whole = await collect(make_runtime(registry, ScriptedLLMCaller(script)).stream_tool_loop("x"))
    parts = await collect(make_runtime(registry, streamed(script)).stream_tool_loop("x"))

    assert not any(isinstance(e, LLMDelta) for e in whole)
    assert comparable(parts) == comparable(whole)


class ThreadedStreamingCaller:
    """A plain (worker-thread) caller that streams its deltas from that thread."""

    def __init__(self) -> None:
        self.thread = 0

    def call(self, request: LLMRequest) -> LLMResponse:
        self.thread = threading.get_ident()
        assert request.deltas is not None
        for word in ("from ", "a ", "thread"):
            request.deltas(ResponseDelta(text=word))
        return LLMResponse(content="from a thread")


async def test_deltas_sent_from_a_worker_thread_arrive_in_order_before_llm_responded(
    registry: ToolRegistry,
) -> None:
    caller = ThreadedStreamingCaller()
    events = await collect(make_runtime(registry, caller).stream_tool_loop("x"))

    assert caller.thread != threading.get_ident()
    kinds = [type(e).__name__ for e in events]
    assert kinds[1:6] == ["IterationStarted", "LLMDelta", "LLMDelta", "LLMDelta", "LLMResponded"]
    assert [e.text for e in events if isinstance(e, LLMDelta)] == ["from ", "a ", "thread"]


class LateDeltaCaller:
    """Keeps its sink and feeds it after the call returned (a buggy caller)."""

    def __init__(self) -> None:
        self.sink: Any = None

    async def call(self, request: LLMRequest) -> LLMResponse:
        if self.sink is not None:
            self.sink(ResponseDelta(text="late"))  # the first call's sink, after it returned
            return LLMResponse(content="second")
        self.sink = request.deltas
        return LLMResponse(tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 1})])


async def test_a_delta_sent_after_its_call_returned_is_dropped(registry: ToolRegistry) -> None:
    events = await collect(make_runtime(registry, LateDeltaCaller()).stream_tool_loop("x"))

    assert not any(isinstance(e, LLMDelta) for e in events)


async def test_a_raising_event_sink_does_not_reach_the_caller(registry: ToolRegistry) -> None:
    def sink(event: RunEvent) -> None:
        if isinstance(event, LLMDelta):
            raise RuntimeError("consumer bug")

    result = await make_runtime(registry, streamed([final("still fine")])).arun_tool_loop(
        "x", on_event=sink
    )

    assert result.content == "still fine"


_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=80)
_args = st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=20), max_size=4)


@settings(max_examples=150, deadline=None)
@given(content=_text, arguments=st.lists(_args, max_size=3))
def test_text_and_arguments_assembled_from_deltas_equal_the_response(
    content: str, arguments: list[dict[str, Any]]
) -> None:
    calls = [ToolCall(f"c{i}", f"t{i}", a) for i, a in enumerate(arguments)]
    response = LLMResponse(content=content, tool_calls=calls)

    text, assembled = assemble(list(split_response(response)))

    assert text == content
    assert assembled == [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]


def test_a_delta_round_trips_through_the_wire_with_the_providers_own_total() -> None:
    usage = Usage(10, 5, reported_total_tokens=40)
    event = LLMDelta(2, 7, "hi", usage=usage)
    pb = events_pb2.LlmDelta()
    fill_delta(pb, event, after_sequence=3)
    client = llm_delta_request("llm_2", 7, ResponseDelta("hi", usage=usage)).llm_delta

    assert delta_from_pb(events_pb2.LlmDelta.FromString(pb.SerializeToString())) == event
    assert response_delta_from_pb(client).usage == usage
