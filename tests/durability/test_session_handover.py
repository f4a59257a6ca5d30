"""A parked Session run handed over to the sidecar of a Redis fleet its client re-attaches to.

Real sidecars on real sockets sharing one real Redis: a Session client drops on one sidecar
(its run parks there, and its hash says so) and re-attaches to another, which takes the run
with one compare-and-set on its hash; the run resumes there as an adopted one does, and the
first stops its copy. A run attached to a live stream is refused, a run whose sidecar stalled
is taken all the same (nothing is asked of it), another identity's run is ``NOT_FOUND`` with
nothing read, and of two clients racing for the same run exactly one gets it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
import redis.asyncio

from cleveragents.client import AsyncSidecarClient, StreamedEvent
from cleveragents.sidecar import ClientConfig, Sidecar, SidecarConfig
from cleveragents.sidecar.fleet.fencing import CLAIM, TAKE
from cleveragents.sidecar.fleet.layout import Keys
from cleveragents.tool import (
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    ToolCallCompleted,
    ToolCallStarted,
)
from cleveragents.toolruntime.v1 import events_pb2, session_pb2, types_pb2
from tests.conftest import ServeSidecar
from tests.durability.test_session_adoption import (
    Call,
    Stub,
    calling,
    read_to_invocation,
    session_start,
    tool_answer,
)
from tests.redis_server import RedisServer
from tests.sidecar.conftest import LaggingProxy

#: The key names of the default prefix (the tests' sidecars set none).
KEYS = Keys()

LONG_S = 30
TOKENS = {"alice": "alice-handover-token-1", "bob": "bob-handover-token-22"}
TERMINAL = (RunCompleted, RunFailed, RunCancelled)
Start = Callable[..., Awaitable[Sidecar]]


@pytest.fixture
async def fleet(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """``fleet(name)``: an in-process sidecar on the test's Redis (a lease of 1 s, Session runs
    wait 30 s for their client), with identities alice and bob (none with ``identities=False``);
    all are stopped after the test."""
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"TEST_{name.upper()}", token)
    clients = {name: ClientConfig(name, token_env=f"TEST_{name.upper()}") for name in TOKENS}
    running: list[Sidecar] = []

    async def start(name: str, identities: bool = True) -> Sidecar:
        config = SidecarConfig(
            listen="127.0.0.1:0", event_store=redis_server.url, sidecar_id=name,
            event_store_lease_s=1.0, session_reattach_s=30.0,
            clients=clients if identities else {},
            sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
        )  # fmt: skip
        running.append(Sidecar(config))
        await running[-1].start()
        return running[-1]

    yield start
    for sidecar in running:
        await sidecar.stop(0.2)


@pytest.fixture
async def direct(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    """A client of the fleet's Redis, for what a test reads or writes there itself."""
    client = redis.asyncio.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


def _auth(who: str = "alice") -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[who]}"),)


async def _parked(sidecar: Sidecar, run_id: str) -> None:
    """Until ``sidecar`` lets ``run_id`` wait for its client (it noticed the drop, or adopted)
    and the store says so (any sidecar may take it then)."""
    parked = sidecar.manager.parked
    while parked.get(run_id) is None:
        parked.parked_one.clear()
        await parked.parked_one.wait()
    await sidecar.directory.marked(run_id)


async def _stopped(sidecar: Sidecar, run_id: str) -> None:
    """Until ``sidecar`` no longer has a copy of ``run_id`` (it handed the run over)."""
    while (run := sidecar.manager.get(run_id)) is not None:
        await run.wait()


async def _dropped(
    address: str, start: session_pb2.SessionRequest
) -> tuple[list[events_pb2.RunEvent], session_pb2.ToolInvocation]:
    """Start a Session run at ``address``, read to its first invocation, drop the connection."""
    events: list[events_pb2.RunEvent] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call: Call = Stub(channel).Session(metadata=_auth())
        await call.write(start)
        invocation = await read_to_invocation(call, events)
    assert invocation is not None
    return events, invocation


