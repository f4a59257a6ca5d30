"""MCP tools through a real sidecar: the reference ``mcp-server-time`` and the SDK-written
``servers/faults.py`` over stdio, called by scripted runs from the Python client."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.tool import ErrorKind, RunCancelled, ToolActorContext, ToolCallStarted
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc

from .conftest import (
    McpSidecarFactory,
    alive,
    bounded,
    call_once,
    calling,
    fault_server,
    pids,
    time_server,
)


async def test_a_scripted_run_calls_the_time_server_over_stdio(
    time_client: AsyncSidecarClient,
) -> None:
    record = await call_once(time_client, "time_get_current_time", timezone="Europe/Paris")

    assert record.success, record.error
    assert record.output["timezone"] == "Europe/Paris"
    assert record.output["datetime"].endswith(("+01:00", "+02:00"))
    assert record.inputs == {"timezone": "Europe/Paris"}


async def test_list_tools_shows_the_mcp_tools_with_their_origin_and_schema(
    time_sidecar: Sidecar,
) -> None:
    async with grpc.aio.insecure_channel(time_sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        response = await stub.ListTools(service_pb2.ListToolsRequest())

    tools = {tool.name: tool for tool in response.tools}
    assert tools["time_get_current_time"].origin == "mcp:time"
    assert tools["time_convert_time"].origin == "mcp:time"
    assert '"timezone"' in tools["time_get_current_time"].input_schema
    assert not tools["time_get_current_time"].side_effects  # readOnlyHint
    assert tools["echo"].origin == ""


async def test_tool_names_select_mcp_tools_like_any_other(
    time_client: AsyncSidecarClient,
) -> None:
    script = calling(("c1", "time_get_current_time", {}))
    result = await time_client.run_tool_loop("go", script=script, tool_names=["time_convert_time"])

    record = result.tool_call_history[0]
    assert record.error_kind is ErrorKind.UNKNOWN_TOOL
    assert "available tools: time_convert_time" in (record.error or "")


async def test_an_error_result_is_a_failed_record_the_model_sees(
    time_client: AsyncSidecarClient,
) -> None:
    record = await call_once(time_client, "time_get_current_time", timezone="Nowhere/Atlantis")

    assert not record.success
    assert record.error_kind is ErrorKind.EXCEPTION
    assert "Invalid timezone" in (record.error or "")


async def test_a_prefix_and_an_allow_list_choose_the_names_offered(
    make_mcp_sidecar: McpSidecarFactory,
) -> None:
    sidecar = await make_mcp_sidecar(time_server(tool_prefix="", tools=("convert_*",)))

    assert [n for n in sidecar.registry.names() if "time" in n] == ["convert_time"]


async def test_initialize_sends_the_sidecars_name_and_version(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    async with AsyncSidecarClient(sidecar.address) as client:
        record = await call_once(client, "f_whoami")

    assert record.output["name"] == "cleveragents-sidecar"
    assert record.output["version"]


async def test_a_call_past_its_timeout_fails_and_the_server_is_told_to_cancel(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, timeout_s=0.5))
    async with AsyncSidecarClient(sidecar.address) as client:
        record = await call_once(client, "f_hang", text="late")
        # The server read notifications/cancelled before this later request.
        seen = await call_once(client, "f_cancellations")

    assert record.error_kind is ErrorKind.TIMEOUT
    assert seen.output == {"result": ["late"]}


async def test_a_cancelled_run_tells_the_server_to_cancel_its_call(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    script = calling(("h", "f_hang", {"text": "r"}))
    async with (
        AsyncSidecarClient(sidecar.address) as client,
        _fifo(fault_dir / "started") as started,
    ):
        events = [
            event
            async for event in client.stream_tool_loop("go", script=script, run_id="doomed")
            if not isinstance(event.event, ToolCallStarted)
            or await bounded(_cancel_once_started(client, started))
        ]
        seen = await bounded(call_once(client, "f_cancellations"))

    assert isinstance(events[-1].event, RunCancelled)
    assert seen.output == {"result": ["r"]}


async def _cancel_once_started(client: AsyncSidecarClient, started: asyncio.StreamReader) -> bool:
    """Cancel run ``doomed`` once the server has the call (it writes its text to the FIFO)."""
    assert await started.readline() == b"r\n"
    await client.cancel_run("doomed", reason="enough")
    return True


@contextlib.asynccontextmanager
async def _fifo(path: Path) -> AsyncIterator[asyncio.StreamReader]:
    """A FIFO at ``path`` read without blocking the loop (opened read-write, so a writer that
    never comes leaves a read waiting, cancellable, rather than at end of file)."""
    os.mkfifo(path)
    reader = asyncio.StreamReader()
    pipe = os.fdopen(os.open(path, os.O_RDWR | os.O_NONBLOCK), "rb", buffering=0)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), pipe
    )
    try:
        yield reader
    finally:
        transport.close()
        os.unlink(path)


async def test_side_effects_follow_the_annotations_unless_the_setting_says(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path, tmp_path: Path
) -> None:
    trusted = await make_mcp_sidecar(fault_server(fault_dir))
    declared = await make_mcp_sidecar(fault_server(tmp_path, side_effects="false"))

    assert trusted.registry.get("f_write_note").spec.side_effects  # type: ignore[union-attr]
    assert not trusted.registry.get("f_echo").spec.side_effects  # type: ignore[union-attr]
    assert not declared.registry.get("f_write_note").spec.side_effects  # type: ignore[union-attr]


async def test_an_approval_gated_profile_asks_before_a_writing_mcp_tool(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    script = calling(("w", "f_write_note", {"text": "x"}), ("e", "f_echo", {"text": "y"}))
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop(
            "go", script=script, context=ToolActorContext(automation_profile="supervised")
        )

    wrote, echoed = result.tool_call_history
    assert wrote.error_kind is ErrorKind.DENIED  # nobody attended to approve it
    assert echoed.success
    assert echoed.output == {"result": "y"}


async def test_a_huge_image_is_kept_as_its_type_and_size_not_its_megabytes(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    async with AsyncSidecarClient(sidecar.address) as client:
        record = await call_once(client, "f_huge_image", megabytes=4)

    image, caption = record.output["content"]
    assert image["type"] == "image"
    assert image["mime_type"] == "image/png"
    assert image["bytes"] == 4 * 1024 * 1024 + 4
    assert image["truncated"] is True
    assert len(image["data"]) <= 4096
    assert caption == {"type": "text", "text": "a picture"}


async def test_stopping_the_sidecar_stops_the_server_process(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    [pid] = pids(fault_dir)
    assert alive(pid)

    await sidecar.stop(0.2)

    assert not alive(pid)


async def test_a_changed_tool_list_is_what_new_runs_are_offered(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    assert sidecar.mcp is not None
    connection = sidecar.mcp.connections["f"]
    listings = connection.listings
    async with AsyncSidecarClient(sidecar.address) as client:
        assert "f_extra" not in [t.name for t in await client.list_tools()]
        await call_once(client, "f_grow", name="extra")
        await bounded(connection.listed_after(listings))
        offered = [t.name for t in await client.list_tools()]
        record = await call_once(client, "f_extra")

    assert "f_extra" in offered
    assert record.output == {"result": "grown"}


async def test_the_python_clients_list_tools_shows_each_tools_origin(
    time_client: AsyncSidecarClient,
) -> None:
    tools = {spec.name: spec for spec in await time_client.list_tools()}

    assert tools["time_get_current_time"].origin == "mcp:time"
    assert tools["echo"].origin == ""
