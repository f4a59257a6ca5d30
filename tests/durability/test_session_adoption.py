"""A Session run on a sidecar killed with SIGKILL while it waits on its client's tool: once the
dead sidecar's lease expires, another sidecar on the same Redis adopts the run and parks it;
the client re-attaches to that sidecar (the first answers that the run is not waiting for a
client, attached on the dead sidecar, while that lease lives, then ``UNAVAILABLE`` until the
adoption: the client retries both) and the run resumes from its log there, or nobody
re-attaches and it fails."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc

from cleveragents.client import AsyncSidecarClient, StreamedEvent
from cleveragents.sidecar.runs.recovery import ADOPTION_REASON
from cleveragents.tool import (
    RunCompleted,
    RunFailed,
    RunResumed,
    ToolCallCompleted,
    ToolCallStarted,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, session_pb2, types_pb2
from tests.conftest import ServedSidecar, ServeSidecar
from tests.redis_server import RedisServer

LONG_S = 60
#: The client's own backoff between re-attach attempts (see the Python client's session).
BACKOFF_S = 0.05
Call = grpc.aio.StreamStreamCall[session_pb2.SessionRequest, session_pb2.SessionResponse]
Stub = service_pb2_grpc.ToolRuntimeServiceStub


def session_start(
    tools: list[types_pb2.ToolSpec], run_id: str, script: list[dict[str, Any]], after: int = 0
) -> session_pb2.SessionRequest:
    spec = types_pb2.RunSpec(prompt="go", run_id=run_id)
    spec.llm.script = json.dumps(script)
    start = session_pb2.SessionStart(spec=spec, tools=tools)
    if after:
        start.reattach_run_id, start.after_sequence = run_id, after
    return session_pb2.SessionRequest(start=start)


def calling(*names: str) -> list[dict[str, Any]]:
    """A script that calls the tools ``names`` one turn each (ids r1, r2…), then ends."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"r{i}", "name": name, "arguments": {}}]}
        for i, name in enumerate(names, 1)
    ]
    return [*turns, {"content": "done"}]


async def read_to_invocation(
    call: Call, events: list[events_pb2.RunEvent]
) -> session_pb2.ToolInvocation | None:
    """Events into ``events`` until an invocation (returned) or the end (``None``)."""
    while (response := await call.read()) is not grpc.aio.EOF:
        assert isinstance(response, session_pb2.SessionResponse)
        if response.HasField("event"):
            events.append(response.event)
        events.extend(response.events)
        if response.HasField("tool_invocation"):
            return response.tool_invocation
    return None


def tool_answer(call_id: str, output: str) -> session_pb2.SessionRequest:
    return session_pb2.SessionRequest(
        tool_result=session_pb2.ToolResult(call_id=call_id, output=output)
    )


async def _killed_mid_call(
    alpha: ServedSidecar, start: session_pb2.SessionRequest, watch: AsyncSidecarClient
) -> tuple[list[events_pb2.RunEvent], session_pb2.ToolInvocation, asyncio.Task[Any]]:
    """Start a Session run on ``alpha``, start watching it with ``watch`` (another sidecar),
    and SIGKILL ``alpha`` once the run's first call is owed."""
    events: list[events_pb2.RunEvent] = []
    async with grpc.aio.insecure_channel(alpha.address) as channel:
        call: Call = Stub(channel).Session()
        await call.write(start)
        invocation = await read_to_invocation(call, events)
        assert invocation is not None
        watcher = asyncio.create_task(_watch(watch, start.start.spec.run_id))
        alpha.process.kill()  # SIGKILL: the call is in flight, sent and not answered
        alpha.process.wait(10)
    return events, invocation, watcher


async def _reattach(
    channel: grpc.aio.Channel,
    start: session_pb2.SessionRequest,
    events: list[events_pb2.RunEvent],
) -> tuple[Call, session_pb2.ToolInvocation | None]:
    """Re-attach as a client does: again while the sidecar answers that the run is the dead
    sidecar's (attached there while its lease lives; ``UNAVAILABLE`` until it is adopted)."""
    while True:
        call: Call = Stub(channel).Session()
        await call.write(start)
        try:
            return call, await read_to_invocation(call, events)
        except grpc.aio.AioRpcError as exc:
            details = exc.details() or ""
            held = exc.code() is grpc.StatusCode.FAILED_PRECONDITION and "not waiting" in details
            if exc.code() is not grpc.StatusCode.UNAVAILABLE and not held:
                raise
        assert "sidecar 'alpha'" in details or "taken back by this sidecar" in details
        await asyncio.sleep(BACKOFF_S)  # the client's backoff between attempts


async def _fleet(
    serve_sidecar: ServeSidecar, redis_server: RedisServer, reattach_s: float
) -> list[ServedSidecar]:
    """Sidecars alpha and beta on one Redis (a lease of 1 s), started side by side."""
    return list(await asyncio.gather(*(
        asyncio.to_thread(
            serve_sidecar, event_store=redis_server.url, sidecar_id=name,
            event_store_lease_s=1.0, session_reattach_s=reattach_s,
        )
        for name in ("alpha", "beta")
    )))  # fmt: skip


async def _watch(client: AsyncSidecarClient, run_id: str) -> list[StreamedEvent]:
    return [e async for e in client.watch(run_id)]


