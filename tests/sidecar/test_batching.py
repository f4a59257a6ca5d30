"""Event batching (``batch_events``): fewer messages, the same events, in the same order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, session_pb2, types_pb2

from .conftest import (
    WAIT_S,
    ServerTools,
    call,
    collect,
    echo_script,
    run_spec,
    tool_result,
    turn,
    until_tool_started,
)

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

Streamed = service_pb2.StreamToolLoopResponse | service_pb2.WatchRunResponse


def events_of(responses: Sequence[Streamed]) -> list[events_pb2.RunEvent]:
    """Every event the responses carry, batched or not, in order."""
    events: list[events_pb2.RunEvent] = []
    for response in responses:
        assert not (response.events and response.HasField("event")), "both fields set"
        events += response.events or [response.event]
    return events


async def test_a_batching_stream_gets_every_event_once_in_fewer_messages(stub: Stub) -> None:
    request = service_pb2.StreamToolLoopRequest(
        spec=run_spec(echo_script(60), max_iterations=61), batch_events=True
    )
    async with asyncio.timeout(WAIT_S):
        responses = [r async for r in stub.StreamToolLoop(request)]
    events = events_of(responses)

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].HasField("run_completed")
    assert len(responses) < len(events)
    assert any(len(r.events) > 1 for r in responses)


async def test_a_stream_that_does_not_ask_gets_one_event_per_message(stub: Stub) -> None:
    request = service_pb2.StreamToolLoopRequest(spec=run_spec(echo_script(30), max_iterations=31))
    async with asyncio.timeout(WAIT_S):
        responses = [r async for r in stub.StreamToolLoop(request)]

    assert all(r.HasField("event") and not r.events for r in responses)
    assert [r.event.sequence for r in responses] == list(range(1, len(responses) + 1))


async def test_a_batching_watcher_replays_from_after_sequence_in_order(stub: Stub) -> None:
    await stub.RunToolLoop(
        service_pb2.RunToolLoopRequest(spec=run_spec(echo_script(20), run_id="b1"))
    )
    request = service_pb2.WatchRunRequest(run_id="b1", after_sequence=5, batch_events=True)
    async with asyncio.timeout(WAIT_S):
        responses = [r async for r in stub.WatchRun(request)]
    events = events_of(responses)

    assert [e.sequence for e in events] == list(range(6, 6 + len(events)))
    assert events[-1].HasField("run_completed")
    assert len(responses) < len(events)


async def test_a_batching_watcher_past_the_live_end_skips_to_its_sequence(
    client: AsyncSidecarClient, stub: Stub, server_tools: ServerTools
) -> None:
    script = [turn("wait", call("g1", "gate")), *echo_script(5)]
    starter = client.stream_tool_loop("go", script=script, run_id="b2")
    live = len(await until_tool_started(starter, "gate"))
    request = service_pb2.WatchRunRequest(run_id="b2", after_sequence=live + 3, batch_events=True)
    watch = stub.WatchRun(request)
    await stub.GetRun(service_pb2.GetRunRequest(run_id="b2"))  # the watch is in by now
    server_tools.release.set()
    total = live + len(await collect(starter))
    async with asyncio.timeout(WAIT_S):
        events = events_of([r async for r in watch])

    assert [e.sequence for e in events] == list(range(live + 4, total + 1))


async def test_a_batching_session_sends_each_invocation_after_its_events(
    sidecar: Sidecar, channel: grpc.aio.Channel, stub: Stub
) -> None:
    script = [
        turn(f"step {i}", call(f"k{i}", "client_echo", text=str(i))) for i in range(1, 21)
    ] + [turn("done")]
    tool = types_pb2.ToolSpec(
        name="client_echo", description="Echo, in the client.", input_schema='{"type":"object"}'
    )
    session = stub.Session()
    await session.write(
        session_pb2.SessionRequest(
            start=session_pb2.SessionStart(
                spec=run_spec(script, max_iterations=25), tools=[tool], batch_events=True
            )
        )
    )
    events: list[events_pb2.RunEvent] = []
    joined = 0
    async with asyncio.timeout(WAIT_S):
        while (response := await session.read()) is not grpc.aio.EOF:
            assert isinstance(response, session_pb2.SessionResponse)
            assert not (response.events and response.WhichOneof("kind") == "event")
            events += response.events
            if response.WhichOneof("kind") == "event":
                events.append(response.event)
            elif response.WhichOneof("kind") == "tool_invocation":
                invocation = response.tool_invocation
                started = [e for e in events if e.HasField("tool_call_started")]
                assert started[-1].tool_call_started.call_id == invocation.call_id
                joined += bool(response.events)
                await session.write(tool_result(invocation.call_id, '{"ok": true}'))

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].HasField("run_completed")
    assert joined > 0  # events and their invocation travelled in one message
    assert await session.code() == grpc.StatusCode.OK
