"""The MCP reference server ``@modelcontextprotocol/server-everything`` (npm, installed by
``make mcp-test-servers`` into tests/mcp_tools/everything) through a real sidecar, over stdio
and over Streamable HTTP: its long-running tool's progress, an error result, structured
content, a changed tool list, and image and resource results."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.sidecar.config.mcp import McpServerConfig
from cleveragents.tool import ErrorKind, ToolCallCompleted, ToolCallProgress

from .conftest import McpSidecarFactory, bounded, call_once, calling

EVERYTHING = (
    Path(__file__).parent
    / "everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)


def _node() -> str:
    node = shutil.which("node")
    if node is None or not EVERYTHING.exists():
        pytest.fail(
            "server-everything is not installed: run `make mcp-test-servers` (needs Node.js "
            "and npm; `make test` runs it)"
        )
    return node


@contextlib.asynccontextmanager
async def _http_server() -> AsyncIterator[str]:
    """server-everything in Streamable HTTP mode on a free loopback port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        _node(), str(EVERYTHING), "streamableHttp",
        env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        while b"listening on port" not in (line := await bounded(process.stderr.readline())):
            assert line, "server-everything exited before it listened"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()


@pytest.fixture(params=["stdio", "http"])
async def everything(
    request: pytest.FixtureRequest, make_mcp_sidecar: McpSidecarFactory
) -> AsyncIterator[Sidecar]:
    """A sidecar offering server-everything's tools as ``e_*``, over each transport."""
    # side_effects false: its gzip tool has no readOnlyHint, which the default profile would
    # have to ask about (and nobody answers a RunToolLoop call).
    settings: dict[str, Any] = {
        "progress_interval_s": 0.0, "timeout_s": 30.0, "side_effects": "false",
    }  # fmt: skip
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "stdio":
            server = McpServerConfig(
                "e", command=_node(), args=(str(EVERYTHING), "stdio"), **settings
            )
        else:
            url = await stack.enter_async_context(_http_server())
            server = McpServerConfig("e", url=url, **settings)
        sidecar = await make_mcp_sidecar(server)
        yield sidecar
        await sidecar.stop(0.2)  # before its server goes


async def test_the_long_running_operation_streams_its_progress(everything: Sidecar) -> None:
    script = calling(("c1", "e_trigger-long-running-operation", {"duration": 0.6, "steps": 3}))
    async with AsyncSidecarClient(everything.address) as client:
        stream = client.stream_tool_loop("go", script=script)
        events = await bounded(_collect(stream))

    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    [record] = [e.record for e in events if isinstance(e, ToolCallCompleted)]
    assert [(p.progress, p.total) for p in progress] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    assert record.success, record.error
    assert "Long running operation completed" in record.output["content"][0]["text"]


async def test_an_invalid_call_is_a_failed_record_with_the_servers_error(
    everything: Sidecar,
) -> None:
    async with AsyncSidecarClient(everything.address) as client:
        # The sidecar checks arguments against the schema first; a value the schema allows but
        # the server refuses is the server's error, which the model sees.
        record = await bounded(call_once(client, "e_get-sum", a=1, b="x"))

    assert not record.success
    assert record.error_kind in (ErrorKind.INVALID_ARGUMENTS, ErrorKind.EXCEPTION)
    assert "b" in (record.error or "")


async def test_structured_content_is_the_record_output(everything: Sidecar) -> None:
    async with AsyncSidecarClient(everything.address) as client:
        record = await bounded(call_once(client, "e_get-structured-content", location="Chicago"))

    assert record.output == {
        "temperature": 36,
        "conditions": "Light rain / drizzle",
        "humidity": 82,
    }


async def test_an_image_keeps_its_mime_type_and_resources_their_uris(everything: Sidecar) -> None:
    async with AsyncSidecarClient(everything.address) as client:
        image = await bounded(call_once(client, "e_get-tiny-image"))
        reference = await bounded(
            call_once(client, "e_get-resource-reference", resourceType="Text", resourceId=1)
        )
        links = await bounded(call_once(client, "e_get-resource-links", count=2))

    [png] = [b for b in image.output["content"] if b["type"] == "image"]
    assert png["mime_type"] == "image/png"
    assert base64.b64decode(png["data"]).startswith(b"\x89PNG")
    [embedded] = [b for b in reference.output["content"] if b["type"] == "resource"]
    assert embedded["uri"] == "demo://resource/dynamic/text/1"
    assert embedded["mime_type"] == "text/plain"
    assert embedded["text"].startswith("Resource 1:")
    linked = [b for b in links.output["content"] if b["type"] == "resource_link"]
    assert [b["mime_type"] for b in linked] == ["text/plain", "text/plain"]


async def test_a_large_blob_resource_is_not_inlined(everything: Sidecar) -> None:
    data = (
        "data:application/octet-stream;base64," + base64.b64encode(os.urandom(96 * 1024)).decode()
    )
    async with AsyncSidecarClient(everything.address) as client:
        record = await bounded(
            call_once(
                client, "e_gzip-file-as-resource", name="r.gz", data=data, outputType="resource"
            )
        )

    assert record.success, record.error
    [blob] = [b for b in record.output["content"] if b["type"] == "resource"]
    assert blob["mime_type"] == "application/gzip"
    assert blob["truncated"] is True
    assert blob["bytes"] > 96 * 1024
    assert len(blob["data"]) == 4096


async def test_the_tools_it_adds_after_initialize_are_offered(everything: Sidecar) -> None:
    assert everything.mcp is not None
    connection = everything.mcp.connections["e"]
    # It registers its client-capability tools once initialized and says the list changed.
    while "e_simulate-research-query" not in everything.registry:
        await bounded(connection.listed_after(connection.listings))

    assert everything.mcp.origins["e_simulate-research-query"] == "mcp:e"


async def _collect(stream: AsyncIterator[object]) -> list[object]:
    return [getattr(s, "event") async for s in stream]  # noqa: B009
