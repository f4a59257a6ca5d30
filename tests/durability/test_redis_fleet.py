"""Several sidecars on one Redis: each serves the others' runs (GetRun, ListRuns, WatchRun,
FollowRun, live), CancelRun and DecideApproval reach the sidecar that runs the run, and the live
runs of a sidecar killed with SIGKILL are adopted by another once its lease expires (see
``test_fleet_kill`` and ``test_session_adoption``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
import redis

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.sidecar import ClientConfig, Policy, Sidecar, SidecarConfig
from cleveragents.sidecar.fleet.layout import Keys
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    RunCancelled,
    RunCompleted,
    RunFailed,
    ToolCallStarted,
    ToolRegistry,
)
from tests.conftest import ServeSidecar
from tests.redis_server import RedisServer

NAP: list[dict[str, Any]] = [
    {"content": "first", "tool_calls": [{"id": "e", "name": "echo", "arguments": {"text": "a"}}]},
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 60}}]},
]
TERMINAL = (RunCompleted, RunFailed, RunCancelled)


async def start_napping(
    address: str, run_id: str, script: list[dict[str, Any]] = NAP
) -> list[StreamedEvent]:
    """Start a detached run that naps in a tool; return its events up to the nap."""
    seen = []
    async with AsyncSidecarClient(address) as client:
        calls = client.stream_tool_loop("go", script=script, run_id=run_id, detach=True)
        async for streamed in calls:
            seen.append(streamed)
            if isinstance(streamed.event, ToolCallStarted) and streamed.event.tool_name == "sleep":
                break
    return seen


def _two(serve_sidecar: ServeSidecar, redis_server: RedisServer, **settings: object) -> Any:
    return [
        serve_sidecar(event_store=redis_server.url, sidecar_id=name, **settings)
        for name in ("alpha", "beta")
    ]


async def test_another_sidecar_serves_get_list_and_a_live_watch_of_a_run_and_cancels_it(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    alpha, beta = _two(serve_sidecar, redis_server)
    seen = await start_napping(alpha.address, "on-alpha")
    async with AsyncSidecarClient(beta.address) as client:
        info = await client.get_run("on-alpha")
        listed = [summary.run_id for summary in await client.list_runs()]
        watched: list[StreamedEvent] = []

        async def watch() -> None:
            async for streamed in client.watch("on-alpha"):
                watched.append(streamed)

        watcher = asyncio.create_task(watch())
        state = await client.cancel_run("on-alpha", reason="from beta")
        await asyncio.wait_for(watcher, 30)
        after = await client.get_run("on-alpha")
    assert info.state == "running"
    assert info.last_sequence == len(seen)
    assert listed == ["on-alpha"]
    assert state == "cancelled"
    assert [e.sequence for e in watched] == list(range(1, len(watched) + 1))
    assert [e.event for e in watched[: len(seen)]] == [e.event for e in seen]
    assert isinstance(watched[-1].event, RunCancelled)
    assert watched[-1].event.reason == "from beta"
    assert after.state == "cancelled"
    async with AsyncSidecarClient(alpha.address) as client:  # the owner ended it, once
        own = [e async for e in client.watch("on-alpha")]
    assert [e.event for e in own] == [e.event for e in watched]
    assert sum(isinstance(e.event, TERMINAL) for e in own) == 1


@pytest.fixture
async def in_process(redis_server: RedisServer) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    running: list[Sidecar] = []

    async def start(name: str, registry: ToolRegistry | None = None) -> Sidecar:
        config = SidecarConfig(
            listen="127.0.0.1:0",
            event_store=redis_server.url,
            sidecar_id=name,
            sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
        )
        sidecar = Sidecar(config, registry)
        await sidecar.start()
        running.append(sidecar)
        return sidecar

    yield start
    for sidecar in running:
        await sidecar.stop(1.0)


async def test_an_approval_decided_on_another_sidecar_reaches_the_run(
    in_process: Callable[..., Awaitable[Any]],
) -> None:
    tools, ran = ToolRegistry(), list[str]()

    @tools.tool(side_effects=True)
    async def deploy(target: str) -> str:
        """Deploy somewhere."""
        ran.append(target)
        return target

    owner = await in_process("owner", tools)
    other = await in_process("other")
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"target": "prod"}}]},
        {"content": "done"},
    ]
    events = []
    async with (
        AsyncSidecarClient(owner.address) as here,
        AsyncSidecarClient(other.address) as there,
    ):
        async for streamed in here.stream_tool_loop("ship", script=script, run_id="ship"):
            events.append(streamed.event)
            if isinstance(streamed.event, ApprovalRequested):
                await there.decide_approval("ship", "c1", approved=True, reason="from other")
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(d.approved, d.reason) for d in decided] == [(True, "from other")]
    assert ran == ["prod"]
    assert isinstance(events[-1], RunCompleted)


async def test_the_id_of_a_run_another_sidecar_runs_is_refused_and_a_finished_one_replaced(
    in_process: Callable[..., Awaitable[Any]],
) -> None:
    first, second = await in_process("first"), await in_process("second")
    await start_napping(first.address, "busy")
    async with AsyncSidecarClient(first.address) as client:
        await client.run_tool_loop("go", script=[{"content": "old"}], run_id="done")
    async with AsyncSidecarClient(second.address) as client:
        with pytest.raises(SidecarRpcError) as taken:
            await client.run_tool_loop("go", script=[{"content": "x"}], run_id="busy")
        again = await client.run_tool_loop("go", script=[{"content": "new"}], run_id="done")
        log = [e async for e in client.watch("done")]
    async with AsyncSidecarClient(first.address) as client:
        busy = await client.get_run("busy")
    assert taken.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert "still running (on another sidecar" in taken.value.details
    assert busy.state == "running"
    assert again.content == "new"
    assert [e.sequence for e in log] == [1, 2, 3, 4]  # the new run alone
    assert log[-1].event.result.content == "new"  # type: ignore[union-attr]


async def test_a_sidecar_that_starts_leaves_the_live_runs_of_a_live_one_alone(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    # The run naps on when the test ends: a short grace, so that alpha's stop need not wait it out.
    alpha = serve_sidecar(event_store=redis_server.url, sidecar_id="alpha", shutdown_grace_s=0.2)
    seen = await start_napping(alpha.address, "napping")
    beta = serve_sidecar(event_store=redis_server.url, sidecar_id="beta")
    async with AsyncSidecarClient(beta.address) as client:
        from_beta = await client.get_run("napping")
    async with AsyncSidecarClient(alpha.address) as client:
        from_alpha = await client.get_run("napping")
    assert (from_alpha.state, from_beta.state) == ("running", "running")
    assert from_alpha.last_sequence == from_beta.last_sequence == len(seen)


async def _identified_pair(
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    tokens: dict[str, str],
    clients: dict[str, ClientConfig],
    owner_tools: ToolRegistry | None = None,
    **settings: Any,
) -> list[Sidecar]:
    """Two in-process sidecars on one Redis, ``owner`` (with ``owner_tools``) and ``other``,
    which know ``clients``, each with its token from ``tokens`` (``TEST_TOKEN_<NAME>``)."""
    for name, token in tokens.items():
        monkeypatch.setenv(f"TEST_TOKEN_{name.upper()}", token)
    sidecars = []
    for name, registry in (("owner", owner_tools), ("other", None)):
        config = SidecarConfig(
            listen="127.0.0.1:0",
            event_store=redis_server.url,
            sidecar_id=name,
            sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
            clients=clients,
            **settings,
        )
        sidecars.append(Sidecar(config, registry))
        await sidecars[-1].start()
    return sidecars


#: Alice's and April's tokens (``_strict_pair``).
STRICT_TOKENS = {"alice": "alice-token-0001", "april": "april-token-0004"}
#: A run of Alice's whose one call, of ``deploy``, asks for approval.
DEPLOY: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"target": "prod"}}]},
    {"content": "done"},
]


async def _strict_pair(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Sidecar], list[str]]:
    """``owner`` and ``other`` on one Redis; Alice's policy has ``self_approval = false``,
    April is an approver; ``owner`` serves ``deploy``, a tool with side effects, whose calls
    land in the list returned."""
    clients = {
        "alice": ClientConfig("alice", token_env="TEST_TOKEN_ALICE", policy="strict"),
        "april": ClientConfig("april", token_env="TEST_TOKEN_APRIL", roles=frozenset({"approver"})),
    }
    tools, ran = ToolRegistry(), list[str]()

    @tools.tool(side_effects=True)
    async def deploy(target: str) -> str:
        """Deploy somewhere."""
        ran.append(target)
        return target

    sidecars = await _identified_pair(
        redis_server, monkeypatch, STRICT_TOKENS, clients, tools,
        policies={"strict": Policy(name="strict", self_approval=False)},
        approval_timeout_unattended_s=60.0,
    )  # fmt: skip
    return sidecars, ran


async def test_a_decision_relayed_to_the_owner_names_its_identity_and_keeps_self_approval(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = STRICT_TOKENS
    sidecars, ran = await _strict_pair(redis_server, monkeypatch)
    owner, other = sidecars
    script = DEPLOY
    events = []
    try:
        async with (
            AsyncSidecarClient(owner.address, token=tokens["alice"]) as alice,
            AsyncSidecarClient(other.address, token=tokens["alice"]) as alice_there,
            AsyncSidecarClient(other.address, token=tokens["april"]) as april_there,
        ):
            async for streamed in alice.stream_tool_loop("ship", script=script, run_id="ship"):
                events.append(streamed.event)
                if isinstance(streamed.event, ApprovalRequested):
                    with pytest.raises(SidecarRpcError) as refused:
                        await alice_there.decide_approval("ship", "c1", approved=True)
                    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
                    assert "strict.self_approval" in str(refused.value)
                    await april_there.decide_approval("ship", "c1", approved=True, reason="ok")
    finally:
        for sidecar in sidecars:
            await sidecar.stop(1.0)
    [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.approved, decided.identity) == (True, "april")
    assert ran == ["prod"]
    assert isinstance(events[-1], RunCompleted)


async def test_whoever_writes_to_a_control_stream_decides_approvals_the_store_is_trusted(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the docs' trust section says: the sidecars believe their store. An entry written
    straight into the owner's control stream (no RPC, no token) decides a gated call as the
    identity it names, which ``self_approval = false`` does not stop."""
    tokens = STRICT_TOKENS
    sidecars, ran = await _strict_pair(redis_server, monkeypatch)
    script = DEPLOY
    forged = {"op": "decide", "run": "ship", "call": "c1", "approved": "1", "identity": "april"}
    events = []
    try:
        async with AsyncSidecarClient(sidecars[0].address, token=tokens["alice"]) as alice:
            async for streamed in alice.stream_tool_loop("ship", script=script, run_id="ship"):
                events.append(streamed.event)
                if isinstance(streamed.event, ApprovalRequested):
                    with redis.Redis.from_url(redis_server.url) as writer:
                        writer.xadd(Keys().control("owner"), forged)
    finally:
        for sidecar in sidecars:
            await sidecar.stop(1.0)
    [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.approved, decided.identity) == (True, "april")
    assert ran == ["prod"]


