"""run_tool_loop: the blocking entry point works from any thread, event loop or not."""

import asyncio
import threading

import pytest

from cleveragents.tool import (
    LLMCallError,
    ScriptedLLMCaller,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallingRuntime,
    ToolRegistry,
    ToolSpec,
)

from .conftest import HangingTool, RaisingLLMCaller, asks, final, make_runtime


def adding_runtime(registry: ToolRegistry) -> ToolCallingRuntime:
    llm = ScriptedLLMCaller([asks(ToolCall("c1", "add", {"a": 2, "b": 3})), final("5")])
    return make_runtime(registry, llm)


def test_run_tool_loop_works_from_plain_sync_code(registry: ToolRegistry) -> None:
    context = ToolActorContext(plan_id="plan-123", phase="execute")

    result = adding_runtime(registry).run_tool_loop("What is 2 + 3?", context=context)

    assert result.content == "5"
    assert result.iterations == 2
    assert [r.output for r in result.tool_call_history] == [{"result": 5}]
    assert context.tool_call_history == list(result.tool_call_history)


async def test_run_tool_loop_works_from_a_thread_while_another_loop_runs(
    registry: ToolRegistry,
) -> None:
    runtime = adding_runtime(registry)

    result = await asyncio.to_thread(runtime.run_tool_loop, "What is 2 + 3?")

    assert result.content == "5"
    assert result.tool_call_history[0].output == {"result": 5}


async def test_run_tool_loop_called_inside_a_running_loop_still_returns_the_result(
    registry: ToolRegistry,
) -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    @registry.tool
    async def where() -> str:
        threads.append(threading.get_ident())
        return "here"

    llm = ScriptedLLMCaller([asks(ToolCall("c1", "where", {})), final("done")])

    result = make_runtime(registry, llm).run_tool_loop("hi")

    assert result.content == "done"
    assert result.tool_call_history[0].output == {"result": "here"}
    assert len(threads) == 1
    assert threads[0] != loop_thread


def test_run_tool_loop_raises_llm_call_error_when_the_llm_fails(registry: ToolRegistry) -> None:
    runtime = make_runtime(registry, RaisingLLMCaller([], ConnectionError("down")))

    with pytest.raises(LLMCallError) as info:
        runtime.run_tool_loop("hi")

    assert isinstance(info.value.__cause__, ConnectionError)


def test_run_tool_loop_honours_the_run_deadline() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("hang"), HangingTool())
    runtime = make_runtime(registry, ScriptedLLMCaller([asks(ToolCall("c1", "hang", {}))]))

    result = runtime.run_tool_loop("hi", timeout_s=0.05, run_id="blocking")

    assert result.stop_reason is StopReason.DEADLINE
    assert result.run_id == "blocking"
    assert len(result.tool_call_history) == 1
