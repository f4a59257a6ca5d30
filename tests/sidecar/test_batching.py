"""Event batching (``batch_events``): fewer messages, the same events, in the same order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.toolruntime.v1 import (
    events_pb2,
    service_pb2,
    service_pb2_grpc,
    session_pb2,
    types_pb2,
)

from .conftest import (
    WAIT_S,
    ServerTools,
    SidecarFactory,
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
    sidecar: Sidecar, client: AsyncSidecarClient, stub: Stub, server_tools: ServerTools
) -> None:
    script = [turn("wait", call("g1", "gate")), *echo_script(5)]
    starter = client.stream_tool_loop("go", script=script, run_id="b2")
    live = len(await until_tool_started(starter, "gate"))
    request = service_pb2.WatchRunRequest(run_id="b2", after_sequence=live + 3, batch_events=True)
    watch = stub.WatchRun(request)
    run = sidecar.manager.require("b2")
    # The watch must follow the live run, not replay it once finished; the server has no event
    # to wait on for that, so look at its state until the watcher is there.
    async with asyncio.timeout(WAIT_S):
        while not run.log.cursors:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    server_tools.release.set()
    total = live + len(await collect(starter))
    async with asyncio.timeout(WAIT_S):
        events = events_of([r async for r in watch])

    assert [e.sequence for e in events] == list(range(live + 4, total + 1))


async def run_batching_session(stub: Stub) -> tuple[list[events_pb2.RunEvent], list[int]]:
    """A batching session of 20 client-tool calls: its events, and how many events came with
    each invocation (each checked to come after its own ``tool_call_started``)."""
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
    joined: list[int] = []
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
                joined.append(len(response.events))
                await session.write(tool_result(invocation.call_id, '{"ok": true}'))
    assert await session.code() == grpc.StatusCode.OK
    return events, joined


async def test_a_batching_session_sends_each_iteration_in_one_message(stub: Stub) -> None:
    events, joined = await run_batching_session(stub)

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].HasField("run_completed")
    # With each invocation: the previous call's completion, iteration_started, llm_responded
    # and tool_call_started (the first invocation has no completion before it).
    assert joined[1:] == [4] * 19


async def test_with_a_store_that_commits_later_invocations_still_follow_their_events(
    make_sidecar: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = await make_sidecar(event_store=str(tmp_path / "runs.sqlite"))
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        events, joined = await run_batching_session(stub)

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len(joined) == 20


async def test_batches_stay_within_a_small_send_limit(make_sidecar: SidecarFactory) -> None:
    sidecar = await make_sidecar(max_message_bytes=16 * 1024)
    text = "x" * 300  # 15 iterations of over 1 KiB each: the log is a few times the limit
    script = [turn("", call(f"c{i}", "echo", text=text)) for i in range(15)] + [turn("done")]
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        run = service_pb2.StreamToolLoopRequest(spec=run_spec(script, run_id="s"))
        async with asyncio.timeout(WAIT_S):
            assert [r async for r in stub.StreamToolLoop(run)]
        request = service_pb2.WatchRunRequest(run_id="s", batch_events=True)
        async with asyncio.timeout(WAIT_S):
            responses = [r async for r in stub.WatchRun(request)]
    events = events_of(responses)

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len(responses) < len(events)
    assert max(r.ByteSize() for r in responses) <= 16 * 1024
