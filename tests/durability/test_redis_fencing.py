"""Fencing on a shared Redis: a sidecar whose runs another sidecar claimed (its lease expired
while it stalled) writes nothing more into their logs, and stops its copy of them."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import grpc
import pytest
import redis

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.sidecar.fleet.fencing import CLAIM
from cleveragents.sidecar.fleet.layout import Keys
from cleveragents.tool import RunCancelled, RunCompleted, RunResumed, ToolCallStarted
from cleveragents.wire import decode_frame
from tests.conftest import ServeSidecar, captured_logs
from tests.durability.test_redis_fleet import NAP, TERMINAL
from tests.redis_server import RedisServer
from tests.telemetry.conftest import sample, samples, scrape

#: The key names of the default prefix (the tests' sidecars set none).
KEYS = Keys()


async def _watch(
    address: str, run_id: str, seen: list[StreamedEvent], caught_up: asyncio.Event | None = None
) -> SidecarRpcError | None:
    """Follow a run to the end of its stream (``caught_up`` is set once the watcher has had
    what the store held when it began); the error the stream ended with, if any."""
    async with AsyncSidecarClient(address) as client:
        try:
            last = (await client.get_run(run_id)).last_sequence
            async for streamed in client.watch(run_id):
                seen.append(streamed)
                if caught_up is not None and streamed.sequence >= last:
                    caught_up.set()
        except SidecarRpcError as exc:
            return exc
    return None


def _napping(event: object) -> bool:
    return isinstance(event, ToolCallStarted) and event.tool_name == "sleep"


def _stored(url: str, run_id: str) -> list[Any]:
    """The run's events as its Redis stream holds them, checking the ids are 1, 2, 3…"""
    with redis.Redis.from_url(url) as client:
        entries = client.xrange(KEYS.log(run_id))
    assert [int(i.split(b"-")[0]) for i, _ in entries] == list(range(1, len(entries) + 1))
    return [decode_frame(fields[b"f"]).event for _, fields in entries]


async def test_a_stale_owner_can_neither_log_a_new_sequence_nor_end_a_run_claimed_by_another(
    redis_server: RedisServer,
) -> None:
    config = SidecarConfig(
        listen="127.0.0.1:0",
        event_store=redis_server.url,
        sidecar_id="stale",
        metrics_listen="127.0.0.1:0",
        sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
    )
    sidecar = Sidecar(config)
    await sidecar.start()
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            seen = []
            stream = client.stream_tool_loop("go", script=NAP, run_id="claimed", detach=True)
            async for streamed in stream:
                seen.append(streamed)
                if (
                    isinstance(streamed.event, ToolCallStarted)
                    and streamed.event.tool_name == "sleep"
                ):
                    break
            watched: list[StreamedEvent] = []
            caught_up = asyncio.Event()
            watcher = asyncio.create_task(_watch(sidecar.address, "claimed", watched, caught_up))
            await asyncio.wait_for(caught_up.wait(), 10)
            before = _stored(redis_server.url, "claimed")
            with redis.Redis.from_url(redis_server.url) as other:  # what an adopter does first
                token = other.eval(CLAIM, 1, KEYS.meta("claimed"), "usurper", "stale")
            with captured_logs() as logs:
                # The stale owner ends the run (a new sequence, and the terminal event): told
                # to on its control stream, as by a sidecar that still takes it for the owner
                # (a CancelRun sent to the stale owner itself reads the run's hash first).
                with redis.Redis.from_url(redis_server.url) as other:
                    other.xadd(KEYS.control("stale"), {"op": "cancel", "run": "claimed"})
                error = await asyncio.wait_for(watcher, 10)
            info = await client.get_run("claimed")
        assert sidecar.metrics_port
        _, exposition = await scrape(sidecar.metrics_port)
    finally:
        await sidecar.stop(1.0)
    assert _stored(redis_server.url, "claimed") == before  # nothing written after the claim
    assert token == 2  # the run's first frame wrote token 1
    assert not any(isinstance(event, TERMINAL) for event in before)
    assert error is not None
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "taken over by sidecar 'usurper'" in error.details
    assert [e.event for e in watched] == before  # only what the store holds reached it
    assert (info.state, info.last_sequence) == ("running", len(before))  # read from the store
    assert any(log["event"].startswith("store lease lost") for log in logs)
    assert sample(samples(exposition), "cleveragents_store_runs_taken_over_total") == 1


#: A nap long enough to be under way when the test stops its sidecar.
NAP_THEN_WAKE: list[dict[str, Any]] = [
    {"content": "first", "tool_calls": [{"id": "e", "name": "echo", "arguments": {"text": "a"}}]},
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 1.0}}]},
    {"content": "woke"},
]


