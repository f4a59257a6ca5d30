"""``SessionLogic``'s hosted calls: what a tool call answers, inline or after waiting, and once
the sidecar's deadline for it has passed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cleveragents.client.eager import Finished, Resumed, started
from cleveragents.client.session_logic import SessionLogic, ToolJob
from cleveragents.tool import ToolRegistry
from cleveragents.toolruntime.v1 import session_pb2


def logic_with(registry: ToolRegistry) -> SessionLogic:
    return SessionLogic("go", tools=registry, llm=None, approver=None, options={})


def job(tool: str, *, deadline: float | None = None) -> ToolJob:
    invocation = session_pb2.ToolInvocation(call_id="c1", tool_name=tool, inputs="{}")
    if deadline is not None:
        invocation.deadline.FromNanoseconds(int(deadline * 1e9))
    return ToolJob(invocation, "tool:c1")


def tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def instant() -> dict[str, Any]:
        """Answers at once."""
        return {"at": "once"}

    @registry.tool
    async def waits() -> dict[str, Any]:
        """Never answers."""
        await asyncio.Event().wait()
        return {}

    @registry.tool
    async def breaks() -> dict[str, Any]:
        """Fails at once."""
        raise ValueError("broken")

    return registry


def test_a_tool_whose_calls_cannot_suspend_is_instant_and_one_that_awaits_is_not() -> None:
    logic = logic_with(tools())

    assert logic.instant(job("instant"))
    assert logic.instant(job("breaks"))
    assert not logic.instant(job("waits"))


def test_an_instant_tools_work_is_done_at_its_start() -> None:
    logic = logic_with(tools())

    step = started(logic.work(job("instant")))

    assert isinstance(step, Finished)
    assert step.value.tool_result.output == '{"at":"once"}'


def test_an_instant_tools_failure_is_its_answer_at_once() -> None:
    logic = logic_with(tools())

    step = started(logic.work(job("breaks")))

    assert isinstance(step, Finished)
    assert step.value.tool_result.error == "ValueError: broken"


async def test_an_instant_call_answers_past_its_deadline_for_it_never_waited() -> None:
    logic = logic_with(tools())

    answer = await logic.answer(job("instant", deadline=time.time() - 60.0))

    assert answer.tool_result.output == '{"at":"once"}'
    assert logic.deadlines.armed_for is None


async def test_a_call_still_waiting_at_its_deadline_answers_that_the_deadline_passed() -> None:
    logic = logic_with(tools())

    answer = await logic.answer(job("waits", deadline=time.time()))

    assert answer.tool_result.error == "stopped: the sidecar's deadline for call c1 passed"
    assert logic.deadlines.armed_for is None


async def test_resumed_work_is_bounded_by_the_deadline_of_what_waits() -> None:
    logic = logic_with(tools())
    waiting = job("waits", deadline=time.time())
    step = started(logic.work(waiting))
    assert isinstance(step, Resumed)

    answer = await logic.bounded(waiting, step)

    assert answer.tool_result.error == "stopped: the sidecar's deadline for call c1 passed"
