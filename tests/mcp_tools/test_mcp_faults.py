"""Faults of an MCP server that the lifecycle tests do not cover: a server that writes a line
that is not JSON on its stdout. The call it was answering gets a clear failed record at once,
the server is restarted, and nothing waits for its timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from mcp import types

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.mcp.connection import McpConnection
from cleveragents.tool import ErrorKind

from .conftest import (
    WAIT_S,
    McpSidecarFactory,
    bounded,
    call_once,
    pids,
    raw_server,
)
from .servers.raw import TOOLS


async def test_malformed_json_fails_the_call_clearly_and_restarts_the_server(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(raw_server(fault_dir, timeout_s=60.0))
    assert sidecar.mcp is not None
    connection = sidecar.mcp.connections["r"]
    async with AsyncSidecarClient(sidecar.address) as client:
        began = time.monotonic()
        garbled = await bounded(call_once(client, "r_garble"))
        took = time.monotonic() - began
        await bounded(connection.up())
        after = await bounded(call_once(client, "r_echo", text="back"))

    assert not garbled.success
    assert garbled.error_kind is ErrorKind.EXCEPTION
    assert "MCP server 'r'" in (garbled.error or "")
    assert "not valid JSON" in (garbled.error or "")
    assert took < WAIT_S / 2  # not the call's 60 s timeout
    assert after.success
    assert after.output == {"content": [{"type": "text", "text": "back"}]}
    assert len(pids(fault_dir)) == 2  # restarted
    assert connection.failures == 1


async def test_a_server_printing_a_banner_before_initialize_is_usable(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = raw_server(
        fault_dir, env={"RAW_BANNER": "Raw MCP server 1.0 ready (stdio)"}, timeout_s=60.0
    )
    sidecar = await make_mcp_sidecar(server)
    assert sidecar.mcp is not None
    connection = sidecar.mcp.connections["r"]
    async with AsyncSidecarClient(sidecar.address) as client:
        record = await bounded(call_once(client, "r_echo", text="hello"))

    assert record.success, record.error
    assert record.output == {"content": [{"type": "text", "text": "hello"}]}
    assert connection.failures == 0
    assert len(pids(fault_dir)) == 1  # not restarted


async def test_a_server_breaking_the_protocol_while_starting_says_so_in_the_error(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = raw_server(fault_dir, env={"RAW_GARBLE_LIST": "1"})
    with pytest.raises(ConfigError) as raised:
        await bounded(make_mcp_sidecar(server))

    assert "could not start" in str(raised.value)
    assert "it wrote a line that is not valid JSON" in str(raised.value)


def pages_listed(fault_dir: Path) -> list[str]:
    """The pages of its tools the raw server was asked for (``RAW_PAGE_SIZE``)."""
    return sorted(p.name for p in fault_dir.glob("list-*"))


async def test_a_server_that_lists_its_tools_in_pages_is_offered_every_tool(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(raw_server(fault_dir, env={"RAW_PAGE_SIZE": "2"}))
    async with AsyncSidecarClient(sidecar.address) as client:
        listed = {spec.name for spec in await bounded(client.list_tools())}
        echoed = await bounded(call_once(client, "r_echo", text="last page"))

    assert {f"r_{tool['name']}" for tool in TOOLS} <= listed
    assert pages_listed(fault_dir) == ["list-0", "list-2", "list-4"]
    assert echoed.success  # echo is on the last page


async def _longest_pause(done: asyncio.Event) -> float:
    """The longest the event loop went without running this ticker, until ``done``."""
    longest, last = 0.0, time.monotonic()
    while not done.is_set():
        await asyncio.sleep(0.005)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    return longest


async def test_a_24_mb_single_line_result_is_read_quickly_without_stalling_the_event_loop(
    fault_dir: Path,
) -> None:
    connection = McpConnection(raw_server(fault_dir, timeout_s=60.0), lambda _c, _t: None)
    done = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        running = group.create_task(connection.run())
        await bounded(connection.up())
        pause = group.create_task(_longest_pause(done))
        began = time.monotonic()
        result = await bounded(connection.call("huge_text", {"megabytes": 24}))
        took = time.monotonic() - began
        done.set()
        running.cancel()

    [block] = result.content
    assert isinstance(block, types.TextContent)
    assert len(block.text) == 24 * 1024 * 1024
    # The SDK's transport took 18-20 s here (quadratic in the line) with the loop busy
    # throughout; this one takes well under a second. Both bounds are generous.
    assert took < 5.0
    assert pause.result() < 2.0


async def test_a_message_over_max_message_bytes_fails_the_call_at_once_and_restarts_the_server(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = raw_server(fault_dir, timeout_s=60.0, max_message_bytes=1024 * 1024)
    sidecar = await make_mcp_sidecar(server)
    assert sidecar.mcp is not None
    connection = sidecar.mcp.connections["r"]
    async with AsyncSidecarClient(sidecar.address) as client:
        over = await bounded(call_once(client, "r_huge_text", megabytes=2))
        await bounded(connection.up())
        after = await bounded(call_once(client, "r_echo", text="back"))

    assert not over.success
    assert over.error_kind is ErrorKind.EXCEPTION
    assert over.error == (
        "MCP server 'r' failed the call: it wrote a message over 1048576 bytes, the most one "
        "may be (raise mcp_servers.r.max_message_bytes to accept larger ones); the sidecar is "
        "restarting it"
    )
    assert after.success
    assert after.output == {"content": [{"type": "text", "text": "back"}]}
    assert len(pids(fault_dir)) == 2  # restarted
    assert connection.failures == 1


async def test_a_line_over_max_message_bytes_while_starting_says_so_in_the_error(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = raw_server(fault_dir, env={"RAW_BANNER": "=" * 4096}, max_message_bytes=1024)
    with pytest.raises(ConfigError) as raised:
        await bounded(make_mcp_sidecar(server))

    assert "could not start" in str(raised.value)
    assert "it wrote a message over 1024 bytes" in str(raised.value)
    assert "mcp_servers.r.max_message_bytes" in str(raised.value)


async def test_a_huge_text_result_is_a_successful_record_cut_to_what_one_event_may_carry(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(raw_server(fault_dir), max_message_bytes=1024 * 1024)
    async with AsyncSidecarClient(sidecar.address) as client:
        record = await bounded(call_once(client, "r_huge_text", megabytes=4))

    assert record.success, record.error
    [kept] = record.output.values()
    assert list(record.output) == ["truncated_output"]
    assert kept.startswith('{"content":[{"type":"text","text":"xxxx')
    assert 512 * 1024 < len(kept) < 1024 * 1024
