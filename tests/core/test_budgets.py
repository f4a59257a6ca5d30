"""Budgets end a run with their own stop reason and the partial result, never an exception."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from cleveragents.tool import (
    ErrorKind,
    LLMResponse,
    RunBudget,
    RunCancelled,
    RunCompleted,
    RunEvent,
    ScriptedLLMCaller,
    StopReason,
    ToolCall,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolCallStarted,
    ToolLimit,
    ToolLimits,
    ToolRegistry,
    ToolRunner,
    Usage,
)

from .conftest import recording_llm


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def work(n: int) -> int:
        """Do some work."""
        return n

    return registry


def _turn(*ns: int, tokens: int = 0) -> LLMResponse:
    return LLMResponse(
        content=f"turn {ns}",
        tool_calls=[ToolCall(f"c{n}", "work", {"n": n}) for n in ns],
        usage=Usage(tokens, 0),
    )


def _runtime(llm: ScriptedLLMCaller, budget: RunBudget, **kw: object) -> ToolCallingRuntime:
    registry = _registry()
    return ToolCallingRuntime(registry, ToolRunner(registry), llm, budget=budget, **kw)  # type: ignore[arg-type]


async def test_the_tool_call_budget_stops_the_run_and_denies_calls_beyond_it() -> None:
    llm = recording_llm([_turn(1, 2), _turn(3, 4), LLMResponse("never")])
    events: list[RunEvent] = []
    result = await _runtime(llm, RunBudget(max_tool_calls=3)).arun_tool_loop(
        "go", on_event=events.append
    )
    assert result.stop_reason is StopReason.TOOL_CALL_BUDGET
    assert result.terminated_by_limit
    assert [(r.call_id, r.error_kind) for r in result.tool_call_history] == [
        ("c1", None), ("c2", None), ("c3", None), ("c4", ErrorKind.DENIED),
    ]  # fmt: skip
    assert "budget" in (result.tool_call_history[-1].error or "")
    assert llm.calls == 2
    assert sum(isinstance(e, ToolCallStarted) for e in events) == 4
    assert sum(isinstance(e, ToolCallCompleted) for e in events) == 4


async def test_using_exactly_the_tool_call_budget_still_allows_a_final_answer() -> None:
    llm = recording_llm([_turn(1, 2), LLMResponse("all done")])
    result = await _runtime(llm, RunBudget(max_tool_calls=2)).arun_tool_loop("go")
    assert (result.stop_reason, result.content) == (StopReason.FINAL_ANSWER, "all done")


async def test_the_token_budget_stops_after_the_response_that_crosses_it() -> None:
    llm = recording_llm([_turn(1, tokens=60), _turn(2, tokens=60), LLMResponse("never")])
    result = await _runtime(llm, RunBudget(max_total_tokens=100)).arun_tool_loop("go")
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.usage.input_tokens == 120
    assert [(r.call_id, r.error_kind) for r in result.tool_call_history] == [
        ("c1", None), ("c2", ErrorKind.DENIED),
    ]  # fmt: skip
    assert result.content == "turn (1,)\nturn (2,)"


def _slow_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def wait() -> None:
        """Wait for ever."""
        await asyncio.Event().wait()

    return registry


def _slow_runtime(budget: RunBudget) -> ToolCallingRuntime:
    registry = _slow_registry()
    llm = ScriptedLLMCaller([LLMResponse("", [ToolCall("w", "wait", {})])])
    return ToolCallingRuntime(registry, ToolRunner(registry), llm, budget=budget)


async def test_the_wall_clock_budget_completes_the_run_as_a_limit() -> None:
    events: list[RunEvent] = []
    result = await _slow_runtime(RunBudget(max_wall_clock_s=0.05)).arun_tool_loop(
        "go", timeout_s=30, on_event=events.append
    )
    assert isinstance(events[-1], RunCompleted)
    assert result.stop_reason is StopReason.WALL_CLOCK_BUDGET
    assert result.terminated_by_limit
    assert result.tool_call_history[0].error_kind is ErrorKind.CANCELLED


async def test_a_deadline_before_the_wall_clock_budget_cancels_the_run() -> None:
    events: list[RunEvent] = []
    result = await _slow_runtime(RunBudget(max_wall_clock_s=30)).arun_tool_loop(
        "go", timeout_s=0.05, on_event=events.append
    )
    assert isinstance(events[-1], RunCancelled)
    assert result.stop_reason is StopReason.DEADLINE
    assert not result.terminated_by_limit


def test_the_token_budget_names_itself_in_the_denial() -> None:
    stop = RunBudget(max_total_tokens=100, max_tool_calls=5).check(120, 0, 2)
    assert stop is not None
    assert (stop.stop_reason, stop.allowed) == (StopReason.TOKEN_BUDGET, 0)
    assert "token budget (max_total_tokens=100)" in stop.refusal
    assert "tool-call" not in stop.refusal


async def test_summarize_on_stop_makes_one_last_call_without_tools() -> None:
    llm = recording_llm([_turn(1), _turn(2), LLMResponse("summary: did 1 and 2")])
    runtime = _runtime(llm, RunBudget(summarize_on_stop=True), max_iterations=2)
    result = await runtime.arun_tool_loop("go")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.content == "summary: did 1 and 2"
    assert result.iterations == 3
    last = llm.requests[-1]
    assert last.tools == []
    assert "no more tools" in last.messages[-1].content


async def test_max_concurrent_tool_calls_bounds_one_responses_parallel_calls() -> None:
    registry = ToolRegistry()
    running = 0
    peak = 0

    @registry.tool
    async def slow(n: int) -> int:
        """Take a moment."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return n

    llm = recording_llm(
        [
            LLMResponse(tool_calls=[ToolCall(f"c{i}", "slow", {"n": i}) for i in range(6)]),
            LLMResponse("done"),
        ]
    )
    runtime = ToolCallingRuntime(
        registry, ToolRunner(registry), llm, budget=RunBudget(max_concurrent_tool_calls=2)
    )
    result = await runtime.arun_tool_loop("go")
    assert peak == 2
    assert [r.output["result"] for r in result.tool_call_history] == list(range(6))


