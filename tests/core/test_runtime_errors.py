"""ToolCallingRuntime's error table, failing LLM callers, deadlines and cancellation."""

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from cleveragents.tool import (
    ErrorKind,
    LLMCallError,
    LLMResponse,
    RunCancelled,
    RunEvent,
    RunFailed,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolCallStarted,
    ToolRegistry,
    ToolRunner,
    ToolRuntimeError,
    ToolSpec,
)

from .conftest import (
    HangingTool,
    RaisingLLMCaller,
    SyncLLMCaller,
    WrongTypeLLMCaller,
    asks,
    final,
    make_runtime,
    recording_llm,
)

BLANK_PROMPTS = ["", "   ", "\n\t "]


# -- prompt ------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", BLANK_PROMPTS)
def test_blank_prompt_to_run_tool_loop_raises_value_error(
    registry: ToolRegistry, prompt: str
) -> None:
    llm = recording_llm([final()])

    with pytest.raises(ValueError, match="prompt must not be empty"):
        make_runtime(registry, llm).run_tool_loop(prompt)
    assert llm.calls == 0


@pytest.mark.parametrize("prompt", BLANK_PROMPTS)
async def test_blank_prompt_to_arun_tool_loop_raises_value_error(
    registry: ToolRegistry, prompt: str
) -> None:
    llm = recording_llm([final()])

    with pytest.raises(ValueError, match="prompt must not be empty"):
        await make_runtime(registry, llm).arun_tool_loop(prompt)
    assert llm.calls == 0


@pytest.mark.parametrize("prompt", BLANK_PROMPTS)
def test_blank_prompt_to_stream_tool_loop_raises_at_call_time(
    registry: ToolRegistry, prompt: str
) -> None:
    runtime = make_runtime(registry, recording_llm([final()]))

    with pytest.raises(ValueError, match="prompt must not be empty"):
        runtime.stream_tool_loop(prompt)


async def test_non_string_prompt_raises_type_error(registry: ToolRegistry) -> None:
    runtime = make_runtime(registry, recording_llm([final()]))

    with pytest.raises(TypeError, match="prompt must be a str, got int"):
        await runtime.arun_tool_loop(42)  # type: ignore[arg-type]


# -- construction ------------------------------------------------------------------------------


def test_registry_of_the_wrong_type_raises_type_error_at_construction(
    registry: ToolRegistry,
) -> None:
    with pytest.raises(TypeError, match="registry must be a ToolRegistry, got dict"):
        ToolCallingRuntime(
            registry={},  # type: ignore[arg-type]
            runner=ToolRunner(registry),
            llm_caller=recording_llm([]),
        )


def test_runner_of_the_wrong_type_raises_type_error_at_construction(
    registry: ToolRegistry,
) -> None:
    with pytest.raises(TypeError, match="runner must be a ToolRunner, got object"):
        ToolCallingRuntime(
            registry=registry,
            runner=object(),  # type: ignore[arg-type]
            llm_caller=recording_llm([]),
        )


def test_llm_caller_without_a_call_method_raises_type_error(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="llm_caller must have a call"):
        ToolCallingRuntime(
            registry,
            ToolRunner(registry),
            llm_caller=object(),  # type: ignore[arg-type]
        )


