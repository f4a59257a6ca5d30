"""Each limit ends a run on a real sidecar the same way: ``run_completed``, its own stop reason,
``terminated_by_limit`` and the partial result; the call's deadline is no limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.tool import (
    ErrorKind,
    RunBudget,
    RunCancelled,
    RunCompleted,
    RunEvent,
    StopReason,
)

from .conftest import Start, call

LOOKS: list[dict[str, Any]] = [
    {**call("look", str(i), f"c{i}"), "usage": {"input_tokens": 40, "output_tokens": 10}}
    for i in range(5)
] + [{"content": "done"}]


async def terminal(client: AsyncSidecarClient, **options: Any) -> RunEvent:
    """The terminal event of a streamed run of ``LOOKS`` (or ``options['script']``)."""
    options.setdefault("script", LOOKS)
    events = [e.event async for e in client.stream_tool_loop("go", **options)]
    return events[-1]


async def drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def test_the_iteration_limit_completes_the_run_as_a_limit(start: Start) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        end = await terminal(client, max_iterations=2)
    assert isinstance(end, RunCompleted)
    assert end.result.stop_reason is StopReason.MAX_ITERATIONS
    assert end.result.terminated_by_limit
    assert ran == ["look:0", "look:1"]


async def test_the_tool_call_budget_completes_the_run_as_a_limit(start: Start) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        end = await terminal(client, budget=RunBudget(max_tool_calls=2))
    assert isinstance(end, RunCompleted)
    result = end.result
    assert result.stop_reason is StopReason.TOOL_CALL_BUDGET
    assert result.terminated_by_limit
    assert ran == ["look:0", "look:1"]
    denied = result.tool_call_history[-1]
    assert denied.error_kind is ErrorKind.DENIED
    assert denied.error == "not run: the run's tool-call budget (max_tool_calls=2) is used up"


async def test_the_token_budget_completes_the_run_and_says_tokens_in_the_denial(
    start: Start,
) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        end = await terminal(client, budget=RunBudget(max_total_tokens=120))
    assert isinstance(end, RunCompleted)
    result = end.result
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.terminated_by_limit
    assert (result.usage.total_tokens, result.iterations) == (150, 3)
    assert ran == ["look:0", "look:1"]
    denied = result.tool_call_history[-1]
    assert denied.error_kind is ErrorKind.DENIED
    assert denied.error == (
        "not run: the run's token budget (max_total_tokens=120) is used up: 150 tokens so far"
    )


async def test_the_wall_clock_budget_completes_the_run_as_a_limit(start: Start) -> None:
    sidecar, _ = await start()
    script = [{"tool_calls": [{"id": "w", "name": "wait", "arguments": {"seconds": 30}}]}]
    async with AsyncSidecarClient(sidecar.address) as client:
        end = await terminal(client, script=script, max_wall_clock_s=0.2)
        assert isinstance(end, RunCompleted)
        info = await client.get_run(end.result.run_id)
    result = end.result
    assert result.stop_reason is StopReason.WALL_CLOCK_BUDGET
    assert result.terminated_by_limit
    cut = result.tool_call_history[0]
    assert cut.error_kind is ErrorKind.CANCELLED
    assert cut.error == "cancelled: the run's wall-clock budget (max_wall_clock) of 0.2s passed"
    assert info.state == "completed"


async def test_the_calls_deadline_cancels_the_run_and_is_no_limit(start: Start) -> None:
    sidecar, _ = await start()
    script = [{"tool_calls": [{"id": "w", "name": "wait", "arguments": {"seconds": 30}}]}]
    async with AsyncSidecarClient(sidecar.address) as client:
        run = client.stream_tool_loop("go", script=script, detach=True, timeout=1.0)
        run_id = (await anext(run)).run_id
        # The run's timer is set to the call's deadline: the stream ends with the client's
        # DEADLINE_EXCEEDED, or, when the server's timer wins the race, with run_cancelled.
        try:
            await drain(run)
            code = grpc.StatusCode.OK
        except SidecarRpcError as exc:
            code = exc.code
        ends = [e.event async for e in client.watch(run_id)]
    end = ends[-1]
    assert code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.OK)
    assert isinstance(end, RunCancelled)
    assert end.result.stop_reason is StopReason.DEADLINE
    assert not end.result.terminated_by_limit


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
