"""Runs whose result outgrows one message, restored from the SQLite store, still read back.

A finished run's terminal event was bounded when it was logged; a run live at a crash gets its
terminal event at the restart, and that one must be bounded too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import RunFailed, ToolActorContext, ToolCallStarted
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc

from .conftest import SidecarProcess, Spawn, StartInProcess

MIB = 1024 * 1024
READS = 17  # 17 MiB of output: more than the default 16 MiB max_message_bytes
CALLS = [f"r{i}" for i in range(1, READS + 1)]
LONG_S = 120.0


def _reads(then: list[dict[str, Any]]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": call_id, "name": "read_file", "arguments": {"path": "big.txt"}}]}
        for call_id in CALLS
    ]
    return [*turns, *then]


def _sandbox(tmp_path: Path) -> ToolActorContext:
    root = tmp_path / "sandbox"
    root.mkdir()
    (root / "big.txt").write_bytes(b"a" * MIB)
    return ToolActorContext(sandbox_root=str(root))


async def _raw_get_run(address: str, run_id: str) -> service_pb2.GetRunResponse:
    options = [("grpc.max_receive_message_length", 16 * MIB)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        response: service_pb2.GetRunResponse = await stub.GetRun(
            service_pb2.GetRunRequest(run_id=run_id)
        )
        return response


async def test_a_large_finished_run_reads_back_whole_after_a_restart(
    start_in_process: StartInProcess, tmp_path: Path
) -> None:
    context = _sandbox(tmp_path)
    first = await start_in_process()
    async with AsyncSidecarClient(first.address) as client:
        async with asyncio.timeout(LONG_S):
            await client.run_tool_loop(
                "read", script=_reads([{"content": "done"}]), context=context, run_id="big"
            )
    await first.stop(1.0)

    second = await start_in_process()
    async with AsyncSidecarClient(second.address) as client:
        async with asyncio.timeout(LONG_S):
            info = await client.get_run("big")
            summary = next(s for s in await client.list_runs() if s.run_id == "big")
    raw = await _raw_get_run(second.address, "big")
    assert info.state == "completed"
    assert info.result is not None
    assert [r.call_id for r in info.result.tool_call_history] == CALLS
    assert summary.tool_calls == READS
    assert raw.result.history_omitted
    assert raw.result.tool_call_count == READS


async def test_a_large_run_live_at_a_crash_ends_with_a_bounded_result(
    spawn: Spawn, tmp_path: Path
) -> None:
    context = _sandbox(tmp_path)
    nap = {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 30}}]}
    first: SidecarProcess = spawn()
    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        async for streamed in client.stream_tool_loop(
            "read", script=_reads([nap]), context=context, run_id="crashed", detach=True
        ):
            if isinstance(streamed.event, ToolCallStarted) and streamed.event.tool_name == "sleep":
                break
    first.kill()

    second: SidecarProcess = spawn(resume_runs="false")
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        info = await client.get_run("crashed")
        log = [event async for event in client.watch("crashed")]
    raw = await _raw_get_run(second.address, "crashed")
    assert info.state == "failed"
    assert info.result is not None
    assert [r.call_id for r in info.result.tool_call_history] == CALLS
    terminal = log[-1].event
    assert isinstance(terminal, RunFailed)
    assert [r.call_id for r in terminal.result.tool_call_history] == CALLS
    assert raw.result.history_omitted
    assert raw.result.tool_call_count == READS
