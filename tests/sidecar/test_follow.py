"""FollowRun: a watcher that acknowledges what it handled, and never has more than its window
of unacknowledged bytes in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.sidecar.transport.follow import AckWindow, IdentityWindows
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc

from .conftest import WAIT_S, SidecarFactory, call, run_spec, stream_code, turn

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

WINDOW = 64 * 1024
#: Twenty echoes of 20 kB: a log of about 800 kB, a dozen windows.
SCRIPT = [turn("", call(f"e{i}", "echo", text="x" * 20_000)) for i in range(20)] + [turn("done")]


@pytest.fixture
async def followed(make_sidecar: SidecarFactory) -> AsyncIterator[tuple[Sidecar, Stub, int]]:
    """A sidecar (64 KiB windows, watchers dropped after 0.2 s) holding the finished run
    ``big``; a raw stub; and the run's last sequence."""
    sidecar = await make_sidecar(watch_window_bytes=WINDOW, watcher_stall_s=0.2)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        spec = run_spec(SCRIPT, run_id="big", max_iterations=30)
        await stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec))
        info = await stub.GetRun(service_pb2.GetRunRequest(run_id="big"))
        yield sidecar, stub, info.last_sequence


def _start(run_id: str = "big", after: int = 0, window: int = 0) -> service_pb2.FollowRunRequest:
    start = service_pb2.FollowRunStart(run_id=run_id, after_sequence=after, window_bytes=window)
    return service_pb2.FollowRunRequest(start=start)


def _ack(sequence: int) -> service_pb2.FollowRunRequest:
    return service_pb2.FollowRunRequest(ack=service_pb2.FollowRunAck(sequence=sequence))


async def _read_all(call: Any, *, ack: bool) -> tuple[list[Any], grpc.StatusCode, str]:
    """Every response of ``call`` (acking those that ask, if ``ack``), then its status."""
    responses: list[Any] = []
    async with asyncio.timeout(WAIT_S):
        try:
            while (response := await call.read()) is not grpc.aio.EOF:
                responses.append(response)
                seen = [e.sequence for r in responses for e in r.events]
                if ack and response.ack_requested:
                    await call.write(_ack(seen[-1]))
        except grpc.aio.AioRpcError as exc:
            return responses, exc.code(), exc.details() or ""
        return responses, await call.code(), await call.details() or ""


def _sequences(responses: list[Any]) -> list[int]:
    return [event.sequence for response in responses for event in response.events]


async def test_a_follower_that_acks_gets_the_whole_log_once_and_the_window_first(
    followed: tuple[Sidecar, Stub, int],
) -> None:
    _, stub, last = followed
    follow = stub.FollowRun()
    await follow.write(_start())
    responses, code, _ = await _read_all(follow, ack=True)

    assert code == grpc.StatusCode.OK
    assert _sequences(responses) == list(range(1, last + 1))
    assert responses[0].window_bytes == WINDOW
    assert all(r.window_bytes == 0 for r in responses[1:])
    assert any(r.ack_requested for r in responses)
    assert not responses[-1].ack_requested  # the call ends after the run's last message


async def test_a_follower_that_never_acks_gets_one_window_then_a_resume_point(
    followed: tuple[Sidecar, Stub, int],
) -> None:
    _, stub, last = followed
    follow = stub.FollowRun()
    await follow.write(_start(after=1))  # run_started, holding the script, is one big event
    responses, code, details = await _read_all(follow, ack=False)

    sent = sum(r.ByteSize() for r in responses if r.events)
    assert sent <= WINDOW
    assert responses[-1].ack_requested  # it asked, then waited
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "unacknowledged" in details
    seen = _sequences(responses)
    assert seen == list(range(2, len(seen) + 2))
    assert len(seen) < last
    assert f"after_sequence={seen[-1]}" in details


async def test_a_follower_may_ask_for_a_smaller_window_not_a_larger_one(
    followed: tuple[Sidecar, Stub, int],
) -> None:
    _, stub, _ = followed
    windows = []
    for asked in (8192, 10 * WINDOW):
        follow = stub.FollowRun()
        await follow.write(_start(window=asked))
        first = await follow.read()
        assert isinstance(first, service_pb2.FollowRunResponse)
        windows.append(first.window_bytes)
        follow.cancel()

    assert windows == [8192, WINDOW]


async def test_an_ack_of_an_event_not_yet_sent_is_invalid(
    followed: tuple[Sidecar, Stub, int],
) -> None:
    _, stub, last = followed
    follow = stub.FollowRun()
    await follow.write(_start())
    await follow.read()
    await follow.write(_ack(last))
    code, details = await stream_code(follow)

    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"ack of sequence {last}" in details


@pytest.mark.parametrize(
    "first", [_ack(1), service_pb2.FollowRunRequest()], ids=["an ack", "an empty message"]
)
async def test_a_follow_must_begin_with_its_start(
    followed: tuple[Sidecar, Stub, int], first: service_pb2.FollowRunRequest
) -> None:
    _, stub, _ = followed
    follow = stub.FollowRun()
    await follow.write(first)
    code, details = await stream_code(follow)

    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "must be 'start'" in details


async def test_a_second_start_is_refused(followed: tuple[Sidecar, Stub, int]) -> None:
    _, stub, _ = followed
    follow = stub.FollowRun()
    await follow.write(_start())
    await follow.write(_start())
    code, details = await stream_code(follow)

    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "already started" in details


async def test_following_an_unknown_run_is_not_found(followed: tuple[Sidecar, Stub, int]) -> None:
    _, stub, _ = followed
    follow = stub.FollowRun()
    await follow.write(_start("nope"))
    code, _ = await stream_code(follow)

    assert code == grpc.StatusCode.NOT_FOUND


async def test_a_sidecar_may_serve_follow_run_only(make_sidecar: SidecarFactory) -> None:
    sidecar = await make_sidecar(allow_unacknowledged_watch=False)
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("go", script=SCRIPT[-1:], run_id="r")
        followed = [event.sequence async for event in client.watch("r")]
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        code, details = await stream_code(stub.WatchRun(service_pb2.WatchRunRequest(run_id="r")))

    assert followed == [1, 2, 3, 4]  # started, iteration, LLM response, completed
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "allow_unacknowledged_watch" in details


async def test_a_watcher_waiting_for_its_identitys_room_goes_once_a_sibling_is_acked() -> None:
    """Two watchers of one identity share its window: the second's message waits until the
    first's is acknowledged, though its own window is empty; another identity's does not."""
    windows = IdentityWindows(limit=100)
    first = AckWindow(100, 0, windows.join("observer"))
    second = AckWindow(100, 0, windows.join("observer"))
    other = AckWindow(100, 0, windows.join("owner"))
    first.wrote(1, 80, asked=True)

    waiting = asyncio.create_task(second.wait_for_room(40))
    await asyncio.sleep(0)
    blocked = not waiting.done()
    first.ack(1)
    await asyncio.wait_for(waiting, WAIT_S)

    assert blocked
    assert other.fits(100)
    assert first.together is not None
    assert first.together.unacked == 0


def test_a_watcher_that_ends_frees_what_it_held_for_its_identity() -> None:
    windows = IdentityWindows(limit=100)
    shared = windows.join("observer")
    flow = AckWindow(100, 0, shared)
    flow.wrote(1, 90, asked=False)

    flow.end()
    windows.leave(shared)

    assert shared.unacked == 0
    assert windows.join("observer") is not shared  # forgotten once no watcher was left
