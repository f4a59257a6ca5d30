"""An MCP server's life under the sidecar: started with it, restarted when it dies, its calls
failing at once while it is down, stopped with the sidecar (its process group: no orphans),
and ``serve`` refusing to start when an eager server cannot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.tool import ErrorKind

from .conftest import (
    FAULTS,
    RAW,
    WAIT_S,
    McpSidecarFactory,
    alive,
    bounded,
    call_once,
    calling,
    children,
    fault_server,
    pids,
)

CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")


def _config(
    tmp_path: Path, fault_dir: Path, command: str = sys.executable, extra_env: str = ""
) -> Path:
    path = tmp_path / "sidecar.toml"
    path.write_text(
        f'file_tools = false\n[mcp_servers.f]\ncommand = "{command}"\nargs = ["{FAULTS}"]\n'
        f'env = {{ FAULT_DIR = "{fault_dir}"{extra_env} }}\n',
        encoding="utf-8",
    )
    return path


async def _serve(config: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def _listening(config: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``serve`` with ``config``, once it listens; killed after if it has not exited."""
    process = await _serve(config)
    try:
        assert process.stdout is not None
        line = await bounded(process.stdout.readline())
        assert line.startswith(b"cleveragents-sidecar listening on "), line
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _sigterm(process: asyncio.subprocess.Process) -> bytes:
    """Stop ``serve`` as an operator does; what it logged on stderr."""
    process.send_signal(signal.SIGTERM)
    _, stderr = await bounded(process.communicate())
    assert isinstance(stderr, bytes)
    return stderr


async def test_serve_stops_the_server_process_on_sigterm_leaving_no_orphan(
    tmp_path: Path, fault_dir: Path
) -> None:
    async with _listening(_config(tmp_path, fault_dir)) as process:
        [pid] = pids(fault_dir)
        assert alive(pid)
        await _sigterm(process)

    assert process.returncode == 0
    assert not alive(pid)  # an orphan would live on, adopted by init


async def test_serve_ends_the_servers_whole_process_group_on_sigterm(
    tmp_path: Path, fault_dir: Path
) -> None:
    """The server exits by itself once its stdin closes; a child it left in its process group
    must not outlive the sidecar (the group was signalled only if the server was still alive)."""
    async with _listening(_config(tmp_path, fault_dir, extra_env=', FAULT_CHILD = "1"')) as process:
        [child] = children(fault_dir)
        assert alive(child)
        await _sigterm(process)

    try:
        assert process.returncode == 0
        assert not alive(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


async def test_a_server_flooding_non_json_lines_gets_one_warning_an_interval_and_a_count(
    tmp_path: Path, fault_dir: Path
) -> None:
    """20,000 lines that are not JSON before ``initialize``: one warning line (not one each,
    34-48 MB of log in 8 s before), and the count of those not logged when the sidecar stops."""
    path = tmp_path / "sidecar.toml"
    path.write_text(
        f"file_tools = false\nmcp_log_interval_s = 3600\n[mcp_servers.r]\n"
        f'command = "{sys.executable}"\nargs = ["{RAW}"]\n'
        f'env = {{ FAULT_DIR = "{fault_dir}", RAW_BANNER = "Loading model shards…", '
        f'RAW_BANNER_REPEAT = "20000" }}\n',
        encoding="utf-8",
    )
    async with _listening(path) as process:
        stderr = await _sigterm(process)
    lines = [json.loads(text) for text in stderr.decode().splitlines() if text.startswith("{")]
    skipped = [e for e in lines if e["event"].startswith("mcp server wrote a line that is not")]
    unlogged = [e for e in lines if e["event"] == "mcp server's skipped lines not logged"]

    assert process.returncode == 0
    assert len(skipped) == 1
    assert skipped[0]["server"] == "r"
    assert skipped[0]["not_logged_since_last_line"] == 0
    assert [e["not_logged_since_last_line"] for e in unlogged] == [19_999]
    assert len(stderr) < 64 * 1024


async def test_an_eager_server_that_cannot_start_makes_serve_fail_fast(
    tmp_path: Path, fault_dir: Path
) -> None:
    process = await _serve(_config(tmp_path, fault_dir, command="/nonexistent/mcp-server"))
    try:
        _, stderr = await bounded(process.communicate())
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert process.returncode == 2
    message = stderr.decode()
    assert "MCP server 'f' (mcp_servers.f" in message
    assert "could not start with command '/nonexistent/mcp-server'" in message


async def test_a_server_that_dies_is_restarted_and_health_stays_serving(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir), metrics_listen="127.0.0.1:0")
    assert sidecar.mcp is not None
    connection = sidecar.mcp.connections["f"]
    async with AsyncSidecarClient(sidecar.address) as client:
        crashed = await call_once(client, "f_crash")
        await bounded(connection.up())
        after = await call_once(client, "f_echo", text="back")
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        health = await stub.Check(health_pb2.HealthCheckRequest())
    metrics = await asyncio.to_thread(_scrape, sidecar.metrics_port)

    assert not crashed.success
    assert "MCP server 'f'" in (crashed.error or "")
    assert after.success
    assert after.output == {"result": "back"}
    assert len(pids(fault_dir)) == 2
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert 'cleveragents_mcp_server_up{server="f"} 1.0' in metrics
    assert 'cleveragents_mcp_server_failures_total{server="f"} 1.0' in metrics


