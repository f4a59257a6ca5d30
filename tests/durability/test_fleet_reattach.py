"""Re-attaching, and asking after, a run that another sidecar of a Redis fleet runs: a
server-hosted run is refused as it is locally (no client can take it over, so retrying would
not help), and another identity's run is refused from the run's hash alone, its log never read
from Redis (however large) nor followed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
import redis.asyncio

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ClientConfig, Sidecar, SidecarConfig
from cleveragents.tool import ToolCallStarted
from cleveragents.toolruntime.v1 import service_pb2_grpc, session_pb2, types_pb2
from tests.redis_server import RedisServer

LONG_S = 60
TOKENS = {"alice": "alice-fleet-token-1", "bob": "bob-fleet-token-22"}
NAP: list[dict[str, Any]] = [
    {"tool_calls": [{"id": f"e{i}", "name": "echo", "arguments": {"text": "x" * 200}}]}
    for i in range(20)
] + [{"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 60}}]}]
Fleet = Callable[[], Awaitable[tuple[Sidecar, Sidecar]]]


@pytest.fixture
async def fleet(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Fleet]:
    """``fleet()``: sidecars alpha and beta in process on one Redis, with identities alice
    and bob; both are stopped after the test."""
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"TEST_{name.upper()}", token)
    clients = {name: ClientConfig(name, token_env=f"TEST_{name.upper()}") for name in TOKENS}
    running: list[Sidecar] = []

    async def start() -> tuple[Sidecar, Sidecar]:
        for name in ("alpha", "beta"):
            config = SidecarConfig(
                listen="127.0.0.1:0", event_store=redis_server.url, sidecar_id=name,
                clients=clients, sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
            )  # fmt: skip
            running.append(Sidecar(config))
            await running[-1].start()
        return running[0], running[1]

    yield start
    for sidecar in running:
        await sidecar.stop(0.2)  # the napping run need not finish


async def _napping(address: str, run_id: str) -> int:
    """Start alice's detached server-hosted run that naps in a tool after 20 echoes; the
    sequence of its last event when it naps."""
    async with AsyncSidecarClient(address, token=TOKENS["alice"]) as client:
        calls = client.stream_tool_loop("go", script=NAP, run_id=run_id, detach=True)
        async for streamed in calls:
            if isinstance(streamed.event, ToolCallStarted) and streamed.event.tool_name == "sleep":
                return streamed.sequence
    raise AssertionError("the run ended before it napped")


async def _reattach(address: str, token: str, run_id: str) -> grpc.aio.AioRpcError:
    """The error a Session re-attaching to ``run_id`` as ``token``'s identity ends with."""
    start = session_pb2.SessionStart(
        spec=types_pb2.RunSpec(prompt="go", run_id=run_id), reattach_run_id=run_id,
        after_sequence=1,
    )  # fmt: skip
    async with grpc.aio.insecure_channel(address) as channel:
        call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session(
            metadata=(("authorization", f"Bearer {token}"),)
        )
        await call.write(session_pb2.SessionRequest(start=start))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _drain(call)
    return refused.value


async def _drain(call: Any) -> None:
    while await call.read() is not grpc.aio.EOF:
        pass


async def _xranges(url: str) -> int:
    """How many XRANGE commands (a run's whole log read) the Redis server has served."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_xrange", {}).get("calls", 0))


async def test_reattaching_to_a_server_hosted_run_on_another_sidecar_is_failed_precondition(
    fleet: Fleet,
) -> None:
    alpha, beta = await fleet()
    async with asyncio.timeout(LONG_S):
        await _napping(alpha.address, "hosted")
        refused = await _reattach(beta.address, TOKENS["alice"], "hosted")
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "run 'hosted' is not a Session run: watch it with FollowRun" in (refused.details() or "")


async def test_another_identitys_run_on_another_sidecar_is_refused_without_reading_its_log(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    alpha, beta = await fleet()
    async with asyncio.timeout(LONG_S):
        last = await _napping(alpha.address, "alices")
        before = await _xranges(redis_server.url)
        async with AsyncSidecarClient(beta.address, token=TOKENS["bob"]) as bob:
            with pytest.raises(SidecarRpcError) as hidden:
                await bob.get_run("alices")
            with pytest.raises(SidecarRpcError) as taken:
                await bob.run_tool_loop("x", script=[{"content": "x"}], run_id="alices")
            reattached = await _reattach(beta.address, TOKENS["bob"], "alices")
        refused_reads = await _xranges(redis_server.url) - before
        async with AsyncSidecarClient(beta.address, token=TOKENS["alice"]) as alice:
            info = await alice.get_run("alices")
        owner_reads = await _xranges(redis_server.url) - before
    assert hidden.value.code is grpc.StatusCode.NOT_FOUND
    assert taken.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert reattached.code() is grpc.StatusCode.NOT_FOUND
    assert refused_reads == 0
    assert (info.state, info.last_sequence) == ("running", last)
    assert owner_reads == 1  # the owner's own GetRun does read (and mirror) the log
