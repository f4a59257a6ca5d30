"""``EventChannel``: the queue between a running loop and ``stream_tool_loop``'s consumer."""

from __future__ import annotations

import asyncio
import collections

from cleveragents.tool.events import RunEvent

__all__ = ["EventChannel"]


class EventChannel:
    """An unbounded single-consumer queue, lighter than ``asyncio.Queue`` on the hot path."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[RunEvent] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, event: RunEvent) -> None:
        """Queue ``event`` and wake the consumer."""
        self._items.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> RunEvent:
        """The oldest event, waiting for one if need be."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()
