"""WatchRun: replay, following live runs, resuming, several watchers, slow watchers."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.tool import RunCompleted
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc

from .conftest import (
    WAIT_S,
    ServerTools,
    SidecarFactory,
    assert_well_formed,
    call,
    collect,
    echo_script,
    read_to_status,
    run_spec,
    stream_code,
    turn,
    until_tool_started,
    watch_to_end,
)

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

#: echo, then a call to ``gate`` (which waits for ``release``), then echo again, then done.
GATED_SCRIPT = [
    turn("first", call("e1", "echo", text="one")),
    turn("waiting", call("g1", "gate")),
    turn("after", call("e2", "echo", text="two")),
    turn("done"),
]


async def test_watch_after_the_end_replays_the_whole_log(client: AsyncSidecarClient) -> None:
    streamed = await collect(client.stream_tool_loop("go", script=echo_script(2), run_id="w1"))
    watched = await watch_to_end(client, "w1")

    assert watched == streamed
    assert [e.sequence for e in watched] == list(range(1, 13))


async def test_watch_of_a_unary_run_replays_its_log(client: AsyncSidecarClient) -> None:
    result = await client.run_tool_loop("go", script=echo_script(1), run_id="w-unary")
    watched = await watch_to_end(client, "w-unary")

    assert_well_formed(watched)
    last = watched[-1].event
    assert isinstance(last, RunCompleted)
    assert last.result == result


async def test_watch_joining_mid_run_sees_everything_once(
    client: AsyncSidecarClient, server_tools: ServerTools
) -> None:
    starter = client.stream_tool_loop("go", script=GATED_SCRIPT, run_id="w2")
    before = await until_tool_started(starter, "gate")
    watcher = client.watch("w2")
    replayed = await until_tool_started(watcher, "gate")
    server_tools.release.set()
    rest = await collect(watcher)
    streamed = before + await collect(starter)

    watched = replayed + rest
    assert watched == streamed
    assert_well_formed(watched)
    assert [e.sequence for e in replayed] == [e.sequence for e in before]


async def test_watch_resumes_after_a_sequence(client: AsyncSidecarClient) -> None:
    streamed = await collect(client.stream_tool_loop("go", script=echo_script(2), run_id="w3"))
    resumed = await collect(client.watch("w3", after_sequence=5))

    assert [e.sequence for e in resumed] == list(range(6, len(streamed) + 1))
    assert resumed == streamed[5:]


async def test_watch_resuming_at_the_end_yields_nothing(client: AsyncSidecarClient) -> None:
    streamed = await collect(client.stream_tool_loop("go", script=echo_script(1), run_id="w4"))

    assert await collect(client.watch("w4", after_sequence=len(streamed))) == []


async def test_several_watchers_see_identical_sequences(
    client: AsyncSidecarClient, server_tools: ServerTools
) -> None:
    starter = client.stream_tool_loop("go", script=GATED_SCRIPT, run_id="w5")
    await until_tool_started(starter, "gate")
    watchers = [client.watch("w5") for _ in range(3)]
    heads = [await until_tool_started(w, "gate") for w in watchers]
    server_tools.release.set()
    logs = [head + await collect(w) for head, w in zip(heads, watchers, strict=True)]
    await collect(starter)

    assert logs[0] == logs[1] == logs[2]
    assert_well_formed(logs[0])
    assert isinstance(logs[0][-1].event, RunCompleted)


async def test_watch_past_the_end_of_a_live_run_waits_for_later_events(
    client: AsyncSidecarClient, stub: Stub, server_tools: ServerTools
) -> None:
    starter = client.stream_tool_loop("go", script=GATED_SCRIPT, run_id="w6")
    head = await until_tool_started(starter, "gate")
    live = len(head)
    watch = stub.WatchRun(service_pb2.WatchRunRequest(run_id="w6", after_sequence=live + 2))
    # A round trip on the same channel, started after the watch: the watch is in by then.
    info = await stub.GetRun(service_pb2.GetRunRequest(run_id="w6"))
    server_tools.release.set()
    streamed = head + await collect(starter)
    async with asyncio.timeout(WAIT_S):
        watched = [response.event.sequence async for response in watch]

    assert info.last_sequence == live
    assert watched == list(range(live + 3, len(streamed) + 1))


async def test_watch_past_the_end_of_a_finished_run_is_invalid(stub: Stub) -> None:
    request = service_pb2.RunToolLoopRequest(spec=run_spec(echo_script(1), run_id="w7"))
    await stub.RunToolLoop(request)
    status = await stream_code(
        stub.WatchRun(service_pb2.WatchRunRequest(run_id="w7", after_sequence=9))
    )

    assert status[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "after_sequence 9" in status[1]


async def test_watch_unknown_run_is_not_found(stub: Stub) -> None:
    code, details = await stream_code(stub.WatchRun(service_pb2.WatchRunRequest(run_id="nope")))

    assert code == grpc.StatusCode.NOT_FOUND
    assert "nope" in details


async def test_get_run_reports_a_running_run(
    client: AsyncSidecarClient, server_tools: ServerTools
) -> None:
    starter = client.stream_tool_loop("go", script=GATED_SCRIPT, run_id="w8")
    seen = await until_tool_started(starter, "gate")
    running = await client.get_run("w8")
    server_tools.release.set()
    await collect(starter)
    done = await client.get_run("w8")

    assert (running.state, running.result, running.last_sequence) == ("running", None, len(seen))
    assert done.state == "completed"
    assert done.result is not None
    assert done.result.content == "done"


# -- slow watchers ----------------------------------------------------------------------------

BIG = "x" * 3000
SLOW_SCRIPT = [
    turn("wait", call("g0", "gate")),
    *[turn(f"s{i}", call(f"c{i}", "echo", text=BIG)) for i in range(1, 31)],
    turn("done"),
]


@pytest.mark.parametrize("batch_events", [False, True], ids=["one-per-message", "batched"])
async def test_slow_watcher_is_dropped_and_can_reconnect(
    make_sidecar: SidecarFactory, server_tools: ServerTools, batch_events: bool
) -> None:
    sidecar: Sidecar = await make_sidecar(watcher_queue_size=4)
    # A channel of its own (no shared subchannel), so the unread watcher stalls nothing else.
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with (
        AsyncSidecarClient(sidecar.address) as client,
        grpc.aio.insecure_channel(sidecar.address, options=options) as slow_channel,
    ):
        slow = service_pb2_grpc.ToolRuntimeServiceStub(slow_channel)
        starter = client.stream_tool_loop(
            "go", script=SLOW_SCRIPT, run_id="slow", max_iterations=40
        )
        head = await until_tool_started(starter, "gate")
        request = service_pb2.WatchRunRequest(run_id="slow", batch_events=batch_events)
        watch = slow.WatchRun(request)
        first = await watch.read()  # subscribed; from now on this watcher is not read
        assert isinstance(first, service_pb2.WatchRunResponse)
        server_tools.release.set()
        streamed = head + await collect(starter)
        info = await client.get_run("slow")

        rest_of_slow, code, details = await read_to_status(watch)
        received = [e.sequence for r in [first, *rest_of_slow] for e in r.events or [r.event]]
        match = re.search(r"reconnect with after_sequence=(\d+)", details)
        assert match is not None, details
        resume_at = int(match.group(1))
        rest = await collect(client.watch("slow", after_sequence=resume_at))

    assert info.state == "completed"
    assert len(streamed) == info.last_sequence == 128
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert received == list(range(1, resume_at + 1))
    assert [e.sequence for e in rest] == list(range(resume_at + 1, 129))
    assert isinstance(rest[-1].event, RunCompleted)