def test_router_of_the_wrong_type_raises_type_error(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="router must be a ToolCallRouter, got str"):
        ToolCallingRuntime(
            registry,
            ToolRunner(registry),
            recording_llm([]),
            router="openai",  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("max_iterations", [0, -1])
def test_max_iterations_below_one_raises_value_error(
    registry: ToolRegistry, max_iterations: int
) -> None:
    with pytest.raises(
        ValueError, match=f"max_iterations must be at least 1, got {max_iterations}"
    ):
        make_runtime(registry, recording_llm([]), max_iterations=max_iterations)


@pytest.mark.parametrize("max_iterations", [True, 2.0])
def test_max_iterations_that_is_not_an_int_raises_type_error(
    registry: ToolRegistry, max_iterations: Any
) -> None:
    with pytest.raises(TypeError, match="max_iterations must be an int"):
        make_runtime(registry, recording_llm([]), max_iterations=max_iterations)


def test_default_max_iterations_is_25(registry: ToolRegistry) -> None:
    runtime = ToolCallingRuntime(registry, ToolRunner(registry), recording_llm([]))

    assert runtime.max_iterations == 25


# -- the LLM caller fails ----------------------------------------------------------------------


async def test_llm_caller_that_raises_fails_the_run_with_llm_call_error(
    registry: ToolRegistry,
) -> None:
    original = ConnectionError("provider unreachable")
    llm = RaisingLLMCaller(
        [asks(ToolCall("c1", "add", {"a": 1, "b": 2}), content="Adding.")], original
    )
    context = ToolActorContext(plan_id="p")

    with pytest.raises(LLMCallError) as info:
        await make_runtime(registry, llm).arun_tool_loop("hi", context)

    error = info.value
    assert isinstance(error, ToolRuntimeError)
    assert error.__cause__ is original
    assert error.iteration == 2
    assert "iteration 2" in str(error)
    assert "ConnectionError: provider unreachable" in str(error)
    assert error.result.stop_reason is StopReason.ERROR
    assert error.result.terminated_by_limit is False
    assert error.result.iterations == 1  # LLM calls that completed
    assert error.result.content == "Adding."
    assert [r.call_id for r in error.result.tool_call_history] == ["c1"]
    assert error.tool_call_history == error.result.tool_call_history
    assert context.tool_call_history == list(error.result.tool_call_history)


async def test_llm_caller_failing_on_the_first_call_has_an_empty_history(
    registry: ToolRegistry,
) -> None:
    with pytest.raises(LLMCallError) as info:
        await make_runtime(registry, RaisingLLMCaller([], KeyError("x"))).arun_tool_loop("hi")

    assert info.value.iteration == 1
    assert info.value.result.tool_call_history == ()
    assert isinstance(info.value.__cause__, KeyError)


async def test_llm_caller_returning_something_else_than_llm_response_is_llm_call_error(
    registry: ToolRegistry,
) -> None:
    with pytest.raises(LLMCallError, match="iteration 1 returned dict, not an LLMResponse"):
        await make_runtime(registry, WrongTypeLLMCaller()).arun_tool_loop("hi")


async def test_sync_llm_caller_works_and_runs_off_the_event_loop_thread(
    registry: ToolRegistry,
) -> None:
    llm = SyncLLMCaller([asks(ToolCall("c1", "add", {"a": 2, "b": 3})), final("5")])

    result = await make_runtime(registry, llm).arun_tool_loop("hi")

    assert result.content == "5"
    assert result.tool_call_history[0].output == {"result": 5}
    assert len(llm.thread_ids) == 2
    assert threading.get_ident() not in llm.thread_ids


async def test_malformed_tool_calls_end_the_stream_with_run_failed(
    registry: ToolRegistry,
) -> None:
    not_a_tool_call: Any = {"id": "c1", "name": "add", "arguments": {}}
    bad = LLMResponse(tool_calls=[not_a_tool_call])
    runtime = make_runtime(registry, recording_llm([bad, final()]))
    events: list[RunEvent] = []

    async with asyncio.timeout(30):  # the bug makes the stream hang (for ever)
        async for event in runtime.stream_tool_loop("hi"):
            events.append(event)

    assert isinstance(events[-1], RunFailed)


# -- deadline ----------------------------------------------------------------------------------


async def test_run_deadline_closes_the_hanging_call_as_cancelled_and_returns() -> None:
    registry = ToolRegistry()
    hanging = HangingTool()
    registry.register(ToolSpec("hang"), hanging)
    llm = recording_llm([asks(ToolCall("c1", "hang", {"tag": "h"}), content="Waiting.")])
    context = ToolActorContext()
    events: list[RunEvent] = []

    result = await make_runtime(registry, llm).arun_tool_loop(
        "hi", context, timeout_s=0.1, on_event=events.append
    )

    assert result.stop_reason is StopReason.DEADLINE
    assert result.terminated_by_limit is False
    assert result.iterations == 1
    assert result.content == "Waiting."
    (record,) = result.tool_call_history
    assert record.success is False
    assert record.error_kind is ErrorKind.CANCELLED
    assert record.error == "cancelled: the run's deadline of 0.1s passed"
    assert record.call_id == "c1"
    assert record.output == {}
    assert context.tool_call_history == [record]
    assert hanging.cancelled == ["h"]
    assert isinstance(events[-1], RunCancelled)
    assert events[-1].result == result


async def test_run_deadline_keeps_finished_calls_of_the_batch() -> None:
    registry = ToolRegistry()
    hanging = HangingTool()
    registry.register(ToolSpec("hang"), hanging)
    registry.register(ToolSpec("quick"), lambda inputs: {"ok": True})
    llm = recording_llm([asks(ToolCall("q", "quick", {}), ToolCall("h", "hang", {}))])

    result = await make_runtime(registry, llm).arun_tool_loop("hi", timeout_s=0.1)

    quick, hang = result.tool_call_history
    assert (quick.call_id, quick.success, quick.output) == ("q", True, {"ok": True})
    assert (hang.call_id, hang.error_kind) == ("h", ErrorKind.CANCELLED)


# -- cancellation ------------------------------------------------------------------------------


async def test_cancelling_the_run_closes_parallel_calls_as_cancelled_and_reraises() -> None:
    registry = ToolRegistry()
    hanging = HangingTool(expected=2)
    registry.register(ToolSpec("hang"), hanging)
    llm = recording_llm(
        [asks(ToolCall("c1", "hang", {"tag": "one"}), ToolCall("c2", "hang", {"tag": "two"}))]
    )
    context = ToolActorContext()
    events: list[RunEvent] = []
    task = asyncio.create_task(
        make_runtime(registry, llm).arun_tool_loop("hi", context, on_event=events.append)
    )
    await hanging.wait_started()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert sorted(hanging.cancelled) == ["one", "two"]
    terminal = events[-1]
    assert isinstance(terminal, RunCancelled)
    assert terminal.result.stop_reason is StopReason.CANCELLED
    assert [(r.call_id, r.error_kind) for r in terminal.result.tool_call_history] == [
        ("c1", ErrorKind.CANCELLED),
        ("c2", ErrorKind.CANCELLED),
    ]
    started = [e.call_id for e in events if isinstance(e, ToolCallStarted)]
    completed = [e.record.call_id for e in events if isinstance(e, ToolCallCompleted)]
    assert sorted(started) == ["c1", "c2"]
    assert sorted(completed) == ["c1", "c2"]
    assert context.tool_call_history == list(terminal.result.tool_call_history)


async def test_cancelling_a_sequential_batch_closes_the_calls_not_yet_started() -> None:
    registry = ToolRegistry()
    hanging = HangingTool()
    registry.register(ToolSpec("hang"), hanging)
    llm = recording_llm(
        [asks(ToolCall("c1", "hang", {"tag": "one"}), ToolCall("c2", "hang", {"tag": "two"}))]
    )
    events: list[RunEvent] = []
    runtime = make_runtime(registry, llm, parallel_tool_calls=False)
    task = asyncio.create_task(runtime.arun_tool_loop("hi", on_event=events.append))
    await hanging.wait_started()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert hanging.started == ["one"]
    started = [e.call_id for e in events if isinstance(e, ToolCallStarted)]
    completed = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert started == ["c1", "c2"]
    assert [(r.call_id, r.error_kind) for r in completed] == [
        ("c1", ErrorKind.CANCELLED),
        ("c2", ErrorKind.CANCELLED),
    ]
    assert completed[1].inputs == {"tag": "two"}


async def test_closing_the_stream_early_cancels_the_run() -> None:
    registry = ToolRegistry()
    hanging = HangingTool()
    registry.register(ToolSpec("hang"), hanging)
    llm = recording_llm([asks(ToolCall("c1", "hang", {"tag": "h"}))])
    context = ToolActorContext()
    stream = make_runtime(registry, llm).stream_tool_loop("hi", context)
    assert isinstance(stream, AsyncGenerator)

    async with asyncio.timeout(2):
        async for event in stream:
            if isinstance(event, ToolCallStarted):
                break
    await hanging.wait_started()
    await stream.aclose()

    assert hanging.finalised == ["h"]
    assert hanging.cancelled == ["h"]
    assert [(r.call_id, r.error_kind) for r in context.tool_call_history] == [
        ("c1", ErrorKind.CANCELLED)
    ]


# -- construction ------------------------------------------------------------------------------


def test_the_seed_keyword_constructor_keeps_working(registry: ToolRegistry) -> None:
    runner = ToolRunner(registry)
    llm = recording_llm([final()])
    runtime = ToolCallingRuntime(registry=registry, runner=runner, llm_caller=llm, max_iterations=3)
    assert (runtime.registry, runtime.runner, runtime.llm_caller) == (registry, runner, llm)
    assert runtime.max_iterations == 3


def test_a_runner_over_another_registry_is_a_value_error(registry: ToolRegistry) -> None:
    other = ToolRegistry()
    with pytest.raises(ValueError, match=r"runner\.registry is not the registry"):
        ToolCallingRuntime(registry, ToolRunner(other), recording_llm([final()]))


# -- structured concurrency ------------------------------------------------------------------


async def test_a_bug_in_a_parallel_call_cancels_and_awaits_its_siblings() -> None:
    registry = ToolRegistry()
    hanging = HangingTool(expected=1)
    registry.register(ToolSpec("hang"), hanging)
    registry.register(ToolSpec("quick"), lambda inputs: {})
    llm = recording_llm(
        [asks(ToolCall("c1", "hang", {"tag": "slow"}), ToolCall("c2", "quick", {}))]
    )

    def on_event(event: RunEvent) -> None:
        # An event sink that breaks: the kind of bug the runner cannot turn into a record.
        if isinstance(event, ToolCallCompleted) and event.record.call_id == "c2":
            raise RuntimeError("the sink broke")

    with pytest.raises(RuntimeError, match="the sink broke"):
        await make_runtime(registry, llm).arun_tool_loop("hi", on_event=on_event)

    # The hanging sibling was cancelled, and had finished, when the error reached the caller.
    assert hanging.cancelled == ["slow"]
    assert hanging.finalised == ["slow"]


async def test_a_response_asking_for_more_calls_than_the_limit_fails_before_any_runs(
    registry: ToolRegistry,
) -> None:
    ran: list[str] = []
    registry.register(ToolSpec("mark"), lambda inputs: ran.append("x"))
    llm = recording_llm([asks(*(ToolCall(f"c{i}", "mark", {}) for i in range(3)))])
    runtime = ToolCallingRuntime(registry, ToolRunner(registry), llm, max_calls_per_response=2)
    with pytest.raises(LLMCallError, match=r"asked for 3 tool calls in one response"):
        await runtime.arun_tool_loop("go")
    assert ran == []
