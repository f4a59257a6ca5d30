"""Session: a client tool whose calls cannot suspend (an ``async def`` with no ``await``) is
answered inline, without a task; what it answers and what it may touch stay a task's."""

from __future__ import annotations

import contextvars
from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import ErrorKind, RunCompleted, ToolCallRunResult, ToolRegistry

from .conftest import call, collect, turn

#: What a tool may set for the rest of its own call, as in any task.
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def completed_result(events: list[Any]) -> ToolCallRunResult:
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    return last.result


async def test_an_instant_tools_output_is_its_record(client: AsyncSidecarClient) -> None:
    registry = ToolRegistry()

    @registry.tool
    async def double(n: int) -> dict[str, Any]:
        """Double n."""
        return {"n": 2 * n}

    script = [turn("", call("d1", "double", n=21)), turn("done")]
    events = await collect(client.session("go", tools=registry, script=script))

    [record] = completed_result(events).tool_call_history
    assert (record.success, dict(record.output)) == (True, {"n": 42})


async def test_an_instant_tools_failure_is_a_failed_record(client: AsyncSidecarClient) -> None:
    registry = ToolRegistry()

    @registry.tool
    async def broken() -> dict[str, Any]:
        """Always breaks."""
        raise ValueError("cannot")

    script = [turn("", call("b1", "broken")), turn("done")]
    events = await collect(client.session("go", tools=registry, script=script))

    [record] = completed_result(events).tool_call_history
    assert (record.success, record.error_kind) == (False, ErrorKind.EXCEPTION)
    assert record.error == "ValueError: cannot"


async def test_what_an_instant_tool_sets_in_its_context_stays_in_its_call(
    client: AsyncSidecarClient,
) -> None:
    registry = ToolRegistry()
    seen: list[str] = []

    @registry.tool
    async def marks() -> dict[str, Any]:
        """Sets the mark, having seen it."""
        seen.append(MARK.get())
        MARK.set("set by the tool")
        return {}

    script = [turn("", call("m1", "marks"), call("m2", "marks")), turn("done")]
    await collect(client.session("go", tools=registry, script=script))

    assert seen == ["unset", "unset"]
    assert MARK.get() == "unset"
