"""The Redis run store's own shape and rules: one stream per run with ``<seq>-0`` ids under the
run's hash tag, the URL forms, credentials that are never logged, a Redis that is not there,
a log that cannot be read back, and a Redis killed and restarted mid-run."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ConfigError, Sidecar, SidecarConfig
from cleveragents.sidecar.fleet.layout import Keys, redacted
from cleveragents.sidecar.fleet.lease import FRESH_SHARE
from cleveragents.sidecar.fleet.redis_store import RedisEventStore
from cleveragents.sidecar.fleet.setup import store_for
from cleveragents.tool import RunFailed, ToolCallStarted
from tests.conftest import captured_logs
from tests.redis_server import RedisServer, free_port

#: The key names of the default prefix (the tests' sidecars set none).
KEYS = Keys()

ECHO_THEN_ANSWER: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "a"}}]},
    {"content": "done"},
]
NAP: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 60}}]}
]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WAIT_S = 30.0


@pytest.fixture
async def start_on(tmp_path: Any) -> AsyncIterator[Callable[..., Any]]:
    """Start in-process sidecars on a given ``event_store``; stopped at the end."""
    running: list[Sidecar] = []

    async def start(event_store: str, **settings: object) -> Sidecar:
        settings.setdefault("sandbox_roots", (os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],))
        config = SidecarConfig(listen="127.0.0.1:0", event_store=event_store, **settings)
        sidecar = Sidecar(config)
        await sidecar.start()
        running.append(sidecar)
        return sidecar

    yield start
    for sidecar in running:
        await sidecar.stop(1.0)


async def test_each_run_is_one_stream_whose_ids_are_its_sequences_under_its_hash_tag(
    start_on: Callable[..., Any], redis_server: RedisServer
) -> None:
    sidecar = await start_on(redis_server.url)
    async with AsyncSidecarClient(sidecar.address) as client:
        seen = [e async for e in client.stream_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="r")]
    with redis.Redis.from_url(redis_server.url) as store:
        entries = store.xrange(KEYS.log("r"))
        assert [entry_id for entry_id, _ in entries] == [
            f"{n}-0".encode() for n in range(1, len(seen) + 1)
        ]
        assert store.hget(KEYS.meta("r"), "owner") == b"default"
        assert store.zrange(KEYS.index, 0, -1) == [b"r"]
        # Redis refuses a frame that is not past the last: no duplicate, no reordering.
        with pytest.raises(redis.ResponseError, match="equal or smaller"):
            store.xadd(KEYS.log("r"), {"f": b"again"}, id="2-0")
    assert {KEYS.log("r").split("{")[1].split("}")[0], KEYS.meta("r").split("{")[1][:1]} == {"r"}


async def test_a_unix_socket_url_keeps_runs_across_a_restart(
    start_on: Callable[..., Any], redis_unix_server: RedisServer
) -> None:
    first = await start_on(redis_unix_server.url)
    async with AsyncSidecarClient(first.address) as client:
        done = await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="u")
    await first.stop(1.0)
    second = await start_on(redis_unix_server.url)
    async with AsyncSidecarClient(second.address) as client:
        info = await client.get_run("u")
    assert (info.state, info.result) == ("completed", done)


async def test_the_password_comes_from_the_named_variable_and_is_never_logged(
    start_on: Callable[..., Any],
    redis_factory: Callable[..., RedisServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = redis_factory(password="s3cret-pass").start()
    monkeypatch.setenv("TEST_REDIS_PASSWORD", "s3cret-pass")
    with captured_logs() as logs:
        first = await start_on(server.url, event_store_password_env="TEST_REDIS_PASSWORD")
        async with AsyncSidecarClient(first.address) as client:
            await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="p")
        await first.stop(1.0)
        in_url = server.url.replace("redis://", "redis://:s3cret-pass@")
        second = await start_on(in_url)
        async with AsyncSidecarClient(second.address) as client:
            assert (await client.get_run("p")).state == "completed"
    assert any(line.get("event") == "event store opened" for line in logs)
    assert "s3cret-pass" not in repr(logs)
    assert redacted(in_url) == server.url.replace("redis://", "redis://***@")


async def test_a_missing_password_variable_is_refused_naming_it() -> None:
    config = SidecarConfig(
        listen="127.0.0.1:0",
        event_store="redis://127.0.0.1:1/0",
        event_store_password_env="NO_SUCH_VARIABLE_FOR_REDIS",
    )
    with pytest.raises(ConfigError, match="NO_SUCH_VARIABLE_FOR_REDIS"):
        Sidecar(config)


async def test_a_wrong_password_is_refused_in_one_line_without_it(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory(password="right").start()
    url = server.url.replace("redis://", "redis://:wrong-one@")
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", event_store=url))
    with pytest.raises(ConfigError, match="cannot be used as a run store") as refused:
        await sidecar.start()
    assert "\n" not in str(refused.value)
    assert "wrong-one" not in str(refused.value)


async def test_a_redis_nobody_serves_is_refused_in_one_line() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", event_store=url))
    with pytest.raises(ConfigError, match="cannot be used as a run store") as refused:
        await sidecar.start()
    assert "\n" not in str(refused.value)
    assert url in str(refused.value)


async def test_an_undecodable_entry_quarantines_its_run_and_the_others_start(
    start_on: Callable[..., Any], redis_server: RedisServer
) -> None:
    first = await start_on(redis_server.url)
    async with AsyncSidecarClient(first.address) as client:
        await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="good")
        await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="bad")
    await first.stop(1.0)
    with redis.Redis.from_url(redis_server.url) as store:
        entries = store.xrange(KEYS.log("bad"))
        store.delete(KEYS.log("bad"))
        for entry_id, fields in entries:  # the same log, its third frame garbled
            frame = b"\x0a\x05\xff\xff\xff\xff\xff" if entry_id == b"3-0" else fields[b"f"]
            store.xadd(KEYS.log("bad"), {"f": frame}, id=entry_id)

    second = await start_on(redis_server.url)
    async with AsyncSidecarClient(second.address) as client:
        assert (await client.get_run("good")).state == "completed"
        with pytest.raises(SidecarRpcError) as missing:
            await client.get_run("bad")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    await second.stop(1.0)
    with redis.Redis.from_url(redis_server.url) as store:
        assert store.xlen(KEYS.quarantine("bad")) == len(entries)  # set aside, not deleted
        assert store.exists(KEYS.log("bad")) == 0
        assert store.smembers(KEYS.quarantined) == {b"bad"}
        assert store.zrange(KEYS.index, 0, -1) == [b"good"]


async def _health_until(channel: grpc.aio.Channel, wanted: int) -> None:
    stub: Any = health_pb2_grpc.HealthStub(channel)
    call = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
    async for response in call:
        if response.status == wanted:
            call.cancel()
            return
    raise AssertionError("health watch ended")


@pytest.mark.timeout(120)
async def test_a_redis_killed_mid_run_ends_live_runs_and_the_sidecar_recovers_on_its_restart(
    start_on: Callable[..., Any], redis_factory: Callable[..., RedisServer]
) -> None:
    server = redis_factory(appendfsync="always").start()
    sidecar = await start_on(server.url)
    async with AsyncSidecarClient(sidecar.address) as client:
        napping = client.stream_tool_loop("go", script=NAP, run_id="napping")
        async for streamed in napping:
            if isinstance(streamed.event, ToolCallStarted):
                break
        server.kill()

        # The next write fails: the store fails, and every live run ends, naming why.
        with pytest.raises(SidecarRpcError) as lost:
            await client.run_tool_loop("go", script=[ECHO_THEN_ANSWER[0], *NAP], run_id="lost")
        assert lost.value.code == grpc.StatusCode.UNAVAILABLE
        assert "run store failed (ConnectionError" in lost.value.details
        rest = [streamed.event async for streamed in napping]
        assert isinstance(rest[-1], RunFailed)
        assert "run store failed" in rest[-1].message
        channel = grpc.aio.insecure_channel(sidecar.address)
        await _health_until(channel, NOT_SERVING)
        with pytest.raises(SidecarRpcError) as refused:
            await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="refused")
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert "new runs are refused until it works again" in refused.value.details

        server.start()  # same port, same append-only file
        await _health_until(channel, SERVING)
        after = await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="after")
        assert after.content == "done"
        await channel.close()
    await sidecar.stop(1.0)

    # What the store held while Redis was down reached it: the ended runs keep their ending.
    again = await start_on(server.url)
    async with AsyncSidecarClient(again.address) as client:
        napped = [e async for e in client.watch("napping")]
        states = {run_id: (await client.get_run(run_id)).state for run_id in ("lost", "after")}
    assert [e.sequence for e in napped] == list(range(1, len(napped) + 1))
    assert isinstance(napped[-1].event, RunFailed)
    assert "run store failed" in napped[-1].event.message
    assert states == {"lost": "failed", "after": "completed"}


async def test_a_lease_renewal_that_fails_is_logged_and_counted(
    start_on: Callable[..., Any], redis_factory: Callable[..., RedisServer]
) -> None:
    server = redis_factory(appendfsync="always").start()
    sidecar = await start_on(server.url, sidecar_id="renewing")
    store = sidecar.manager.store
    assert isinstance(store, RedisEventStore)
    lease = store.lease
    assert await lease.renew() is True
    server.kill()
    with captured_logs() as logs:
        assert await lease.renew() is False
    assert lease.renewal_failures == 1
    [line] = [line for line in logs if line["event"] == "store lease renewal failed"]
    assert line["sidecar"] == "renewing"
    assert line["error"].startswith("ConnectionError")
    server.start()
    with redis.Redis.from_url(server.url) as direct:
        direct.delete(KEYS.lease("renewing"))  # as if it had expired
    with captured_logs() as logs:
        assert await lease.renew() is True
    assert lease.renewal_failures == 2
    assert any(line["event"].startswith("store lease had expired") for line in logs)
    with redis.Redis.from_url(server.url) as direct:
        assert direct.pttl(KEYS.lease("renewing")) > 0


async def test_runs_are_surely_held_only_while_the_lease_is_fresh_by_the_sidecars_own_clock(
    redis_server: RedisServer,
) -> None:
    config = SidecarConfig(event_store=redis_server.url, event_store_lease_s=0.2)
    store = store_for(config)
    assert isinstance(store, RedisEventStore)
    assert store.shared
    store.open()  # the lease is taken; nothing renews it in this test
    try:
        held_at_start = store.holds("r")
        await asyncio.sleep(0.2 * FRESH_SHARE)  # half a lease passes unrenewed, as in a stall
        held_when_stale = store.holds("r")
        renewed = await store.lease.renew()
        held_again = store.holds("r")
    finally:
        await store.close()
    assert (held_at_start, held_when_stale, renewed, held_again) == (True, False, True, True)


async def test_a_full_redis_that_refuses_writes_is_a_store_failure_and_nothing_is_evicted(
    start_on: Callable[..., Any], redis_server: RedisServer
) -> None:
    sidecar = await start_on(redis_server.url)
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("go", script=[{"content": "kept"}], run_id="kept")
        with redis.Redis.from_url(redis_server.url) as admin:
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", admin.info("memory")["used_memory"])  # full now
            with pytest.raises(SidecarRpcError) as refused:
                await client.run_tool_loop("go", script=[ECHO_THEN_ANSWER[0], *NAP], run_id="late")
            admin.config_set("maxmemory", 0)
        async with grpc.aio.insecure_channel(sidecar.address) as channel:
            await _health_until(channel, SERVING)  # it writes again
        kept = await client.get_run("kept")
        after = await client.run_tool_loop("go", script=[{"content": "room"}], run_id="after")
    assert refused.value.code is grpc.StatusCode.UNAVAILABLE
    assert "run store failed (OutOfMemoryError" in refused.value.details
    assert kept.state == "completed"
    assert after.content == "room"
    with redis.Redis.from_url(redis_server.url) as admin:
        assert admin.exists(KEYS.log("kept"))
