"""Run events: what stream_tool_loop yields and on_event receives."""

import dataclasses
from typing import Any

import pytest

from cleveragents.tool import (
    IterationStarted,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunStarted,
    ScriptedLLMCaller,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    ToolCallStarted,
    ToolRegistry,
    Usage,
)

from .conftest import (
    RaisingLLMCaller,
    always_asks,
    asks,
    collect,
    final,
    make_runtime,
    recording_llm,
)

CONTEXT_KEYS = {"sandbox_root": "/srv/box", "resource_bindings": {"db": "pg://x"}}


def context() -> ToolActorContext:
    return ToolActorContext(sandbox_root="/srv/box", resource_bindings={"db": "pg://x"})


def two_iteration_llm() -> ScriptedLLMCaller:
    return recording_llm(
        [
            asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="Adding.", usage=Usage(10, 2)),
            final("3", usage=Usage(20, 1)),
        ]
    )


async def test_two_iteration_run_yields_the_exact_event_sequence(registry: ToolRegistry) -> None:
    events = await collect(make_runtime(registry, two_iteration_llm()).stream_tool_loop("hi"))

    assert [type(e) for e in events] == [
        RunStarted,
        IterationStarted,
        LLMResponded,
        ToolCallStarted,
        ToolCallCompleted,
        IterationStarted,
        LLMResponded,
        RunCompleted,
    ]
    assert [e.iteration for e in events if isinstance(e, IterationStarted)] == [1, 2]


async def test_event_payloads_describe_the_run(registry: ToolRegistry) -> None:
    runtime = make_runtime(registry, two_iteration_llm(), max_iterations=7)

    events = await collect(runtime.stream_tool_loop("What is 1 + 2?", context(), run_id="run-9"))

    started, _, responded, call_started, call_completed, _, answered, completed = events
    assert started == RunStarted("run-9", "What is 1 + 2?", ("add", "echo", "boom"), 7)
    assert isinstance(responded, LLMResponded)
    assert (responded.iteration, responded.content, responded.usage) == (1, "Adding.", Usage(10, 2))
    assert list(responded.tool_calls) == [ToolCall("c1", "add", {"a": 1, "b": 2})]
    assert isinstance(call_started, ToolCallStarted)
    assert (call_started.call_id, call_started.tool_name, call_started.iteration) == (
        "c1",
        "add",
        1,
    )
    assert isinstance(call_completed, ToolCallCompleted)
    assert call_completed.record.output == {"result": 3}
    assert isinstance(answered, LLMResponded)
    assert (answered.iteration, answered.content, list(answered.tool_calls)) == (2, "3", [])
    assert isinstance(completed, RunCompleted)
    assert completed.result.content == "3"
    assert completed.result.run_id == "run-9"
    assert completed.result.usage == Usage(30, 3)
    assert completed.result.tool_call_history == (call_completed.record,)


async def test_tool_call_started_inputs_equal_the_record_inputs(registry: ToolRegistry) -> None:
    llm = recording_llm([asks(ToolCall("c1", "echo", {"q": 1})), final()])

    events = await collect(make_runtime(registry, llm).stream_tool_loop("hi", context()))

    (call_started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    (call_completed,) = [e for e in events if isinstance(e, ToolCallCompleted)]
    assert call_started.inputs == {"q": 1, **CONTEXT_KEYS}
    assert call_started.inputs == call_completed.record.inputs


async def test_every_call_has_exactly_one_started_and_one_completed_event(
    registry: ToolRegistry,
) -> None:
    calls = [
        ToolCall("ok", "add", {"a": 1, "b": 1}),
        ToolCall("unknown", "nope", {}),
        ToolCall("invalid", "add", {"a": "x", "b": 1}),
        ToolCall("raises", "boom", {}),
    ]
    llm = recording_llm([asks(*calls), final()])

    events = await collect(make_runtime(registry, llm).stream_tool_loop("hi"))

    started = [e.call_id for e in events if isinstance(e, ToolCallStarted)]
    completed = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert sorted(started) == sorted(c.id for c in calls)
    assert sorted(r.call_id for r in completed) == sorted(c.id for c in calls)
    assert {r.call_id: r.success for r in completed} == {
        "ok": True,
        "unknown": False,
        "invalid": False,
        "raises": False,
    }


async def test_each_call_starts_before_it_completes(registry: ToolRegistry) -> None:
    calls = [ToolCall("a", "add", {"a": 1, "b": 1}), ToolCall("b", "echo", {})]
    llm = recording_llm([asks(*calls), final()])

    events = await collect(make_runtime(registry, llm).stream_tool_loop("hi"))

    for call in calls:
        started_at = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, ToolCallStarted) and e.call_id == call.id
        )
        completed_at = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, ToolCallCompleted) and e.record.call_id == call.id
        )
        assert started_at < completed_at


