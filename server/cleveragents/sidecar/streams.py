"""Frames and the queues that carry them to streams.

Each event is serialised once, as a frame that is at the same time a valid
``StreamToolLoopResponse``, ``WatchRunResponse`` and ``SessionResponse`` (all three carry the
``RunEvent`` as field 1), so streaming it to any number of clients costs no re-encoding.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from typing import Protocol

from cleveragents.toolruntime.v1 import events_pb2

__all__ = ["Listener", "Subscriber", "frame", "unframe"]


def frame(event: events_pb2.RunEvent) -> bytes:
    """Serialise ``event`` wrapped as field 1 of a response message."""
    data = event.SerializeToString()
    size = len(data)
    prefix = bytearray(b"\x0a")
    while size > 0x7F:
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + data


def unframe(item: bytes) -> events_pb2.RunEvent:
    """The ``RunEvent`` inside a frame."""
    index, size, shift = 1, 0, 0
    while True:
        byte = item[index]
        size |= (byte & 0x7F) << shift
        index += 1
        if byte < 0x80:
            break
        shift += 7
    return events_pb2.RunEvent.FromString(item[index : index + size])


class Listener(Protocol):
    """Receives each frame of a run as it is logged, and ``close`` after the last one."""

    def push(self, item: bytes) -> None: ...

    def close(self) -> None: ...


class Subscriber:
    """A bounded queue of frames for one stream; too far behind, it is dropped.

    ``limit=None`` means unbounded (the stream that started the run: its queue is bounded by
    the run itself). Frames replayed at subscription do not count against the limit: only
    live frames piling up behind a reader that does not keep up do.
    """

    __slots__ = ("_backlog", "_items", "_limit", "_waiter", "closed", "dropped")

    def __init__(self, limit: int | None, replay: Sequence[bytes] = ()) -> None:
        self._items: collections.deque[bytes] = collections.deque(replay)
        self._backlog = len(self._items)
        self._limit = limit
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.dropped = False

    def push(self, item: bytes) -> None:
        if self.closed:
            return
        if self._limit is not None and len(self._items) - self._backlog >= self._limit:
            self.dropped = True
            self.close()
            return
        self._items.append(item)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    async def get(self) -> bytes | None:
        """The next frame; ``None`` once closed and drained (or dropped)."""
        while not self._items:
            if self.closed:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.dropped:
            return None
        if self._backlog:
            self._backlog -= 1
        return self._items.popleft()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
