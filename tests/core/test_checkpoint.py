"""``arun_tool_loop``'s ``checkpoint``: each call that may run waits for it, after its
``ToolCallStarted``, and runs only once it returns; a call it cancels never runs."""

from __future__ import annotations

import asyncio

import pytest

from cleveragents.tool import (
    RunBudget,
    RunCancelled,
    RunEvent,
    ToolCall,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolCallRunResult,
    ToolCallStarted,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)

from .conftest import asks, final, make_runtime, recording_llm


class HeldCheckpoint:
    """Records what each wait saw of the run's events, and holds the calls until ``open``."""

    def __init__(self, events: list[RunEvent]) -> None:
        self.events = events
        self.waits: list[tuple[str, type[RunEvent]]] = []
        self.open = asyncio.Event()
        self.waiting = asyncio.Event()

    async def __call__(self, spec: ToolSpec) -> None:
        self.waits.append((spec.name, type(self.events[-1])))
        self.waiting.set()
        await self.open.wait()


def _counting(registry: ToolRegistry, ran: list[str]) -> ToolRegistry:
    @registry.tool
    async def charge(amount: int) -> int:
        """Charge ``amount``.

        Args:
            amount: What to charge.
        """
        ran.append(f"charge {amount}")
        return amount

    return registry


async def _charging_at_its_checkpoint() -> tuple[
    asyncio.Task[ToolCallRunResult], HeldCheckpoint, list[RunEvent], list[str]
]:
    """A run that asks for ``charge(2)``, held at the call's checkpoint: its task, the
    checkpoint, its events so far and the charges made."""
    ran: list[str] = []
    events: list[RunEvent] = []
    checkpoint = HeldCheckpoint(events)
    runtime = make_runtime(
        _counting(ToolRegistry(), ran),
        recording_llm([asks(ToolCall("c1", "charge", {"amount": 2})), final()]),
    )
    run = asyncio.create_task(
        runtime.arun_tool_loop("go", on_event=events.append, checkpoint=checkpoint)
    )
    await checkpoint.waiting.wait()
    return run, checkpoint, events, ran


async def test_a_call_runs_only_once_its_checkpoint_returns() -> None:
    run, checkpoint, _, ran = await _charging_at_its_checkpoint()
    assert checkpoint.waits == [("charge", ToolCallStarted)]  # its start went out first
    assert ran == []
    checkpoint.open.set()
    result = await run
    assert ran == ["charge 2"]
    assert result.content == "done"


async def test_a_call_whose_checkpoint_cancels_the_run_never_runs() -> None:
    run, _, events, ran = await _charging_at_its_checkpoint()
    run.cancel("the run is another sidecar's now")
    with pytest.raises(asyncio.CancelledError):
        await run
    assert ran == []
    assert isinstance(events[-1], RunCancelled)
    [record] = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert record.error == "cancelled: the run is another sidecar's now"


async def test_a_call_over_the_budget_is_refused_without_waiting_for_the_checkpoint() -> None:
    ran: list[str] = []
    events: list[RunEvent] = []
    checkpoint = HeldCheckpoint(events)
    checkpoint.open.set()
    registry = _counting(ToolRegistry(), ran)
    two = asks(ToolCall("c1", "charge", {"amount": 1}), ToolCall("c2", "charge", {"amount": 2}))
    runtime = ToolCallingRuntime(
        registry, ToolRunner(registry), recording_llm([two, final()]), 10,
        budget=RunBudget(max_tool_calls=1),
    )  # fmt: skip
    await runtime.arun_tool_loop("go", on_event=events.append, checkpoint=checkpoint)
    assert ran == ["charge 1"]
    assert [name for name, _ in checkpoint.waits] == ["charge"]