async def test_max_iterations_run_ends_with_run_completed(registry: ToolRegistry) -> None:
    llm = recording_llm(always_asks("echo", {}))

    events = await collect(make_runtime(registry, llm, max_iterations=2).stream_tool_loop("hi"))

    terminal = events[-1]
    assert isinstance(terminal, RunCompleted)
    assert terminal.result.terminated_by_limit is True
    assert terminal.result.stop_reason is StopReason.MAX_ITERATIONS
    assert sum(isinstance(e, IterationStarted) for e in events) == 2


async def test_failing_llm_ends_the_stream_with_run_failed_without_raising(
    registry: ToolRegistry,
) -> None:
    original = RuntimeError("rate limited")
    llm = RaisingLLMCaller([asks(ToolCall("c1", "add", {"a": 1, "b": 2}))], original)

    events = await collect(make_runtime(registry, llm).stream_tool_loop("hi"))

    terminal = events[-1]
    assert isinstance(terminal, RunFailed)
    assert terminal.error is original
    assert "the LLM call of iteration 2 failed: RuntimeError: rate limited" in terminal.message
    assert terminal.result.stop_reason is StopReason.ERROR
    assert [r.call_id for r in terminal.result.tool_call_history] == ["c1"]
    assert sum(isinstance(e, (RunCompleted, RunFailed, RunCancelled)) for e in events) == 1


async def test_on_event_receives_the_same_events_as_the_stream(registry: ToolRegistry) -> None:
    streamed = await collect(make_runtime(registry, two_iteration_llm()).stream_tool_loop("hi"))
    received: list[RunEvent] = []

    result = await make_runtime(registry, two_iteration_llm()).arun_tool_loop(
        "hi", on_event=received.append
    )

    assert [type(e) for e in received] == [type(e) for e in streamed]
    timing_free = [e for e in received if not isinstance(e, (ToolCallCompleted, RunCompleted))]
    assert timing_free == [
        e for e in streamed if not isinstance(e, (ToolCallCompleted, RunCompleted))
    ]
    terminal = received[-1]
    assert isinstance(terminal, RunCompleted)
    assert terminal.result == result


def some_record() -> ToolCallRecord:
    return ToolCallRecord("t", {}, {}, 0.0, True, None, 1)


def some_result() -> ToolCallRunResult:
    return ToolCallRunResult("", (), 0, False)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (RunStarted("r", "p", (), 1), "prompt"),
        (IterationStarted(1), "iteration"),
        (LLMResponded(1, "", (), None), "content"),
        (ToolCallStarted("c", "t", {}, 1), "inputs"),
        (ToolCallCompleted(some_record()), "record"),
        (RunCompleted(some_result()), "result"),
        (RunFailed("m", some_result()), "message"),
        (RunCancelled("why", some_result()), "reason"),
    ],
)
def test_events_are_frozen_dataclasses(event: Any, field: str) -> None:
    assert dataclasses.is_dataclass(event)

    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, field, None)
