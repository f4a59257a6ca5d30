"""Each budget ends a run on a real sidecar with its own stop reason and the partial result."""

from __future__ import annotations

from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import ErrorKind, RunBudget, StopReason

from .conftest import Start, call

LOOKS: list[dict[str, Any]] = [
    {**call("look", str(i), f"c{i}"), "usage": {"input_tokens": 40, "output_tokens": 10}}
    for i in range(5)
] + [{"content": "done"}]


async def test_the_tool_call_budget(start: Start) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=LOOKS, budget=RunBudget(max_tool_calls=2))
    assert result.stop_reason is StopReason.TOOL_CALL_BUDGET
    assert result.terminated_by_limit
    assert ran == ["look:0", "look:1"]
    assert result.tool_call_history[-1].error_kind is ErrorKind.DENIED


async def test_the_token_budget(start: Start) -> None:
    sidecar, _ = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop(
            "go", script=LOOKS, budget=RunBudget(max_total_tokens=120)
        )
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.usage.total_tokens == 150
    assert result.iterations == 3


async def test_the_wall_clock_budget(start: Start) -> None:
    sidecar, _ = await start()
    script = [{"tool_calls": [{"id": "w", "name": "wait", "arguments": {"seconds": 30}}]}]
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=script, max_wall_clock_s=0.2)
    assert result.stop_reason is StopReason.DEADLINE
    assert result.tool_call_history[0].error_kind is ErrorKind.CANCELLED


async def test_summarize_on_stop_asks_the_model_for_a_last_word(start: Start) -> None:
    sidecar, _ = await start()
    script = [*LOOKS[:2], {"content": "summary: looked at 0 and 1"}]
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop(
            "go", script=script, max_iterations=2, budget=RunBudget(summarize_on_stop=True)
        )
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.content == "summary: looked at 0 and 1"
    assert result.iterations == 3


async def test_list_runs_shows_the_runs_newest_first(start: Start) -> None:
    sidecar, _ = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        for name in ("first", "second"):
            await client.run_tool_loop("go", script=[*LOOKS[:1], {"content": name}], run_id=name)
        runs = await client.list_runs()
    assert [r.run_id for r in runs] == ["second", "first"]
    assert all(r.state == "completed" and r.stop_reason is StopReason.FINAL_ANSWER for r in runs)
    assert (runs[0].iterations, runs[0].tool_calls) == (2, 1)