async def _refused(address: str, start: session_pb2.SessionRequest, who: str = "alice") -> Any:
    """The error a re-attach at ``address`` ends with."""
    async with grpc.aio.insecure_channel(address) as channel:
        call: Call = Stub(channel).Session(metadata=_auth(who))
        await call.write(start)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read_to_invocation(call, [])
    return refused.value


async def _log(address: str, run_id: str) -> list[StreamedEvent]:
    async with AsyncSidecarClient(address, token=TOKENS["alice"]) as client:
        return [e async for e in client.watch(run_id)]


def _whole(log: list[StreamedEvent]) -> None:
    """Gap-free, no duplicate sequence, exactly one end, and that end is the last event."""
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert sum(isinstance(e.event, TERMINAL) for e in log) == 1
    assert isinstance(log[-1].event, RunCompleted)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_a_run_parked_on_one_sidecar_resumes_on_the_sidecar_its_client_reattaches_to(
    fleet: Start, idempotent: bool
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote", idempotent=idempotent)]
    async with asyncio.timeout(LONG_S):
        before, invocation = await _dropped(
            alpha.address, session_start(tools, "h", calling("remote"))
        )
        await _parked(alpha, "h")
        after: list[events_pb2.RunEvent] = []
        async with grpc.aio.insecure_channel(beta.address) as channel:
            call: Call = Stub(channel).Session(metadata=_auth())
            await call.write(session_start(tools, "h", calling("remote"), before[-1].sequence))
            asked = await read_to_invocation(call, after)
            if asked is not None:
                await call.write(tool_answer(asked.call_id, '{"n": 1}'))
                assert await read_to_invocation(call, after) is None
            assert await call.code() is grpc.StatusCode.OK
        await _stopped(alpha, "h")  # told by beta, alpha stops its copy and does not keep it
        log = await _log(alpha.address, "h")  # alpha reads the shared log now
    assert [e.sequence for e in after] == list(range(len(before) + 1, len(log) + 1))
    _whole(log)
    [resumed] = [e.event for e in log if isinstance(e.event, RunResumed)]
    assert (
        resumed.reason
        == "sidecar 'alpha' handed it over when its client re-attached to this sidecar"
    )
    records = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    if idempotent:  # asked again, under its original call id and idempotency key
        assert asked is not None
        assert (asked.call_id, asked.idempotency_key) == ("r1", invocation.idempotency_key)
        assert resumed.rerun_call_ids == ("r1",)
        assert [(r.call_id, r.success) for r in records] == [("r1", True)]
    else:
        assert asked is None
        assert resumed.interrupted_call_ids == ("r1",)
        assert [(r.call_id, r.success) for r in records] == [("r1", False)]
        assert "interrupted by a sidecar restart" in (records[0].error or "")


async def test_a_run_adopted_from_a_killed_sidecar_is_handed_to_the_third_its_client_reaches(
    fleet: Start, serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    script = calling("remote")
    dead = serve_sidecar(
        event_store=redis_server.url, sidecar_id="dead", event_store_lease_s=1.0,
        session_reattach_s=30.0,
    )  # fmt: skip
    beta = await fleet("beta", identities=False)  # as the killed one: no identities
    async with asyncio.timeout(LONG_S):
        events: list[events_pb2.RunEvent] = []
        async with grpc.aio.insecure_channel(dead.address) as channel:
            call: Call = Stub(channel).Session()
            await call.write(session_start(tools, "k", script))
            assert await read_to_invocation(call, events) is not None
            dead.process.kill()  # SIGKILL, the call owed; no client, no lease from now on
            dead.process.wait(10)
        await _parked(beta, "k")  # beta adopted it
        gamma = await fleet("gamma", identities=False)
        after: list[events_pb2.RunEvent] = []
        async with grpc.aio.insecure_channel(gamma.address) as channel:
            call = Stub(channel).Session()
            await call.write(session_start(tools, "k", script, events[-1].sequence))
            asked = await read_to_invocation(call, after)
            assert asked is not None
            assert asked.call_id == "r1"
            await call.write(tool_answer("r1", "{}"))
            assert await read_to_invocation(call, after) is None
            assert await call.code() is grpc.StatusCode.OK
        await _stopped(beta, "k")
        async with AsyncSidecarClient(beta.address) as client:
            log = [e async for e in client.watch("k")]
    _whole(log)
    # Adopted by beta (parked: no loop, nothing logged), then resumed on gamma.
    [resumed] = [e.event for e in log if isinstance(e.event, RunResumed)]
    assert (
        resumed.reason
        == "sidecar 'beta' handed it over when its client re-attached to this sidecar"
    )
    assert resumed.rerun_call_ids == ("r1",)


async def test_a_run_attached_to_a_live_stream_on_its_sidecar_is_failed_precondition_naming_it(
    fleet: Start,
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote")]
    async with asyncio.timeout(LONG_S), grpc.aio.insecure_channel(alpha.address) as channel:
        call: Call = Stub(channel).Session(metadata=_auth())
        await call.write(session_start(tools, "held", calling("remote")))
        events: list[events_pb2.RunEvent] = []
        invocation = await read_to_invocation(call, events)
        assert invocation is not None
        refused = await _refused(beta.address, session_start(tools, "held", calling("remote"), 1))
        await call.write(tool_answer(invocation.call_id, "{}"))  # the holder goes on, undisturbed
        assert await read_to_invocation(call, events) is None
        assert await call.code() is grpc.StatusCode.OK
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "attached to another stream on sidecar 'alpha'" in (refused.details() or "")
    assert sum(e.HasField("run_completed") for e in events) == 1


async def test_a_parked_run_whose_sidecar_stalled_is_taken_without_asking_that_sidecar(
    fleet: Start, direct: redis.asyncio.Redis
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "stuck", calling("remote")))
        await _parked(alpha, "stuck")
        # Its hash names a sidecar whose lease lives and which never reads anything.
        await direct.set(KEYS.lease("ghost"), "1", px=60_000)
        await direct.hset(KEYS.meta("stuck"), "sidecar", "ghost")
        async with grpc.aio.insecure_channel(beta.address) as channel:
            call: Call = Stub(channel).Session(metadata=_auth())
            await call.write(session_start(tools, "stuck", calling("remote"), before[-1].sequence))
            asked = await read_to_invocation(call, [])
            assert asked is not None
            await call.write(tool_answer(asked.call_id, "{}"))
            assert await read_to_invocation(call, []) is None
            assert await call.code() is grpc.StatusCode.OK
        owner = await direct.hget(KEYS.meta("stuck"), "sidecar")
        log = await _log(beta.address, "stuck")
    assert owner == b"beta"
    _whole(log)


async def test_another_identitys_parked_run_is_not_found_and_nothing_is_asked(
    fleet: Start, direct: redis.asyncio.Redis
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote")]
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "mine", calling("remote")))
        await _parked(alpha, "mine")
        start = session_start(tools, "mine", calling("remote"), before[-1].sequence)
        refused = await _refused(beta.address, start, who="bob")
        asks = await direct.xlen(KEYS.control("alpha"))
        owner = await direct.hget(KEYS.meta("mine"), "sidecar")
    assert refused.code() is grpc.StatusCode.NOT_FOUND
    assert asks == 0
    assert alpha.manager.parked.get("mine") is not None  # still alice's, waiting on alpha
    assert owner == b"alpha"


async def test_a_reattach_to_a_parked_run_whose_keys_vanished_is_data_loss(
    fleet: Start, direct: redis.asyncio.Redis
) -> None:
    alpha = await fleet("alpha")
    tools = [types_pb2.ToolSpec(name="remote")]
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "gone", calling("remote")))
        await _parked(alpha, "gone")
        await direct.flushall()
        start = session_start(tools, "gone", calling("remote"), before[-1].sequence)
        refused = await _refused(alpha.address, start)
    assert refused.code() is grpc.StatusCode.DATA_LOSS
    assert "run 'gone': its log is gone from the run store" in refused.details()
    assert "sidecar 'none'" not in refused.details()


