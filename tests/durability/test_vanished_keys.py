"""A run whose keys vanish from the shared Redis (a FLUSHALL, an eviction, Redis restarted
without persistence) is reported as lost data, not as taken over by a sidecar named 'none':
it fails with DATA_LOSS saying what happened and what to do, its own sidecar keeps what it
had of it (GetRun, its history), a follower on another sidecar is told, and the sidecar goes
on serving new runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import redis

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.tool import RunFailed, ToolCallCompleted, ToolCallStarted
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc
from tests.conftest import ServeSidecar
from tests.redis_server import RedisServer

from .test_resume import LONG_S, gated_tools

#: A call that waits for the release file, a nap (under way when the store answers that the
#: run's keys are gone), then an answer.
WAIT_THEN_ANSWER: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "w1", "name": "wait_plain", "arguments": {"tag": "w"}}]},
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 30}}]},
    {"content": "done"},
]


async def _last_failure(address: str, run_id: str) -> tuple[int, str]:
    """The status code and message of the run's ``run_failed``, from its history."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        page = await stub.GetRunHistory(service_pb2.GetRunHistoryRequest(run_id=run_id))
    last = page.events[-1]
    assert last.WhichOneof("payload") == "run_failed", last
    return last.run_failed.code, last.run_failed.message


async def _follow(
    address: str, run_id: str, seen: list[StreamedEvent], caught_up: asyncio.Event, until: int
) -> SidecarRpcError | None:
    """Follow ``run_id`` (``caught_up`` once it has had sequence ``until``); the error its
    stream ended with."""
    async with AsyncSidecarClient(address) as client:
        try:
            async for streamed in client.watch(run_id):
                seen.append(streamed)
                if streamed.sequence == until:
                    caught_up.set()
        except SidecarRpcError as exc:
            return exc
    return None


async def test_a_run_whose_keys_vanished_fails_with_data_loss_and_the_sidecar_goes_on(
    serve_sidecar: ServeSidecar, redis_server: RedisServer, tmp_path: Path
) -> None:
    config, gate = gated_tools(tmp_path)
    alpha, beta = [
        serve_sidecar(config=config, event_store=redis_server.url, sidecar_id=name)
        for name in ("alpha", "beta")
    ]
    events = []
    followed: list[StreamedEvent] = []
    async with AsyncSidecarClient(alpha.address) as client, asyncio.timeout(LONG_S):
        follower = None
        async for streamed in client.stream_tool_loop("go", script=WAIT_THEN_ANSWER, run_id="v"):
            events.append(streamed.event)
            if isinstance(streamed.event, ToolCallStarted) and streamed.event.call_id == "w1":
                caught_up = asyncio.Event()
                follower = asyncio.create_task(
                    _follow(beta.address, "v", followed, caught_up, streamed.sequence)
                )
                await caught_up.wait()  # beta follows the run live now
                with redis.Redis.from_url(redis_server.url) as other:
                    other.flushall()
                (gate / "release").touch()
        info = await client.get_run("v")
        code, message = await _last_failure(alpha.address, "v")
        after = await client.run_tool_loop("go", script=[{"content": "still here"}])
        assert follower is not None
        follower_error = await follower
    assert isinstance(events[-1], RunFailed)
    assert not any(  # the nap was stopped: no record of it reached the store or the client
        isinstance(event, ToolCallCompleted) and event.record.call_id == "nap" for event in events
    )
    assert info.state == "failed"
    assert code == grpc.StatusCode.DATA_LOSS.value[0]
    assert "run 'v': its log is gone from the run store" in message
    assert "FLUSHALL" in message
    assert "appendonly" in message
    assert "sidecar 'none'" not in message
    assert after.content == "still here"
    assert follower_error is not None
    assert follower_error.code is grpc.StatusCode.DATA_LOSS
    assert "run 'v': its log is gone from the run store" in follower_error.details
