"""How a run's frames reach streams: a sink told of each frame, a queue, and a cursor.

gRPC's cost is per message, so a stream writes whatever queued during its previous write as
one message (see ``cleveragents.wire.frames``); nothing waits for a batch to fill. Two readers:

- ``StreamQueue`` queues the frames of the stream that started a run (and a session's
  invocations between them); it is bounded by the run, which it cannot outlive.
- ``WatchCursor`` is a watcher's position in the run's own log: no copy, no queue.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cleveragents.sidecar.runs.deltas import DeltaCursor

__all__ = ["FrameSink", "ReadableLog", "StreamQueue", "WatchCursor"]


class FrameSink(Protocol):
    """Receives each frame of a run as it is released, and ``close`` after the last one."""

    def push(self, item: bytes) -> None: ...

    def close(self) -> None: ...


class StreamQueue:
    """An unbounded queue of frames for the stream that started a run (bounded by the run).

    A session's outbox is one too: its invocations queue between the events, in order.
    """

    __slots__ = ("_items", "_waiter", "closed", "deltas", "position")

    def __init__(self) -> None:
        self._items: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        #: The run's live deltas, for a stream that asked for them (``stream_deltas``).
        self.deltas: DeltaCursor | None = None
        #: How many of the run's events (not invocations) the reader has taken.
        self.position = 0

    def push(self, item: bytes) -> None:
        """Queue ``item`` (ignored once closed) and wake the reader."""
        if self.closed:
            return
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        """No more items: the reader drains what is queued, then gets an empty batch."""
        self.closed = True
        self.wake()

    def wake(self) -> None:
        """Wake the reader (more items, the end, or deltas)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        """Drop what is queued (a session's client went away; a new stream takes over)."""
        self._items.clear()

    async def get_many(self, max_bytes: int) -> list[bytes]:
        """The frames waiting now, oldest first, up to ``max_bytes`` in all (but at least one).

        Empty once closed and drained. With ``deltas``, the deltas due where the reader
        stands come first, alone, and a batch of events ends where deltas become due.
        """
        items, deltas = self._items, self.deltas
        while not items:
            if deltas is not None and (due := deltas.take(self.position, max_bytes)):
                return due
            if self.closed:
                return []
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if deltas is not None:
            if due := deltas.take(self.position, max_bytes):
                return due
            return self._take_until_due(max_bytes, deltas)
        taken = [items.popleft()]
        size = len(taken[0])
        while items and size + len(items[0]) <= max_bytes:
            item = items.popleft()
            size += len(item)
            taken.append(item)
        return taken

    def _take_until_due(self, max_bytes: int, deltas: DeltaCursor) -> list[bytes]:
        """Like ``get_many``'s batch, counting events, and ending after an event that deltas
        follow (a session's invocations are ``frames.Message``s, not events)."""
        items, size = self._items, 0
        taken: list[bytes] = []
        while items and (not taken or size + len(items[0]) <= max_bytes):
            item = items.popleft()
            size += len(item)
            taken.append(item)
            if type(item) is bytes:
                self.position += 1
                if deltas.due_after(self.position):
                    break
        return taken


class ReadableLog(Protocol):
    """A run's log as a ``WatchCursor`` reads it: the frames, how many are released, the end."""

    frames: list[bytes]
    released: int
    #: The total size of ``frames[:released]``.
    released_bytes: int

    @property
    def finished(self) -> bool: ...

    def wait_for_release(self) -> asyncio.Future[None]:
        """A new future, set when more frames are released or the log finishes."""
        ...


class WatchCursor:
    """A watcher's position in a run's log: it reads the run's own frames, with no queue.

    No watcher keeps a copy of the log, and a release costs nothing per watcher that is busy
    writing. A watcher more than ``limit`` live frames behind (frames that were already
    there when it subscribed do not count) is ``dropped`` by the run: its next read is empty.
    ``busy_since`` is when the frames it holds were read (``None`` while it waits for more):
    a watcher busy for long is stuck in a write its client does not read.
    """

    __slots__ = (
        "_bytes_read", "_log", "_waiter", "busy_since", "cursor", "decides", "deltas", "dropped",
        "limit", "live_from", "stalled",
    )  # fmt: skip

    def __init__(self, log: ReadableLog, cursor: int, limit: int) -> None:
        self._log = log
        self.cursor = cursor
        self.limit = limit
        self.live_from = log.released
        self.dropped = False
        #: Whether its watcher may decide the run's approvals (else its watching does not
        #: make the run's approval requests wait for an answer).
        self.decides = True
        #: Set with ``dropped`` when the watcher was dropped for not taking its frames.
        self.stalled = False
        self.busy_since: float | None = None
        #: The size of ``frames[:cursor]``, known once the cursor's frames exist.
        self._bytes_read: int | None = None
        #: The run's live deltas, for a watcher that asked for them (``stream_deltas``).
        self.deltas: DeltaCursor | None = None
        #: What it waits on while it streams deltas: a release or its own ``wake`` sets it.
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """A delta came: wake this cursor alone (one that streams deltas), not the run's
        other watchers, which only a release wakes."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def read_all(self) -> bool:
        """Whether the log has finished and every frame of it was read."""
        return self._log.finished and self.cursor >= self._log.released

    @property
    def lag(self) -> int:
        """Live frames released but not yet read."""
        return self._log.released - max(self.cursor, self.live_from)

    async def get_many(self, max_bytes: int) -> list[bytes]:
        """The released frames not yet read, oldest first, up to ``max_bytes`` (at least one).

        Empty once the log has finished and every frame was read, or once dropped. With
        ``deltas``, the deltas due after the last frame read come first, alone, and a batch
        of frames ends at a frame that deltas follow.
        """
        log, deltas = self._log, self.deltas
        self.busy_since = None
        while self.cursor >= log.released and not self.dropped:
            if deltas is not None and (due := deltas.take(self.cursor, max_bytes)):
                self.busy_since = time.monotonic()
                return due
            if log.finished:
                return []
            if deltas is None:
                await log.wait_for_release()
                continue
            self._waiter = log.wait_for_release()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.dropped:
            return []
        frames, start, end = log.frames, self.cursor, log.released
        if deltas is not None:
            if due := deltas.take(start, max_bytes):
                self.busy_since = time.monotonic()
                return due
            if (stop := deltas.due_within(start, end)) is not None:
                end = stop
        if self._bytes_read is None:  # once: where this watcher joined
            self._bytes_read = sum(map(len, frames[:start]))
        # The batch's size without measuring its frames: a hundred watchers would each
        # measure the same ones.
        if end == log.released:
            size = log.released_bytes - self._bytes_read
        else:  # cut where deltas are due
            size = sum(map(len, frames[start:end]))
        if end - start > 1 and size > max_bytes:  # rare: cut the batch short
            stop, size = start + 1, len(frames[start])
            while stop < end and size + len(frames[stop]) <= max_bytes:
                size += len(frames[stop])
                stop += 1
            end = stop
        self.cursor = end
        self._bytes_read += size
        self.busy_since = time.monotonic()
        return frames[start:end]