async def test_an_observer_cancelling_a_run_on_another_sidecar_is_told_it_may_not(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = {"alice": "alice-token-0001", "olga": "olga-token-00002"}
    clients = {
        "alice": ClientConfig("alice", token_env="TEST_TOKEN_ALICE"),
        "olga": ClientConfig("olga", token_env="TEST_TOKEN_OLGA", roles=frozenset({"observer"})),
    }
    sidecars = await _identified_pair(redis_server, monkeypatch, tokens, clients)
    owner, other = sidecars
    try:
        async with (
            AsyncSidecarClient(owner.address, token=tokens["alice"]) as alice,
            AsyncSidecarClient(other.address, token=tokens["olga"]) as olga,
        ):
            calls = alice.stream_tool_loop("go", script=NAP, run_id="napping", detach=True)
            async for streamed in calls:
                if (
                    isinstance(streamed.event, ToolCallStarted)
                    and streamed.event.tool_name == "sleep"
                ):
                    break
            await calls.aclose()
            seen = (await olga.get_run("napping")).state
            with pytest.raises(SidecarRpcError) as cancelling:
                await olga.cancel_run("napping")
            with pytest.raises(SidecarRpcError) as unknown:
                await olga.cancel_run("no-such-run")
            state = (await alice.get_run("napping")).state
            await alice.cancel_run("napping")
    finally:
        for sidecar in sidecars:
            await sidecar.stop(1.0)
    assert seen == state == "running"
    assert cancelling.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert cancelling.value.details == (
        "identity 'olga' may read run 'napping' but not cancel it: that needs the admin role, "
        "or owning the run"
    )
    assert unknown.value.code is grpc.StatusCode.NOT_FOUND
