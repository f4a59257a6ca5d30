"""Frames and the queues and cursors that carry them to streams.

Each event is serialised once, as a *frame*: the ``RunEvent``'s length-delimited encoding,
which is a whole response message (``StreamToolLoopResponse``, ``WatchRunResponse`` or
``SessionResponse``) once a field tag is put in front. One tag byte makes the message that
carries one event, in ``event`` (field 1). A client that sets ``batch_events`` gets the frames
waiting for it (two or more) joined behind the tag of the repeated ``events`` field instead.
Either way no event is encoded twice, whatever the number of streams.

gRPC's cost is per message, so batching is what lets a stream that falls behind catch up in a
few large writes. Nothing waits for a batch to fill: a batch is whatever queued during the
previous write.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from typing import Protocol

from cleveragents.toolruntime.v1 import events_pb2

__all__ = [
    "BATCH_BYTES",
    "FollowedLog",
    "Follower",
    "Listener",
    "Message",
    "Subscriber",
    "batch",
    "batch_limit",
    "frame",
    "session_messages",
    "single",
    "unframe",
]

#: The tag of ``event`` (field 1, length-delimited) in all three response messages.
_EVENT_TAG = b"\x0a"
#: The tag of ``events`` in StreamToolLoopResponse and WatchRunResponse (field 2).
EVENTS_TAG = b"\x12"
#: The tag of ``events`` in SessionResponse (field 4).
SESSION_EVENTS_TAG = b"\x22"
#: A batch stops growing at this size (a single larger event still goes, alone), well under
#: the 4 MiB that gRPC clients accept by default.
BATCH_BYTES = 256 * 1024


def batch_limit(max_message_bytes: int) -> int:
    """The frame bytes a batch may gather under a send limit of ``max_message_bytes``.

    Half the limit: the tag added to each frame (one byte for at least two) and an invocation
    that closes a session's batch (counted among the items) then still fit.
    """
    return min(BATCH_BYTES, max_message_bytes // 2)


def frame(event: events_pb2.RunEvent) -> bytes:
    """Serialise ``event`` once, length-delimited: a field of a response minus its tag."""
    data = event.SerializeToString()
    size = len(data)
    if size < 0x80:
        return bytes((size,)) + data
    if size < 0x4000:  # nearly every event: two bytes
        return bytes(((size & 0x7F) | 0x80, size >> 7)) + data
    prefix = bytearray()
    while size > 0x7F:
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + data


def unframe(item: bytes) -> events_pb2.RunEvent:
    """The ``RunEvent`` inside a frame."""
    index, size, shift = 0, 0, 0
    while True:
        byte = item[index]
        size |= (byte & 0x7F) << shift
        index += 1
        if byte < 0x80:
            break
        shift += 7
    return events_pb2.RunEvent.FromString(item[index : index + size])


def single(item: bytes) -> bytes:
    """The response message carrying one frame, in ``event``."""
    return _EVENT_TAG + item


def batch(frames: Sequence[bytes], tag: bytes = EVENTS_TAG) -> bytes:
    """One response message holding ``frames`` (oldest first) in its ``events`` field ``tag``.

    A single frame goes in ``event``, as for any client: one that asked for batches reads both.
    """
    return single(frames[0]) if len(frames) == 1 else tag + tag.join(frames)


class Message(bytes):
    """A whole response message queued between frames (a session's invocation)."""

    __slots__ = ()


def session_messages(items: Sequence[bytes]) -> list[bytes]:
    """A session's outbox ``items`` packed into as few SessionResponses as order allows.

    Consecutive frames are joined into ``events``, and an invocation (a ``Message``) closes the
    message they lead: the events come before it.
    """
    messages: list[bytes] = []
    start = 0
    for index, item in enumerate(items):
        if isinstance(item, Message):
            if index > start:
                events = SESSION_EVENTS_TAG.join(items[start:index])
                messages.append(b"".join((SESSION_EVENTS_TAG, events, item)))
            else:
                messages.append(bytes(item))  # gRPC takes exactly bytes, not a subclass
            start = index + 1
    if start < len(items):
        messages.append(batch(items[start:], SESSION_EVENTS_TAG))
    return messages


class Listener(Protocol):
    """Receives each frame of a run as it is logged, and ``close`` after the last one."""

    def push(self, item: bytes) -> None: ...

    def close(self) -> None: ...


class Subscriber:
    """An unbounded queue of frames for the stream that started a run (bounded by the run).

    A session's outbox is one too: its invocations queue between the events, in order.
    """

    __slots__ = ("_items", "_waiter", "closed")

    def __init__(self) -> None:
        self._items: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False

    def push(self, item: bytes) -> None:
        if self.closed:
            return
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get_many(self, max_bytes: int) -> list[bytes]:
        """The frames waiting now, oldest first, up to ``max_bytes`` in all (but at least one).

        Empty once closed and drained.
        """
        items = self._items
        while not items:
            if self.closed:
                return []
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        taken = [items.popleft()]
        size = len(taken[0])
        while items and size + len(items[0]) <= max_bytes:
            item = items.popleft()
            size += len(item)
            taken.append(item)
        return taken


class FollowedLog(Protocol):
    """A run's log as a ``Follower`` reads it: the frames, how many are released, the end."""

    frames: list[bytes]
    released: int
    #: The total size of ``frames[:released]``.
    released_bytes: int

    @property
    def finished(self) -> bool: ...

    def wait_for_release(self) -> asyncio.Future[None]:
        """A new future, set when more frames are released or the log finishes."""
        ...


class Follower:
    """A watcher's position in a run's log: it reads the run's own frames, with no queue.

    No watcher keeps a copy of the log, and a release costs nothing per watcher that is busy
    writing. A watcher more than ``limit`` live frames behind (frames that were already
    there when it subscribed do not count) is ``dropped`` by the run: its next read is empty.
    """

    __slots__ = ("_bytes_read", "_log", "cursor", "dropped", "limit", "live_from")

    def __init__(self, log: FollowedLog, cursor: int, limit: int) -> None:
        self._log = log
        self.cursor = cursor
        self.limit = limit
        self.live_from = log.released
        self.dropped = False
        #: The size of ``frames[:cursor]``, known once the cursor's frames exist.
        self._bytes_read: int | None = None

    @property
    def lag(self) -> int:
        """Live frames released but not yet read."""
        return self._log.released - max(self.cursor, self.live_from)

    async def get_many(self, max_bytes: int) -> list[bytes]:
        """The released frames not yet read, oldest first, up to ``max_bytes`` (at least one).

        Empty once the log has finished and every frame was read, or once dropped.
        """
        log = self._log
        while self.cursor >= log.released and not self.dropped:
            if log.finished:
                return []
            await log.wait_for_release()
        if self.dropped:
            return []
        frames, start, end = log.frames, self.cursor, log.released
        if self._bytes_read is None:  # once: where this watcher joined
            self._bytes_read = sum(map(len, frames[:start]))
        # The batch's size without measuring its frames: a hundred watchers would each
        # measure the same ones.
        size = log.released_bytes - self._bytes_read
        if end - start > 1 and size > max_bytes:  # rare: cut the batch short
            stop, size = start + 1, len(frames[start])
            while stop < end and size + len(frames[stop]) <= max_bytes:
                size += len(frames[stop])
                stop += 1
            end = stop
        self.cursor = end
        self._bytes_read += size
        return frames[start:end]
