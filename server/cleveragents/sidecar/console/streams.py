"""The console's live feeds, as server-sent events: a run's timeline and the runs list.

A page reads each feed with ``fetch`` (not ``EventSource``, which cannot send the
``Authorization`` header), in the ``text/event-stream`` format: ``event: NAME`` and one
``data:`` line of JSON, then a blank line.

- A run's feed is a watcher's cursor on its log (``Gateway.follow``), with its live deltas: the
  frames the run released, decoded and written as they come, the way ``WatchRun`` writes them.
  Nothing is queued for the page: the cursor reads the run's own frames. A page that stops
  reading is dropped after ``watcher_stall_s``, as any watcher is.
- The runs list is read every ``LIST_INTERVAL_S`` while a list is open: once per identity for
  every page of that identity together, and written to a page only when its rows changed.

``StreamSlots`` bounds the feeds open at once (``console_max_streams``).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.console.access import Refusal
from cleveragents.sidecar.console.rows import RunDigests
from cleveragents.sidecar.console.views import event_view, run_header
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.gateway import Following, Gateway
from cleveragents.sidecar.identity import Identity
from cleveragents.sidecar.runs import WatchCursor
from cleveragents.wire import decode_frame

__all__ = ["LIST_INTERVAL_S", "RunsFeed", "StreamSlots", "dumps", "follow_run", "sse"]

#: How often an open runs list is read again.
LIST_INTERVAL_S = 1.0
#: The runs a list shows at most (``ListRuns``' default).
LISTED = 100
#: What one message of a run's feed carries at most (one event more, if it alone is larger).
BATCH_BYTES = 256 * 1024
#: How long a run's feed gathers what comes after a frame before it writes them as one
#: message: a fast run's events then cost a page one write each time, not one each (a page
#: needs no more than 20 updates a second).
GATHER_S = 0.05

Write = Callable[[bytes], Awaitable[None]]


def dumps(value: Any) -> str:
    """``value`` as JSON a browser's ``JSON.parse`` reads: a non-finite number (which JSON
    has no word for) becomes ``null``."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def sse(event: str, data: Any) -> bytes:
    """One server-sent event. JSON text holds no line break (they are escaped in strings),
    so one ``data:`` line carries it whole."""
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode()


class StreamSlots:
    """The feeds open at once, at most ``limit``; one more is refused (503) until one ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def take(self) -> None:
        """Take a slot; ``Refusal`` (503) when none is free."""
        if self.open >= self.limit:
            raise Refusal(
                503,
                f"{self.open} console streams are open, the most this sidecar serves "
                "(console_max_streams): close a page, or retry",
            )
        self.open += 1

    def give(self) -> None:
        """A feed ended: its slot is free."""
        self.open -= 1


async def follow_run(
    write: Write, following: Following, gateway: Gateway, config: SidecarConfig
) -> None:
    """Write a run's feed: ``run`` (its header), then ``events`` (a list of event views, live
    deltas among them) as the run releases them, then ``end`` (its state, and whether this
    page was dropped for falling behind: it reconnects after its last sequence). The
    cursor is given back to the gateway however the feed ends."""
    run, cursor = following.run, following.cursor
    try:
        await write(sse("run", run_header(following, config)))
        while items := await _gathered(cursor):
            await write(
                sse("events", [event_view(decode_frame(item, history=False)) for item in items])
            )
        ending = {
            "state": str(run.state),
            "stop_reason": None if run.stop_reason is None else str(run.stop_reason),
            "dropped": cursor.dropped,
            "lost": None if run.lost is None else run.lost.message,
            "last_sequence": cursor.cursor,
        }
        await write(sse("end", ending))
    finally:
        gateway.unwatch(run, cursor)


async def _gathered(cursor: WatchCursor) -> list[bytes]:
    """The frames the cursor reads next (waiting for one), and those that come within
    ``GATHER_S`` after it, up to ``BATCH_BYTES``; empty once the log is read to its end.
    (A cursor's read may be cancelled while it waits: it moves only once it has frames.)"""
    items = await cursor.get_many(BATCH_BYTES)
    size = sum(map(len, items))
    deadline = asyncio.get_running_loop().time() + GATHER_S
    while items and size < BATCH_BYTES and not cursor.read_all:
        try:
            async with asyncio.timeout_at(deadline):
                more = await cursor.get_many(BATCH_BYTES - size)
        except TimeoutError:
            break
        if not more:
            break
        items += more
        size += sum(map(len, more))
    return items


class RunsFeed:
    """The runs lists open on every page: each identity's rows are read once a tick
    (``LIST_INTERVAL_S``), however many of its pages are open."""

    def __init__(self, gateway: Gateway, config: SidecarConfig) -> None:
        self.gateway = gateway
        self.config = config
        self.digests = RunDigests()
        #: Each identity's rows of the current tick (the tick's number, and the read).
        self._reads: dict[str, tuple[int, asyncio.Task[list[dict[str, Any]]]]] = {}
        self._readers: dict[str, int] = {}
        #: The runs each identity's last read listed: the digests kept are theirs.
        self._listed: dict[str, set[str]] = {}

    async def rows(self, caller: Identity) -> list[dict[str, Any]]:
        """The rows ``caller`` may see now (read at most once a tick for its identity)."""
        tick = _tick()
        read = self._reads.get(caller.name)
        if read is None or read[0] != tick:
            task = asyncio.create_task(self._read(caller), name=f"console-list-{caller.name}")
            task.add_done_callback(_retrieved)  # a read whose page went away is not awaited
            self._reads[caller.name] = (tick, task)
            read = (tick, task)
        return await asyncio.shield(read[1])

    async def _read(self, caller: Identity) -> list[dict[str, Any]]:
        handles = await self.gateway.listed(caller, LISTED)
        rows = [self.digests.row(handle, self.config) for handle in handles]
        self._listed[caller.name] = {handle.run.run_id for handle in handles}
        self.digests.keep_only(set().union(*self._listed.values()))
        return rows

    async def follow(self, caller: Identity) -> AsyncIterator[bytes]:
        """The list's feed for one page: ``runs`` (every row) now and whenever they change;
        ``error`` when they cannot be read (the feed goes on)."""
        self._readers[caller.name] = self._readers.get(caller.name, 0) + 1
        last = ""
        try:
            while True:
                try:
                    text = dumps(await self.rows(caller))
                except SidecarError as exc:
                    yield sse("error", {"error": exc.message})
                else:
                    if text != last:
                        last = text
                        yield f"event: runs\ndata: {text}\n\n".encode()
                await asyncio.sleep(LIST_INTERVAL_S - time.monotonic() % LIST_INTERVAL_S)
        finally:
            self._readers[caller.name] -= 1
            if not self._readers[caller.name]:
                del self._readers[caller.name]
                self._reads.pop(caller.name, None)
                self._listed.pop(caller.name, None)
                self.digests.keep_only(set().union(*self._listed.values()))

    def forget(self) -> None:
        """Drop what the reads kept (the console stops)."""
        for _, task in self._reads.values():
            task.cancel()
        self._reads.clear()


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _tick() -> int:
    return int(time.monotonic() // LIST_INTERVAL_S)