def _whole(log: list[StreamedEvent], before: list[events_pb2.RunEvent]) -> None:
    """Gap-free, what the client saw first, one end."""
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert [e.sequence for e in log[: len(before)]] == [e.sequence for e in before]
    assert sum(isinstance(e.event, RunCompleted | RunFailed) for e in log) == 1


async def test_a_session_run_adopted_from_a_killed_sidecar_gets_its_owed_call_on_the_adopter(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    alpha, beta = await _fleet(serve_sidecar, redis_server, 30.0)
    async with asyncio.timeout(LONG_S), AsyncSidecarClient(beta.address) as client:
        before, invocation, watcher = await _killed_mid_call(
            alpha, session_start(tools, "s", calling("remote")), client
        )
        async with grpc.aio.insecure_channel(beta.address) as channel:
            after: list[events_pb2.RunEvent] = []
            start = session_start(tools, "s", calling("remote"), before[-1].sequence)
            call, again = await _reattach(channel, start, after)
            assert again is not None
            await call.write(tool_answer(again.call_id, '{"n": 1}'))
            assert await read_to_invocation(call, after) is None
            assert await call.code() is grpc.StatusCode.OK
        watched = await watcher
        log = await _watch(client, "s")
    assert (again.call_id, again.idempotency_key) == ("r1", invocation.idempotency_key)
    assert [e.sequence for e in after] == list(range(len(before) + 1, len(log) + 1))
    _whole(log, before)
    assert [e.event for e in watched] == [e.event for e in log]
    [resumed] = [e.event for e in log if isinstance(e.event, RunResumed)]
    assert resumed.reason == ADOPTION_REASON
    assert resumed.rerun_call_ids == ("r1",)
    records = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert [(r.call_id, r.success, r.output) for r in records] == [("r1", True, {"n": 1})]
    assert sum(isinstance(e.event, ToolCallStarted) for e in log) == 1
    assert isinstance(log[-1].event, RunCompleted)


async def test_an_adopted_session_runs_call_not_idempotent_is_interrupted_its_late_answer_ignored(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    tools = [types_pb2.ToolSpec(name="remote"), types_pb2.ToolSpec(name="other")]
    script = calling("remote", "other")
    alpha, beta = await _fleet(serve_sidecar, redis_server, 30.0)
    async with asyncio.timeout(LONG_S), AsyncSidecarClient(beta.address) as client:
        before, _, watcher = await _killed_mid_call(
            alpha, session_start(tools, "p", script), client
        )
        async with grpc.aio.insecure_channel(beta.address) as channel:
            after: list[events_pb2.RunEvent] = []
            start = session_start(tools, "p", script, before[-1].sequence)
            call, asked = await _reattach(channel, start, after)
            # The client's tool finished after all: its answer to r1 comes too late.
            await call.write(tool_answer("r1", '{"late": true}'))
            assert asked is not None
            assert asked.call_id == "r2"  # r1 is not asked again
            await call.write(tool_answer("r2", '{"n": 2}'))
            assert await read_to_invocation(call, after) is None
            assert await call.code() is grpc.StatusCode.OK
        log = await _watch(client, "p")
        watched = await watcher
    _whole(log, before)
    assert [e.event for e in watched] == [e.event for e in log]
    [resumed] = [e.event for e in log if isinstance(e.event, RunResumed)]
    assert resumed.interrupted_call_ids == ("r1",)
    records = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert [(r.call_id, r.success) for r in records] == [("r1", False), ("r2", True)]
    assert "interrupted by a sidecar restart" in (records[0].error or "")
    assert isinstance(log[-1].event, RunCompleted)


async def test_an_adopted_session_run_nobody_reattaches_to_fails_saying_so(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    tools = [types_pb2.ToolSpec(name="remote", idempotent=True)]
    alpha, beta = await _fleet(serve_sidecar, redis_server, 0.5)
    async with asyncio.timeout(LONG_S), AsyncSidecarClient(beta.address) as client:
        start = session_start(tools, "gone", calling("remote"))
        before, _, watcher = await _killed_mid_call(alpha, start, client)
        watched = await watcher  # beta adopts it, waits 0.5 s for the client, ends it
        info = await client.get_run("gone")
    _whole(watched, before)
    end = watched[-1].event
    assert isinstance(end, RunFailed)
    assert "no client re-attached within session_reattach_s (0.5 s) of its adoption" in end.message
    assert info.state == "failed"


async def test_reattaching_to_another_sidecar_after_the_run_ended_sends_the_rest_of_its_log(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    tools = [types_pb2.ToolSpec(name="remote")]
    alpha, beta = await _fleet(serve_sidecar, redis_server, 30.0)
    events: list[events_pb2.RunEvent] = []
    async with asyncio.timeout(LONG_S):
        async with grpc.aio.insecure_channel(alpha.address) as channel:
            call: Call = Stub(channel).Session()
            await call.write(session_start(tools, "ended", calling("remote")))
            invocation = await read_to_invocation(call, events)
            assert invocation is not None
            await call.write(tool_answer(invocation.call_id, "{}"))
            assert await read_to_invocation(call, events) is None
        async with grpc.aio.insecure_channel(beta.address) as channel:
            call = Stub(channel).Session()
            await call.write(session_start(tools, "ended", calling("remote"), 2))
            rest: list[events_pb2.RunEvent] = []
            assert await read_to_invocation(call, rest) is None
            assert await call.code() is grpc.StatusCode.OK
    assert [e.sequence for e in rest] == [e.sequence for e in events[2:]]
    assert rest[-1].HasField("run_completed")
