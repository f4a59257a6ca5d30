"""A sidecar with a tool that has side effects, and a counter of what actually ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.tool import ToolRegistry

Start = Callable[..., Awaitable[tuple[Sidecar, list[str]]]]


def registry(ran: list[str]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool
    async def look(what: str) -> str:
        """Look at something."""
        ran.append(f"look:{what}")
        return what

    @tools.tool(side_effects=True)
    async def deploy(target: str) -> str:
        """Deploy somewhere."""
        ran.append(f"deploy:{target}")
        return target

    @tools.tool
    async def wait(seconds: float) -> None:
        """Wait a while."""
        await asyncio.sleep(seconds)

    return tools


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    running: list[Sidecar] = []

    async def run(**settings: Any) -> tuple[Sidecar, list[str]]:
        ran: list[str] = []
        sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", **settings), registry(ran))
        await sidecar.start()
        running.append(sidecar)
        return sidecar, ran

    yield run
    for sidecar in running:
        await sidecar.stop(1.0)


def call(tool: str, argument: str, call_id: str = "c1") -> dict[str, Any]:
    key = "target" if tool == "deploy" else "what"
    return {"tool_calls": [{"id": call_id, "name": tool, "arguments": {key: argument}}]}