async def test_of_two_clients_racing_to_reattach_at_two_sidecars_exactly_one_gets_the_run(
    fleet: Start,
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    script = calling("remote")
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "race", script))
        await _parked(alpha, "race")
        start = session_start(tools, "race", script, before[-1].sequence)

        channels = [grpc.aio.insecure_channel(s.address) for s in (alpha, beta)]
        calls: list[Call] = [Stub(channel).Session(metadata=_auth()) for channel in channels]

        async def attempt(call: Call) -> session_pb2.ToolInvocation | grpc.StatusCode:
            await call.write(start)
            try:  # the winner is not answered until both attempts are decided
                asked = await read_to_invocation(call, [])
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            assert asked is not None
            return asked

        try:
            outcomes = await asyncio.gather(*(attempt(call) for call in calls))
            [(winner, asked)] = [
                (call, got) for call, got in zip(calls, outcomes, strict=True)
                if isinstance(got, session_pb2.ToolInvocation)
            ]  # fmt: skip
            await winner.write(tool_answer(asked.call_id, "{}"))
            assert await read_to_invocation(winner, []) is None
            assert await winner.code() is grpc.StatusCode.OK
        finally:
            for channel in channels:
                await channel.close()
        log = await _log(beta.address, "race")
    assert [o for o in outcomes if not isinstance(o, session_pb2.ToolInvocation)] == [
        grpc.StatusCode.FAILED_PRECONDITION
    ]
    _whole(log)