async def test_a_per_tool_concurrency_cap_holds_across_runs() -> None:
    registry = ToolRegistry()
    running = 0
    peak = 0

    @registry.tool
    async def scarce() -> None:
        """Use a scarce resource."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    runner = ToolRunner(registry, limits=ToolLimits({"scarce": ToolLimit(max_concurrent=1)}))

    def runtime() -> ToolCallingRuntime:
        llm = recording_llm(
            [
                LLMResponse(tool_calls=[ToolCall("a", "scarce", {}), ToolCall("b", "scarce", {})]),
                LLMResponse("done"),
            ]
        )
        return ToolCallingRuntime(registry, runner, llm)

    await asyncio.gather(*(runtime().arun_tool_loop("go") for _ in range(3)))
    assert peak == 1


async def test_tool_limits_count_each_origin_apart_and_share_within_one() -> None:
    limits = ToolLimits({"x": ToolLimit(max_concurrent=1)})
    client_b = limits.for_origins({"x": "client:b"})
    again_b = limits.for_origins({"x": "client:b"})

    async with client_b.slot("x"):  # client B's "x" holds its slot
        async with asyncio.timeout(30), limits.slot("x"):  # the server's "x" does not wait
            pass
        with pytest.raises(TimeoutError):  # another run of B's own "x" does
            async with asyncio.timeout(0.05), again_b.slot("x"):
                pass


async def test_a_per_tool_rate_limit_spaces_calls_out() -> None:
    registry = ToolRegistry()
    starts: list[float] = []

    @registry.tool
    async def ping() -> None:
        """Hit a rate-limited API."""
        starts.append(asyncio.get_running_loop().time())

    runner = ToolRunner(registry, limits=ToolLimits({"ping": ToolLimit(rate_per_s=50)}))
    calls = [ToolCall(f"c{i}", "ping", {}) for i in range(4)]
    llm = recording_llm([LLMResponse(tool_calls=calls), LLMResponse("done")])
    await ToolCallingRuntime(registry, runner, llm).arun_tool_loop("go")
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 4
    assert min(gaps) >= 0.015  # 50 per second: one every 20 ms, give or take the clock


@pytest.mark.parametrize("field", ["max_tool_calls", "max_total_tokens", "max_wall_clock_s"])
def test_budgets_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RunBudget(**{field: 0})  # type: ignore[arg-type]
