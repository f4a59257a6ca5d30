"""Resuming a run from its logged events: the conversation, budgets and calls in flight."""

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from cleveragents.tool import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    AutomationProfile,
    ErrorKind,
    IterationStarted,
    LLMResponded,
    Reasoning,
    Resumption,
    RunBudget,
    RunCompleted,
    RunEvent,
    RunResumed,
    RunStarted,
    StopReason,
    ToolCall,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolCallStarted,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    Usage,
    current_call,
)

from .conftest import asks, final, recording_llm, tool_message_payload

LOOKUP = ToolCall("c1", "lookup", {"key": "a"})
CHARGE = ToolCall("c2", "charge", {"amount": 5})


class Tools:
    """``lookup`` (idempotent) and ``charge`` (not), counting their runs and the idempotency
    keys they saw; ``hold`` makes both wait until set (a call "in flight")."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {"lookup": 0, "charge": 0}
        self.keys: list[str] = []
        self.hold: asyncio.Event | None = None
        self.registry = ToolRegistry()
        self.registry.register(ToolSpec("lookup", idempotent=True), self._handler("lookup"))
        self.registry.register(ToolSpec("charge", side_effects=True), self._handler("charge"))

    def _handler(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        async def handle(inputs: Mapping[str, Any]) -> dict[str, Any]:
            scope = current_call()
            assert scope is not None
            self.keys.append(scope.idempotency_key)
            if self.hold is not None:
                await self.hold.wait()
            self.runs[name] += 1
            return {"ok": name}

        return handle


def runtime(tools: Tools, llm: Any, **options: Any) -> ToolCallingRuntime:
    return ToolCallingRuntime(tools.registry, ToolRunner(tools.registry), llm, **options)


async def events_until(
    tools: Tools, script: list[Any], stop: Callable[[RunEvent], bool], **options: Any
) -> list[RunEvent]:
    """The events a run logs up to and including the first one ``stop`` matches: what a log
    holds when its sidecar dies just after it. The run is then abandoned."""
    seen: list[RunEvent] = []
    reached = asyncio.Event()

    def sink(event: RunEvent) -> None:
        if not reached.is_set():
            seen.append(event)
            if stop(event):
                reached.set()

    task = asyncio.create_task(
        runtime(tools, recording_llm(script), **options).arun_tool_loop(
            "go", run_id="r1", on_event=sink
        )
    )
    async with asyncio.timeout(5):
        await reached.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    tools.runs = dict.fromkeys(tools.runs, 0)  # count the resumed life's runs only
    return seen


async def resume(
    tools: Tools, script: list[Any], logged: list[RunEvent], elapsed_s: float = 0.0, **options: Any
) -> tuple[list[RunEvent], Any]:
    llm = recording_llm(script)
    events: list[RunEvent] = []
    async with asyncio.timeout(5):
        await runtime(tools, llm, **options).arun_tool_loop(
            "go",
            run_id="r1",
            on_event=events.append,
            resume=Resumption(logged, len(logged), elapsed_s),
        )
    return events, llm


def started(call_id: str) -> Callable[[RunEvent], bool]:
    return lambda e: isinstance(e, ToolCallStarted) and e.call_id == call_id


def completed(call_id: str) -> Callable[[RunEvent], bool]:
    return lambda e: isinstance(e, ToolCallCompleted) and e.record.call_id == call_id


async def test_a_resumed_run_sends_the_model_the_conversation_it_had() -> None:
    script = [asks(LOOKUP, content="looking"), asks(CHARGE), final("paid")]
    whole = Tools()
    original = recording_llm(script)
    expected = await runtime(whole, original).arun_tool_loop("go", run_id="r1")
    tools = Tools()
    logged = await events_until(tools, script, completed("c1"))

    events, llm = await resume(tools, script[1:], logged)

    assert llm.requests[0].messages == original.requests[1].messages
    assert isinstance(events[0], RunResumed)
    assert events[0].after_sequence == len(logged)
    assert events[0].iteration == 1
    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.result.content == expected.content == "paid"
    assert [r.call_id for r in end.result.tool_call_history] == ["c1", "c2"]
    assert end.result.iterations == expected.iterations == 3
    assert not any(isinstance(e, RunStarted) for e in events)


async def test_an_idempotent_call_in_flight_runs_again_and_starts_once_in_the_log() -> None:
    tools = Tools()
    tools.hold = asyncio.Event()  # the call never ends in the first life
    logged = await events_until(tools, [asks(LOOKUP), final()], started("c1"))
    tools.hold = None

    events, _ = await resume(tools, [final()], logged)

    resumed = events[0]
    assert isinstance(resumed, RunResumed)
    assert resumed.rerun_call_ids == ("c1",)
    assert resumed.interrupted_call_ids == ()
    assert tools.runs["lookup"] == 1
    assert not any(isinstance(e, ToolCallStarted) for e in events)
    records = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert [(r.call_id, r.success) for r in records] == [("c1", True)]


async def test_a_call_in_flight_of_a_tool_not_idempotent_fails_as_interrupted_for_the_model() -> (
    None
):
    tools = Tools()
    tools.hold = asyncio.Event()
    logged = await events_until(tools, [asks(CHARGE), final()], started("c2"))
    tools.hold = None

    events, llm = await resume(tools, [final("gave up")], logged)

    assert tools.runs["charge"] == 0
    resumed = events[0]
    assert isinstance(resumed, RunResumed)
    assert resumed.interrupted_call_ids == ("c2",)
    (record,) = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert not record.success
    assert record.error_kind is ErrorKind.EXCEPTION
    assert record.error is not None
    assert "interrupted by a sidecar restart" in record.error
    told = llm.requests[0].messages[-1]
    assert told.is_error
    assert "interrupted by a sidecar restart" in tool_message_payload(told)["error"]
    assert isinstance(events[-1], RunCompleted)


async def test_an_llm_call_in_flight_is_made_again() -> None:
    tools = Tools()
    script = [asks(LOOKUP), final("late")]
    logged = await events_until(
        tools, script, lambda e: isinstance(e, IterationStarted) and e.iteration == 2
    )

    events, llm = await resume(tools, [final("late")], logged)

    assert [r.iteration for r in llm.requests] == [2]
    assert [e.iteration for e in events if isinstance(e, IterationStarted)] == [2]
    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.result.content == "late"


async def test_the_tool_call_budget_carries_over_the_restart() -> None:
    tools = Tools()
    budget = RunBudget(max_tool_calls=2)
    two = asks(ToolCall("c3", "lookup", {}), ToolCall("c4", "lookup", {}))
    logged = await events_until(tools, [asks(LOOKUP), two], completed("c1"), budget=budget)

    events, _ = await resume(tools, [two], logged, budget=budget)

    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.result.stop_reason is StopReason.TOOL_CALL_BUDGET
    assert tools.runs["lookup"] == 1  # c3; c4 is over the budget (c1 counted before the stop)
    denied = end.result.tool_call_history[-1]
    assert (denied.call_id, denied.error_kind) == ("c4", ErrorKind.DENIED)


async def test_the_token_budget_counts_the_tokens_used_before_the_restart() -> None:
    tools = Tools()
    budget = RunBudget(max_total_tokens=100)
    first = asks(LOOKUP, usage=Usage(60, 0))
    logged = await events_until(tools, [first, final()], completed("c1"), budget=budget)

    events, _ = await resume(tools, [asks(CHARGE, usage=Usage(50, 0))], logged, budget=budget)

    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.result.stop_reason is StopReason.TOKEN_BUDGET
    assert end.result.usage.total_tokens == 110
    assert tools.runs["charge"] == 0


async def test_the_wall_clock_budget_counts_from_the_run_s_first_start() -> None:
    tools = Tools()
    budget = RunBudget(max_wall_clock_s=5)
    logged = await events_until(tools, [asks(LOOKUP), final()], completed("c1"), budget=budget)

    events, llm = await resume(tools, [final()], logged, elapsed_s=10.0, budget=budget)

    assert llm.requests == []
    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.result.stop_reason is StopReason.WALL_CLOCK_BUDGET


async def test_a_pending_approval_is_asked_again_and_the_call_runs_once_approved() -> None:
    tools = Tools()
    profile = AutomationProfile("careful", ask=("charge",))
    asked: list[str] = []

    async def never(request: ApprovalRequest) -> ApprovalDecision:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request.call_id)
        return ApprovalDecision(True, "fine", "test")

    logged = await events_until(
        tools,
        [asks(CHARGE), final()],
        lambda e: isinstance(e, ApprovalRequested),
        profile=profile,
        approver=never,
    )

    events, _ = await resume(tools, [final()], logged, profile=profile, approver=approve)

    assert asked == ["c2"]
    assert sum(isinstance(e, ApprovalRequested) for e in events) == 1
    assert not any(isinstance(e, ToolCallStarted) for e in events)  # logged before the stop
    assert tools.runs["charge"] == 1
    resumed = events[0]
    assert isinstance(resumed, RunResumed)
    assert resumed.rerun_call_ids == ()
    assert resumed.interrupted_call_ids == ()


async def test_a_log_that_ends_with_the_final_answer_only_completes() -> None:
    tools = Tools()
    logged = await events_until(
        tools,
        [asks(LOOKUP), final("all done")],
        lambda e: isinstance(e, LLMResponded) and not e.tool_calls,
    )

    events, llm = await resume(tools, [], logged)

    assert llm.requests == []
    assert [type(e) for e in events] == [RunResumed, RunCompleted]
    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.result.content == "all done"
    assert end.result.stop_reason is StopReason.FINAL_ANSWER


async def test_a_call_has_the_same_idempotency_key_each_time_it_runs() -> None:
    tools = Tools()
    tools.hold = asyncio.Event()
    logged = await events_until(tools, [asks(LOOKUP), final()], started("c1"))
    tools.hold = None

    await resume(tools, [final()], logged)

    assert tools.keys == ["r1:c1", "r1:c1"]


async def test_a_resumed_run_sends_the_reasoning_of_a_logged_turn_back_with_it() -> None:
    reasoning = Reasoning("openai_responses", "Look it up first.", '[{"type":"reasoning"}]')
    script = [dataclasses.replace(asks(LOOKUP), reasoning=reasoning), final("found")]
    original = recording_llm(script)
    await runtime(Tools(), original).arun_tool_loop("go", run_id="r1")
    tools = Tools()
    logged = await events_until(tools, script, completed("c1"))

    _, llm = await resume(tools, script[1:], logged)

    (responded,) = [e for e in logged if isinstance(e, LLMResponded)]
    assert responded.reasoning == reasoning
    assert llm.requests[0].messages == original.requests[1].messages
    assert llm.requests[0].messages[-2].reasoning == reasoning  # the assistant turn, then c1