async def _start_and_stop_mid_nap(
    address: str, process: Any, stopped: asyncio.Event
) -> tuple[list[Any], Any]:
    """Start a detached run, ``SIGSTOP`` its sidecar once its nap began (``stopped`` is set),
    and read its stream on to the end: the events it got, and the error it ended with."""
    seen = []
    async with AsyncSidecarClient(address) as client:
        stream = client.stream_tool_loop("go", script=NAP_THEN_WAKE, run_id="stalled", detach=True)
        try:
            async for streamed in stream:
                seen.append(streamed.event)
                if (
                    isinstance(streamed.event, ToolCallStarted)
                    and streamed.event.tool_name == "sleep"
                ):
                    process.send_signal(signal.SIGSTOP)  # mid-nap, its lease left to expire
                    stopped.set()
        except SidecarRpcError as exc:
            return seen, exc
    return seen, None


@pytest.mark.timeout(60)
async def test_a_sidecar_woken_after_its_runs_were_adopted_writes_nothing_and_ends_its_streams(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    alpha, beta = [
        serve_sidecar(event_store=redis_server.url, sidecar_id=name, event_store_lease_s=0.5)
        for name in ("alpha", "beta")
    ]
    stopped = asyncio.Event()
    on_alpha = asyncio.create_task(_start_and_stop_mid_nap(alpha.address, alpha.process, stopped))
    try:
        await asyncio.wait_for(stopped.wait(), 30)
        on_beta: list[StreamedEvent] = []
        assert await asyncio.wait_for(_watch(beta.address, "stalled", on_beta), 30) is None
        adopted = _stored(redis_server.url, "stalled")  # beta adopted, resumed and ended it
    finally:
        alpha.process.send_signal(signal.SIGCONT)
    seen_on_alpha, error = await asyncio.wait_for(on_alpha, 30)
    async with AsyncSidecarClient(alpha.address) as client:
        from_alpha = await client.get_run("stalled")
    assert [e.event for e in on_beta] == adopted
    assert sum(isinstance(event, TERMINAL) for event in adopted) == 1
    assert sum(isinstance(event, RunResumed) for event in adopted) == 1
    assert isinstance(adopted[-1], RunCompleted)
    # alpha's stream saw only what the store holds, and was told the run went elsewhere.
    assert seen_on_alpha == adopted[: len(seen_on_alpha)]
    assert error is not None, "alpha's stream ended as if alpha still ran the run"
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "taken over by sidecar 'beta'" in error.details
    assert _stored(redis_server.url, "stalled") == adopted  # alpha wrote nothing once awake
    assert (from_alpha.state, from_alpha.last_sequence) == ("completed", len(adopted))


async def test_appends_go_on_after_redis_forgot_the_fencing_script(
    redis_server: RedisServer,
) -> None:
    config = SidecarConfig(
        listen="127.0.0.1:0",
        event_store=redis_server.url,
        sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
    )
    sidecar = Sidecar(config)
    await sidecar.start()
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            await client.run_tool_loop("go", script=[{"content": "one"}], run_id="before")
            with redis.Redis.from_url(redis_server.url) as other:
                other.script_flush()  # as a Redis restarted without its script cache
            result = await client.run_tool_loop("go", script=[{"content": "two"}], run_id="after")
    finally:
        await sidecar.stop(1.0)
    assert result.content == "two"
    stored = _stored(redis_server.url, "after")
    assert isinstance(stored[-1], RunCompleted)
    assert sum(isinstance(event, TERMINAL) for event in stored) == 1


#: Naps twice (``sleep`` is not idempotent: the nap in flight at the adoption is interrupted,
#: and the resumed run naps again).
TWO_NAPS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": f"nap{i}", "name": "sleep", "arguments": {"seconds": 60}}]}
    for i in (1, 2)
]


async def test_cancel_run_sent_to_a_stale_owner_reaches_the_sidecar_that_took_the_run_over(
    redis_server: RedisServer,
) -> None:
    sidecars = []
    for name, lease_s in (("stale", 60.0), ("taker", 1.0)):  # stale: no renewal in the test
        config = SidecarConfig(
            listen="127.0.0.1:0", event_store=redis_server.url, sidecar_id=name,
            event_store_lease_s=lease_s,
            sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
        )  # fmt: skip
        sidecars.append(Sidecar(config))
        await sidecars[-1].start()
    stale, taker = sidecars
    try:
        async with asyncio.timeout(30), AsyncSidecarClient(stale.address) as client:
            stream = client.stream_tool_loop("go", script=TWO_NAPS, run_id="moved", detach=True)
            async for streamed in stream:
                if _napping(streamed.event):
                    break
            with redis.Redis.from_url(redis_server.url) as other:
                other.delete(KEYS.lease("stale"))  # as if it had stalled past its lease
            async with AsyncSidecarClient(taker.address) as watcher:
                async for streamed in watcher.watch("moved"):  # until the taker naps again
                    event = streamed.event
                    if isinstance(event, ToolCallStarted) and event.call_id == "nap2":
                        break
                state = await client.cancel_run("moved", reason="sent to the stale owner")
                assert state == "cancelled"  # not "running", from the stale copy
                log = [e.event async for e in watcher.watch("moved")]
    finally:
        for sidecar in sidecars:
            await sidecar.stop(0.2)
    assert sum(isinstance(event, TERMINAL) for event in log) == 1
    assert isinstance(log[-1], RunCancelled)
    assert log[-1].reason == "sent to the stale owner"
    assert _stored(redis_server.url, "moved") == log