async def test_a_client_reattaching_at_the_old_sidecar_after_a_handover_is_failed_precondition(
    fleet: Start,
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    script = calling("remote")
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "moved", script))
        await _parked(alpha, "moved")
        start = session_start(tools, "moved", script, before[-1].sequence)
        async with grpc.aio.insecure_channel(beta.address) as channel:
            call: Call = Stub(channel).Session(metadata=_auth())
            await call.write(start)
            asked = await read_to_invocation(call, [])  # handed over to beta, which holds it now
            assert asked is not None
            refused = await _refused(alpha.address, start)
            await call.write(tool_answer(asked.call_id, "{}"))
            assert await read_to_invocation(call, []) is None
        log = await _log(alpha.address, "moved")
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    details = refused.details() or ""
    assert (
        "attached to another stream on sidecar 'beta'" in details
        or "handed over to sidecar 'beta'" in details
    )
    _whole(log)


async def test_a_run_handed_over_whose_answer_was_lost_is_taken_at_the_next_reattach(
    fleet: Start, direct: redis.asyncio.Redis
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    script = calling("remote")
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "lost", script))
        await _parked(alpha, "lost")
        # alpha's claim for beta, and no answer (as if alpha died right after it).
        assert await direct.eval(CLAIM, 1, KEYS.meta("lost"), "beta", "alpha")
        async with grpc.aio.insecure_channel(beta.address) as channel:
            call: Call = Stub(channel).Session(metadata=_auth())
            await call.write(session_start(tools, "lost", script, before[-1].sequence))
            asked = await read_to_invocation(call, [])
            assert asked is not None
            await call.write(tool_answer(asked.call_id, "{}"))
            assert await read_to_invocation(call, []) is None
            assert await call.code() is grpc.StatusCode.OK
        asks = await direct.xlen(KEYS.control("alpha"))
        log = await _log(beta.address, "lost")
    assert asks == 0  # beta took it itself: the store said it was beta's already
    _whole(log)


async def test_the_python_client_behind_a_balancer_gets_its_run_back_from_another_sidecar(
    fleet: Start,
) -> None:
    alpha, beta = await fleet("alpha", identities=False), await fleet("beta", identities=False)
    balancer = LaggingProxy(alpha.address)
    await balancer.start()
    running, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def remote() -> dict[str, str]:
        """Wait for the test's release.

        Returns:
            A fixed answer.
        """
        calls.append("remote")
        running.set()
        await release.wait()
        return {"answer": "late"}

    seen: list[StreamedEvent] = []
    try:
        async with AsyncSidecarClient(balancer.address) as client:
            session = client.session(
                "go", tools=[remote], script=calling("remote"), run_id="lb", reattach=True
            )
            async with asyncio.timeout(LONG_S):
                async for streamed in session:
                    seen.append(streamed)
                    if isinstance(streamed.event, ToolCallStarted) and not release.is_set():
                        await running.wait()
                        balancer.retarget(beta.address)  # the next connection reaches beta
                        balancer.cut()  # the connection drops with the call in flight
                        await _parked(alpha, "lb")
                        release.set()
        async with AsyncSidecarClient(beta.address) as direct:
            log = [e async for e in direct.watch("lb")]
    finally:
        await balancer.close()
    assert calls == ["remote"]  # not idempotent: not run again, its late answer ignored
    assert [e.sequence for e in seen] == [e.sequence for e in log]
    _whole(log)
    [resumed] = [e.event for e in log if isinstance(e.event, RunResumed)]
    assert (
        resumed.reason
        == "sidecar 'alpha' handed it over when its client re-attached to this sidecar"
    )
    assert resumed.interrupted_call_ids == ("r1",)


