"""An MCP server over Streamable HTTP: ``servers/faults.py`` serving on a loopback port, its
URL and a header (``${VAR}`` from the environment) in the configuration."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.config.mcp import McpServerConfig

from .conftest import FAULTS, McpSidecarFactory, bounded, call_once


@pytest.fixture
async def http_server(fault_dir: Path) -> AsyncIterator[str]:
    """The fault server over Streamable HTTP; its URL once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, FAULTS, str(port),
        env={**os.environ, "FAULT_DIR": str(fault_dir)},
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        while b"Uvicorn running" not in (line := await bounded(process.stderr.readline())):
            assert line, "the HTTP server exited before it listened"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


async def test_a_run_calls_a_tool_of_a_streamable_http_server(
    make_mcp_sidecar: McpSidecarFactory, http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCS_TOKEN", "t0ken")
    server = McpServerConfig(
        "docs", url=http_server, headers={"Authorization": "Bearer ${DOCS_TOKEN}"}
    )
    sidecar = await make_mcp_sidecar(server)
    async with AsyncSidecarClient(sidecar.address) as client:
        record = await call_once(client, "docs_echo", text="over http")
        whoami = await call_once(client, "docs_whoami")

    assert record.output == {"result": "over http"}
    assert whoami.output["name"] == "cleveragents-sidecar"
    assert whoami.output["authorization"] == "Bearer t0ken"
