"""A run whose stored log holds an event that does not decode (damaged in the shared Redis) is
reported as lost data, naming the run and the event, by every RPC that reads it on another
sidecar of the fleet; the other runs are served as before."""

from __future__ import annotations

from typing import Any

import grpc
import redis

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.sidecar.fleet.layout import Keys
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc
from tests.conftest import ServeSidecar
from tests.durability.test_redis_fleet import start_napping
from tests.redis_server import RedisServer

#: The key names of the default prefix (the tests' sidecars set none).
KEYS = Keys()

ECHO_THEN_ANSWER: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "e", "name": "echo", "arguments": {"text": "a"}}]},
    {"content": "done"},
]
#: Bytes that are no event's frame.
GARBAGE = b"\x0a\xff\xff\xff"


def _damage(url: str, run_id: str, sequence: int) -> None:
    """Write the run's stream again with event ``sequence`` replaced by bytes that do not
    decode (a stream entry cannot be changed in place)."""
    key = KEYS.log(run_id)
    with redis.Redis.from_url(url) as client:
        entries = client.xrange(key)
        client.delete(key)
        for entry_id, fields in entries:
            frame = GARBAGE if entry_id == f"{sequence}-0".encode() else fields[b"f"]
            client.xadd(key, {"f": frame}, id=entry_id)


async def _watch_run(address: str, run_id: str) -> tuple[grpc.StatusCode, str]:
    """The status a ``WatchRun`` of ``run_id`` ends with."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        call = stub.WatchRun(service_pb2.WatchRunRequest(run_id=run_id))
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def _failure(call: Any) -> tuple[grpc.StatusCode, str]:
    """The status the client's call (a coroutine or an async iterator) failed with."""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except SidecarRpcError as exc:
        return exc.code, exc.details
    return grpc.StatusCode.OK, ""


async def test_an_undecodable_stored_event_is_data_loss_naming_the_run_and_the_event(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    alpha, beta = [
        serve_sidecar(event_store=redis_server.url, sidecar_id=name) for name in ("alpha", "beta")
    ]
    async with AsyncSidecarClient(alpha.address) as client:
        await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="damaged")
        await client.run_tool_loop("go", script=[{"content": "fine"}], run_id="fine")
    _damage(redis_server.url, "damaged", 3)
    async with AsyncSidecarClient(beta.address) as client:
        failures = [
            await _failure(client.get_run("damaged")),
            await _failure(client.run_history("damaged")),
            await _failure(client.watch("damaged")),
            await _watch_run(beta.address, "damaged"),
        ]
        fine = await client.get_run("fine")
        listed = {summary.run_id for summary in await client.list_runs()}
    for code, details in failures:
        assert code is grpc.StatusCode.DATA_LOSS, (code, details)
        assert "run 'damaged' cannot be read back" in details
        assert "damaged at event 3" in details
    assert fine.state == "completed"
    assert "fine" in listed


async def test_a_damaged_event_reaching_a_follower_on_another_sidecar_ends_it_with_data_loss(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    alpha, beta = [
        serve_sidecar(event_store=redis_server.url, sidecar_id=name) for name in ("alpha", "beta")
    ]
    seen = await start_napping(alpha.address, "napping")
    followed: list[StreamedEvent] = []

    async def follow(client: AsyncSidecarClient) -> None:
        async for streamed in client.watch("napping"):
            followed.append(streamed)
            if streamed.sequence == len(seen):  # caught up: the next entry is damaged
                with redis.Redis.from_url(redis_server.url) as other:
                    other.xadd(KEYS.log("napping"), {"f": GARBAGE}, id=f"{len(seen) + 1}-0")

    async with AsyncSidecarClient(beta.address) as client:
        code, details = await _failure(follow(client))
    assert code is grpc.StatusCode.DATA_LOSS, (code, details)
    assert "run 'napping' cannot be read back" in details
    assert f"damaged at event {len(seen) + 1}" in details
    assert [e.event for e in followed] == [e.event for e in seen]