async def test_calls_fail_at_once_with_a_clear_record_while_the_server_is_down(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir))
    async with AsyncSidecarClient(sidecar.address) as client:
        (fault_dir / "refuse").touch()  # it will not come back
        await call_once(client, "f_crash")
        began = time.monotonic()
        record = await call_once(client, "f_echo", text="anyone?")
        took = time.monotonic() - began

    assert record.error_kind is ErrorKind.EXCEPTION
    assert "MCP server 'f' is unavailable" in (record.error or "")
    assert "reconnecting" in (record.error or "")
    assert took < WAIT_S / 4  # not the 60 s tool timeout: no waiting for a dead server


def _scrape(port: int | None) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as response:
        body: bytes = response.read()
    return body.decode()


async def test_a_lazy_server_that_cannot_start_does_not_stop_the_sidecar(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    (fault_dir / "refuse").touch()
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, startup="lazy"))
    assert sidecar.mcp is not None
    connection = sidecar.mcp.connections["f"]
    async with AsyncSidecarClient(sidecar.address) as client:
        tools = {spec.name for spec in await bounded(client.list_tools())}

    assert connection.state == "down"
    assert connection.problem  # why, for the log and the metric
    assert "echo" in tools
    assert "f_echo" not in tools


async def test_a_run_naming_a_tool_of_a_lazy_server_that_cannot_start_is_unavailable(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    (fault_dir / "refuse").touch()
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, startup="lazy"))
    async with AsyncSidecarClient(sidecar.address) as client:
        script = calling(("c1", "f_echo", {"text": "x"}))
        with pytest.raises(SidecarRpcError) as raised:
            await bounded(client.run_tool_loop("go", script=script, tool_names=["f_echo"]))

    assert raised.value.code is grpc.StatusCode.UNAVAILABLE
    assert "MCP server 'f'" in raised.value.details
    assert "f_echo" in raised.value.details
    assert "unknown tool" not in raised.value.details


async def test_a_lazy_server_is_not_started_until_list_tools_asks_for_its_tools(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, startup="lazy"))
    before = pids(fault_dir)
    async with AsyncSidecarClient(sidecar.address) as client:
        tools = {spec.name: spec for spec in await bounded(client.list_tools())}

    assert before == []  # the sidecar listened without starting it
    assert len(pids(fault_dir)) == 1
    assert tools["f_echo"].origin == "mcp:f"


async def test_a_lazy_server_starts_for_the_first_run_that_selects_one_of_its_tools(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, startup="lazy"))
    async with AsyncSidecarClient(sidecar.address) as client:
        other = await client.run_tool_loop("go", script=[{"content": "hi"}], tool_names=["echo"])
        after_other = pids(fault_dir)
        script = calling(("c1", "f_echo", {"text": "woken"}))
        result = await bounded(client.run_tool_loop("go", script=script, tool_names=["f_echo"]))

    assert other.content == "hi"
    assert after_other == []  # a run that cannot use its tools does not start it
    assert result.tool_call_history[0].output == {"result": "woken"}
    assert len(pids(fault_dir)) == 1


async def test_a_run_with_no_server_tools_does_not_start_a_lazy_server(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, startup="lazy"))
    async with AsyncSidecarClient(sidecar.address) as client:
        script = [{"content": "hi"}]
        result = await bounded(client.run_tool_loop("go", script=script, no_server_tools=True))

    assert result.content == "hi"
    assert pids(fault_dir) == []  # empty tool_names would have meant all: it was started
