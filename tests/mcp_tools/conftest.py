"""Fixtures for the MCP tests: in-process sidecars whose ``[mcp_servers]`` are real MCP
servers over stdio (the reference ``mcp-server-time``, and ``servers/faults.py``, written with
the SDK, which misbehaves on request), and the helpers to drive them."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.sidecar.config.mcp import McpServerConfig
from cleveragents.tool import ToolCallRecord

#: The reference server from PyPI, installed beside the tests' interpreter.
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")
FAULTS = str(Path(__file__).parent / "servers" / "faults.py")
RAW = str(Path(__file__).parent / "servers" / "raw.py")
WAIT_S = 20.0

McpSidecarFactory = Callable[..., Awaitable[Sidecar]]


def time_server(**settings: Any) -> McpServerConfig:
    """``mcp-server-time`` over stdio, local time zone UTC."""
    return McpServerConfig(
        "time", command=TIME_SERVER, args=("--local-timezone", "UTC"), **settings
    )


def fault_server(fault_dir: Path, name: str = "f", **settings: Any) -> McpServerConfig:
    """``servers/faults.py`` over stdio, leaving its marks in ``fault_dir``."""
    return McpServerConfig(
        name,
        command=sys.executable,
        args=(FAULTS,),
        env={"FAULT_DIR": str(fault_dir)},
        **settings,
    )


def raw_server(
    fault_dir: Path, name: str = "r", env: dict[str, str] | None = None, **settings: Any
) -> McpServerConfig:
    """``servers/raw.py`` (no SDK: it writes what it likes on stdout) over stdio; ``env``
    adds to its environment (``RAW_BANNER``, ``RAW_GARBLE_LIST``)."""
    env = {"FAULT_DIR": str(fault_dir), **(env or {})}
    return McpServerConfig(name, command=sys.executable, args=(RAW,), env=env, **settings)


def pids(fault_dir: Path) -> list[int]:
    """The process ids the fault server wrote as it started, oldest first."""
    marks = sorted(fault_dir.glob("pid-*"), key=lambda p: p.stat().st_mtime_ns)
    return [int(p.name.removeprefix("pid-")) for p in marks]


def children(fault_dir: Path) -> list[int]:
    """The process ids of the children the fault server started (``FAULT_CHILD``)."""
    return [int(p.name.removeprefix("child-")) for p in fault_dir.glob("child-*")]


def alive(pid: int) -> bool:
    """Whether a process (not a zombie) has this id."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def call_once(client: AsyncSidecarClient, tool: str, **arguments: Any) -> ToolCallRecord:
    """A scripted run calling ``tool`` once; its record."""
    result = await client.run_tool_loop("go", script=calling(("c1", tool, arguments)))
    assert len(result.tool_call_history) == 1
    return result.tool_call_history[0]


def calling(*calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A script with a turn for each ``(call id, tool, arguments)``, then ``done``."""
    turns: list[dict[str, Any]] = [
        {"content": "", "tool_calls": [{"id": i, "name": n, "arguments": a}]} for i, n, a in calls
    ]
    return [*turns, {"content": "done"}]


@pytest.fixture
def fault_dir(tmp_path: Path) -> Path:
    path = tmp_path / "marks"
    path.mkdir()
    return path


@pytest.fixture
async def make_mcp_sidecar() -> AsyncIterator[McpSidecarFactory]:
    """Start in-process sidecars with these MCP servers (and settings); stopped after."""
    started: list[Sidecar] = []

    async def make(*servers: McpServerConfig, **settings: Any) -> Sidecar:
        settings.setdefault("listen", "127.0.0.1:0")
        settings.setdefault("log_format", "console")
        settings.setdefault("file_tools", False)
        settings.setdefault("sandbox_roots", (os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],))
        config = SidecarConfig(mcp_servers={s.name: s for s in servers}, **settings)
        sidecar = Sidecar(config)
        await sidecar.start()
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in started:
        await sidecar.stop(0.2)


@pytest.fixture
async def time_sidecar(make_mcp_sidecar: McpSidecarFactory) -> Sidecar:
    return await make_mcp_sidecar(time_server())


@pytest.fixture
async def time_client(time_sidecar: Sidecar) -> AsyncIterator[AsyncSidecarClient]:
    async with AsyncSidecarClient(time_sidecar.address) as client:
        yield client


async def bounded(awaitable: Awaitable[Any]) -> Any:
    """``awaitable``, failing the test if it takes longer than ``WAIT_S``."""
    async with asyncio.timeout(WAIT_S):
        return await awaitable
