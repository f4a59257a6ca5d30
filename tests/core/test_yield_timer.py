"""The loop gives way to other tasks only when it has not waited on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cleveragents.tool import (
    LLMResponse,
    ScriptedLLMCaller,
    ToolCall,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)
from cleveragents.tool.loop.yield_timer import YieldTimer


class FakeClock:
    """A hand-driven event loop clock: ``turn`` runs what was queued, as a loop turn would."""

    def __init__(self) -> None:
        self.now = 100.0
        self.queued: list[Callable[[], object]] = []

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[[], object]) -> object:
        self.queued.append(callback)
        return None

    def turn(self) -> None:
        queued, self.queued = self.queued, []
        for callback in queued:
            callback()


def test_a_loop_that_never_gave_way_must_yield_once_the_interval_is_over() -> None:
    clock = FakeClock()
    timer = YieldTimer(clock, 0.002)

    clock.now += 0.001
    assert not timer.due()
    clock.now += 0.0015
    assert timer.due()


def test_a_loop_that_gave_way_on_its_own_is_not_told_to_yield() -> None:
    clock = FakeClock()
    timer = YieldTimer(clock, 0.002)

    clock.turn()  # the loop waited (for a client's tool, say): other callbacks ran...
    clock.now += 0.005  # ...for as long as the client took
    assert not timer.due()
    clock.now += 0.001  # a new interval started when the loop checked
    assert not timer.due()
    clock.now += 0.0015
    assert timer.due()


async def test_a_run_that_never_waits_still_lets_other_tasks_run() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def noop() -> dict[str, bool]:
        """Return at once, without suspending."""
        return {"ok": True}

    n = 3000
    llm = ScriptedLLMCaller(
        [LLMResponse(tool_calls=[ToolCall(f"c{i}", "noop", {})]) for i in range(n - 1)]
        + [LLMResponse("done")]
    )
    runtime = ToolCallingRuntime(registry, ToolRunner(registry), llm, max_iterations=n)
    turns_during_run = 0
    finished = False

    async def other_task() -> None:
        nonlocal turns_during_run
        while not finished:
            turns_during_run += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)  # let it start
    started_with = turns_during_run
    result = await runtime.arun_tool_loop("go")
    finished = True
    await other

    assert result.iterations == n
    assert turns_during_run > started_with
