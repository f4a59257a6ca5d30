"""The log explains each run: why a run failed and why a call was refused at info, and each
tool call at debug."""

from __future__ import annotations

import contextlib
from typing import Any

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.tool import ToolActorContext
from tests.conftest import captured_logs

from .conftest import Start


def turn(content: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"content": content, "tool_calls": list(calls)} if calls else {"content": content}


def lines(logs: list[Any], event: str) -> list[Any]:
    return [line for line in logs if line["event"] == event]


async def test_a_failed_runs_log_line_carries_its_error(start: Start) -> None:
    sidecar, _ = await start()
    script = [turn("", {"id": "c1", "name": "look", "arguments": {"what": "x"}})]
    with captured_logs() as logs:
        async with AsyncSidecarClient(sidecar.address) as client:
            with contextlib.suppress(SidecarRpcError):  # the script runs out: the run fails
                await client.run_tool_loop("go", script=script)

    (finished,) = lines(logs, "run finished")
    assert finished["log_level"] == "info"
    assert finished["state"] == "RUN_STATE_FAILED"
    assert "script" in finished["error"]
    assert finished["code"]


async def test_each_tool_call_is_logged_at_debug_with_its_inputs(start: Start) -> None:
    sidecar, _ = await start()
    script = [turn("", {"id": "c1", "name": "look", "arguments": {"what": "x"}}), turn("done")]
    with captured_logs() as logs:
        async with AsyncSidecarClient(sidecar.address) as client:
            await client.run_tool_loop("go", script=script)

    (call,) = lines(logs, "tool call")
    assert call["log_level"] == "debug"
    assert (call["tool"], call["call_id"], call["inputs"]["what"]) == ("look", "c1", "x")


async def test_a_refused_call_is_logged_at_info_with_the_reason(start: Start) -> None:
    sidecar, _ = await start()
    script = [turn("", {"id": "d1", "name": "deploy", "arguments": {"target": "prod"}}), turn("ok")]
    context = ToolActorContext(automation_profile="read_only")
    with captured_logs() as logs:
        async with AsyncSidecarClient(sidecar.address) as client:
            await client.run_tool_loop("go", script=script, context=context)

    (refused,) = lines(logs, "tool call refused")
    assert refused["log_level"] == "info"
    assert refused["tool"] == "deploy"
    assert "forbidden by automation profile 'read_only'" in refused["error"]
