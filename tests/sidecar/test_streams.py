"""Frames, batches, the session outbox and watcher cursors, without a server."""

from __future__ import annotations

import asyncio

from cleveragents.sidecar.runs.readers import StreamQueue, WatchCursor
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, session_pb2
from cleveragents.wire.frames import (
    Message,
    batch,
    frame,
    session_messages,
    single,
    unframe,
)


def event(sequence: int, text: str = "") -> events_pb2.RunEvent:
    pb = events_pb2.RunEvent(run_id="r", sequence=sequence)
    pb.llm_responded.content = text or f"event {sequence}"
    return pb


def invocation(call_id: str) -> Message:
    response = session_pb2.SessionResponse()
    response.tool_invocation.call_id = call_id
    return Message(response.SerializeToString())


class Log:
    """A hand-written ``ReadableLog``: frames, a release mark and an end."""

    def __init__(self, count: int) -> None:
        self.frames = [frame(event(i)) for i in range(1, count + 1)]
        self.released = count
        self.released_bytes = sum(map(len, self.frames))
        self.finished = False
        self.waiters: list[asyncio.Future[None]] = []

    def wait_for_release(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        return waiter

    def add(self, count: int) -> None:
        start = len(self.frames)
        self.frames += [frame(event(i, "x" * i)) for i in range(start + 1, start + count + 1)]
        self.released = len(self.frames)
        self.released_bytes = sum(map(len, self.frames))
        for waiter in self.waiters:
            waiter.set_result(None)
        self.waiters.clear()


def test_a_frame_round_trips_through_unframe() -> None:
    small, medium, large = event(6, "w"), event(7, "x" * 300), event(8, "z" * 20_000)

    # One-, two- and three-byte length prefixes.
    assert [unframe(frame(e)) for e in (small, medium, large)] == [small, medium, large]
    assert service_pb2.WatchRunResponse.FromString(single(frame(large))).event == large


def test_one_frame_is_a_response_with_event_set() -> None:
    response = service_pb2.WatchRunResponse.FromString(single(frame(event(3))))

    assert response.event == event(3)
    assert not response.events


def test_a_batch_parses_as_events_in_order() -> None:
    frames = [frame(event(i)) for i in range(1, 6)]
    response = service_pb2.StreamToolLoopResponse.FromString(batch(frames))

    assert list(response.events) == [event(i) for i in range(1, 6)]
    assert not response.HasField("event")


def test_a_batch_of_one_goes_in_event() -> None:
    response = service_pb2.StreamToolLoopResponse.FromString(batch([frame(event(1))]))

    assert response.event == event(1)
    assert not response.events


def test_session_messages_put_events_before_the_invocation_that_follows() -> None:
    items = [frame(event(1)), frame(event(2)), invocation("a"), invocation("b"), frame(event(3))]
    messages = [session_pb2.SessionResponse.FromString(m) for m in session_messages(items)]

    assert [list(m.events) for m in messages] == [[event(1), event(2)], [], []]
    assert [m.tool_invocation.call_id for m in messages[:2]] == ["a", "b"]
    assert messages[2].event == event(3)
    assert all(type(m) is bytes for m in session_messages(items))


async def test_a_subscriber_hands_out_what_waits_up_to_max_bytes() -> None:
    queue = StreamQueue()
    frames = [frame(event(i)) for i in range(1, 5)]
    for item in frames:
        queue.push(item)

    first = await queue.get_many(len(frames[0]) + len(frames[1]))
    rest = await queue.get_many(10**6)
    queue.close()

    assert (first, rest) == (frames[:2], frames[2:])
    assert await queue.get_many(10**6) == []


async def test_a_subscriber_gives_one_frame_even_above_max_bytes() -> None:
    queue = StreamQueue()
    queue.push(frame(event(1, "y" * 500)))

    assert len(await queue.get_many(0)) == 1


async def test_a_follower_reads_the_log_in_place_and_waits_for_more() -> None:
    log = Log(3)
    follower = WatchCursor(log, 1, limit=100)

    assert await follower.get_many(10**6) == log.frames[1:3]
    pending = asyncio.ensure_future(follower.get_many(10**6))
    await asyncio.sleep(0)
    assert not pending.done()
    log.add(2)
    assert await pending == log.frames[3:5]


async def test_a_follower_takes_at_most_max_bytes_but_always_one_frame() -> None:
    log = Log(5)
    follower = WatchCursor(log, 0, limit=100)
    two = len(log.frames[0]) + len(log.frames[1])

    assert await follower.get_many(two) == log.frames[:2]
    assert await follower.get_many(0) == log.frames[2:3]
    assert await follower.get_many(10**6) == log.frames[3:]


async def test_a_follower_that_joined_mid_log_sizes_its_batches_from_its_cursor() -> None:
    log = Log(3)
    follower = WatchCursor(log, 2, limit=100)
    log.add(4)  # frames of growing sizes
    pending = sum(map(len, log.frames[2:]))

    # One byte short of the whole rest: the last frame must wait for the next batch.
    assert await follower.get_many(pending - 1) == log.frames[2:6]
    assert await follower.get_many(10**6) == log.frames[6:]


async def test_a_follower_past_the_live_end_sizes_its_batches_once_it_is_reached() -> None:
    log = Log(2)
    follower = WatchCursor(log, 4, limit=100)
    first = asyncio.ensure_future(follower.get_many(0))
    log.add(3)
    log.add(2)
    pending = sum(map(len, log.frames[5:]))

    assert await first == log.frames[4:5]
    assert await follower.get_many(pending - 1) == log.frames[5:6]
    assert await follower.get_many(pending) == log.frames[6:]


async def test_a_follower_of_a_finished_log_ends_after_its_last_frame() -> None:
    log = Log(2)
    log.finished = True
    follower = WatchCursor(log, 0, limit=100)

    assert await follower.get_many(10**6) == log.frames
    assert await follower.get_many(10**6) == []


def test_a_follower_counts_only_live_frames_as_lag() -> None:
    log = Log(50)  # already there when it subscribes: a replay, not lag
    follower = WatchCursor(log, 0, limit=10)
    log.add(12)

    assert follower.lag == 12
    follower.cursor = 55
    assert follower.lag == 7


async def test_a_dropped_follower_reads_nothing_more() -> None:
    log = Log(4)
    follower = WatchCursor(log, 0, limit=1)
    follower.dropped = True

    assert await follower.get_many(10**6) == []