async def test_the_compare_and_set_takes_only_a_parked_run_and_only_for_its_owner(
    fleet: Start, direct: redis.asyncio.Redis
) -> None:
    alpha, _ = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote")]
    async with asyncio.timeout(LONG_S):
        await _dropped(alpha.address, session_start(tools, "kept", calling("remote")))
        await _parked(alpha, "kept")
        as_bob = await direct.eval(TAKE, 1, KEYS.meta("kept"), "beta", "bob", "default")
        await direct.hset(KEYS.meta("kept"), "parked", "")  # as if a client re-attached there
        not_parked = await direct.eval(TAKE, 1, KEYS.meta("kept"), "beta", "alice", "default")
        owner = await direct.hget(KEYS.meta("kept"), "sidecar")
    assert as_bob == [0, b"alpha"]
    assert not_parked == [0, b"alpha"]
    assert owner == b"alpha"
    assert alpha.manager.parked.get("kept") is not None  # still waiting on alpha


async def test_nothing_on_a_control_stream_moves_a_run_there(
    fleet: Start, direct: redis.asyncio.Redis
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote")]
    nap = [{"tool_calls": [{"id": "n", "name": "sleep", "arguments": {"seconds": 60}}]}]
    async with (
        asyncio.timeout(LONG_S),
        AsyncSidecarClient(alpha.address, token=TOKENS["alice"]) as client,
    ):
        await _dropped(alpha.address, session_start(tools, "theirs", calling("remote")))
        await _parked(alpha, "theirs")
        witness = client.stream_tool_loop("nap", script=nap, run_id="witness", detach=True)
        async for streamed in witness:
            if isinstance(streamed.event, ToolCallStarted):
                break
        # A forged notice that beta took the run: alpha believes the store, not the notice.
        await direct.xadd(KEYS.control("alpha"), {"op": "taken", "run": "theirs", "from": "beta"})
        # Read in order: once the witness is cancelled, the notice before it was handled.
        await direct.xadd(KEYS.control("alpha"), {"op": "cancel", "run": "witness"})
        ended = [e async for e in client.watch("witness")][-1]
        owner = await direct.hget(KEYS.meta("theirs"), "sidecar")
    assert isinstance(ended.event, RunCancelled)
    assert beta.manager.get("theirs") is None
    assert alpha.manager.parked.get("theirs") is not None
    assert owner == b"alpha"


async def test_a_reattach_refused_where_the_run_waits_leaves_it_for_another_sidecar_to_take(
    fleet: Start,
) -> None:
    alpha, beta = await fleet("alpha"), await fleet("beta")
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    script = calling("remote")
    async with asyncio.timeout(LONG_S):
        before, _ = await _dropped(alpha.address, session_start(tools, "again", script))
        await _parked(alpha, "again")
        wrong = session_start(
            [types_pb2.ToolSpec(name="other")], "again", script, before[-1].sequence
        )
        refused = await _refused(alpha.address, wrong)  # held for it, then given back
        await _parked(alpha, "again")
        async with grpc.aio.insecure_channel(beta.address) as channel:
            call: Call = Stub(channel).Session(metadata=_auth())
            await call.write(session_start(tools, "again", script, before[-1].sequence))
            asked = await read_to_invocation(call, [])
            assert asked is not None
            await call.write(tool_answer(asked.call_id, "{}"))
            assert await read_to_invocation(call, []) is None
        log = await _log(beta.address, "again")
    assert refused.code() is grpc.StatusCode.INVALID_ARGUMENT
    _whole(log)
