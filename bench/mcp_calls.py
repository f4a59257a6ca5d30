"""`make bench`'s MCP figure: what a tool call to a stdio MCP server costs in a sidecar run,
against the floor of calling the same server directly with the `mcp` SDK, in turns in one run.

Both sides call the `echo` tool of tests/mcp_tools/servers/faults.py (an SDK server), each
through a session kept open: the floor is one `tools/call` round trip; the scenario is one
iteration of a `StreamToolLoop` run whose scripted LLM calls it (the loop's turn, the call
through the sidecar's MCP client, its four events streamed to this process).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from cleveragents.client import AsyncSidecarClient

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ROOT / "tests" / "mcp_tools" / "servers" / "faults.py"
CALLS = 200

Sampler = Callable[
    [Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]],
    Awaitable[tuple[list[float], list[float]]],
]


async def measure(interleaved: Sampler) -> tuple[list[float], list[float]]:
    """Per-call microseconds: the SDK floor's samples and the sidecar run's, taken in turns."""
    with tempfile.TemporaryDirectory() as marks:
        async with _direct(marks) as session, _sidecar(marks) as client:

            async def floor() -> float:
                began = time.perf_counter()
                for _ in range(CALLS):
                    await session.call_tool("echo", {"text": "x"})
                return (time.perf_counter() - began) / CALLS * 1e6

            async def run() -> float:
                call = {"name": "f_echo", "arguments": {"text": "x"}}
                script: list[dict[str, Any]] = [
                    {"tool_calls": [{"id": f"c{i}", **call}]} for i in range(CALLS)
                ]
                script.append({"content": "done"})
                began = time.perf_counter()
                events = 0
                stream = client.stream_tool_loop(
                    "go", script=script, max_iterations=CALLS + 1, tool_names=["f_echo"]
                )
                async for _ in stream:
                    events += 1
                assert events == 4 * (CALLS + 1), events  # every call ran
                return (time.perf_counter() - began) / CALLS * 1e6

            return await interleaved(floor, run)


@contextlib.asynccontextmanager
async def _direct(marks: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=[str(FAULTS)], env={"FAULT_DIR": marks}
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def _sidecar(marks: str) -> AsyncIterator[AsyncSidecarClient]:
    config = Path(marks) / "sidecar.toml"
    config.write_text(
        "builtin_tools = false\nfile_tools = false\n[mcp_servers.f]\n"
        f'command = "{sys.executable}"\nargs = ["{FAULTS}"]\nenv = {{ FAULT_DIR = "{marks}" }}\n',
        encoding="utf-8",
    )
    command = [
        sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0",
        "--log-level", "warning", "--config", str(config),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        address = (await process.stdout.readline()).decode().strip().rsplit(" ", 1)[1]
        async with AsyncSidecarClient(address) as client:
            yield client
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 15)
