"""``RunLog``: one run's numbered, append-only log of frames, and who reads it.

Frames reach readers only once the event store holds them (at once for the in-memory store,
after their batch commits for SQLite), so nothing a client has seen can be lost to a crash.
Each frame is encoded once and kept once; sinks are pushed the frames as they are released,
cursors read them in place.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from cleveragents.sidecar.identity import DEFAULT_IDENTITY
from cleveragents.sidecar.runs.deltas import LiveDeltas
from cleveragents.sidecar.runs.readers import FrameSink, StreamQueue, WatchCursor
from cleveragents.sidecar.runs.store import EventStore

__all__ = ["LogStats", "RunLog"]

log = structlog.get_logger("cleveragents.sidecar.runs")
#: How often (in events) the log looks for cursors that fell too far behind.
_LAG_CHECK_EVERY = 64


@dataclass
class LogStats:
    """Counters every run's log shares with the manager (and its metrics)."""

    dropped_watchers: int = 0
    #: Runs refused because ``max_concurrent_runs`` were in flight.
    refused_runs: int = 0


class RunLog:
    """The frames of one run, sequence ``n`` at index ``n - 1``, and the readers that follow.

    ``released`` frames are stored, and only those are handed out. ``on_end`` runs once the
    frame marked by ``end`` (the terminal event) is released.
    """

    __slots__ = (
        "_end_at",
        "_held",
        "_on_end",
        "_release_waiters",
        "_storing",
        "closed",
        "cursors",
        "frames",
        "live",
        "owner",
        "released",
        "released_bytes",
        "resume_info",
        "run_id",
        "sinks",
        "stats",
        "store",
    )

    def __init__(
        self,
        run_id: str,
        store: EventStore,
        stats: LogStats,
        owner: str = DEFAULT_IDENTITY.name,
        resume_info: str = "",
    ) -> None:
        self.run_id = run_id
        #: The identity that owns the run; the store keeps it with the log.
        self.owner = owner
        #: What resuming the run needs beyond its log (see ``EventStore``); kept with it too.
        self.resume_info = resume_info
        self.store = store
        self.stats = stats
        self.frames: list[bytes] = []
        self.released = 0
        #: The size of the released frames together: a cursor sizes its batch from it.
        self.released_bytes = 0
        self.sinks: list[FrameSink] = []
        self.cursors: list[WatchCursor] = []
        self.closed = False
        self._release_waiters: list[asyncio.Future[None]] = []
        #: Who waits until a sequence is stored (``stored``), and for which.
        self._storing: list[tuple[int, asyncio.Future[None]]] = []
        self._held: collections.deque[tuple[int, FrameSink, bytes]] = collections.deque()
        self._end_at = 0
        self._on_end: Callable[[], None] | None = None
        #: The current LLM call's deltas, for the readers that stream them (not logged).
        self.live = LiveDeltas(run_id)

    @property
    def finished(self) -> bool:
        """Whether the log holds its last frame, stored (cursors then read to its end)."""
        return self.closed

    @property
    def next_sequence(self) -> int:
        """The sequence number the next frame gets."""
        return len(self.frames) + 1

    def append(self, item: bytes) -> None:
        """Add a frame and hand it to the store."""
        self.frames.append(item)
        self.store.append(self, len(self.frames), item)

    def end(self, item: bytes, on_end: Callable[[], None]) -> None:
        """Add the last frame; ``on_end`` runs once the store holds it."""
        self._on_end = on_end
        self._end_at = len(self.frames) + 1
        self.append(item)

    def restore(self, frames: list[bytes]) -> None:
        """Take the frames a store kept, all of them stored already."""
        self.frames = frames
        self.released = len(frames)
        self.released_bytes = sum(map(len, frames))

    def attach(self, sink: FrameSink) -> None:
        """Push ``sink`` every frame released from now on (``close`` once the log ends)."""
        self.sinks.append(sink)

    def cursor(self, after_sequence: int, limit: int) -> WatchCursor:
        """A watcher's cursor, from the frame after ``after_sequence`` on."""
        cursor = WatchCursor(self, after_sequence, limit)
        if not self.closed:
            self.cursors.append(cursor)
        return cursor

    def stream_deltas(self, reader: StreamQueue | WatchCursor) -> None:
        """Give ``reader`` the run's live deltas as well as its frames."""
        if isinstance(reader, StreamQueue):
            reader.deltas = self.live.reader(reader.wake, reader.position)
        else:
            reader.deltas = self.live.reader(reader.wake, reader.cursor)

    def unsubscribe(self, reader: FrameSink | WatchCursor) -> None:
        """Stop handing frames (and deltas) to ``reader``."""
        if (deltas := getattr(reader, "deltas", None)) is not None:
            self.live.drop(deltas)
        if isinstance(reader, WatchCursor):
            if reader in self.cursors:
                self.cursors.remove(reader)
        elif reader in self.sinks:
            self.sinks.remove(reader)

    async def stored(self) -> None:
        """Return once the store holds every frame logged so far (at once if it does), or the
        log closed first (its run stopped: lost to another sidecar, its task cancelled)."""
        logged = len(self.frames)
        if self.released >= logged or self.closed:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._storing.append((logged, waiter))
        await waiter

    def wait_for_release(self) -> asyncio.Future[None]:
        """A future set when more frames are released or the log finishes (for cursors)."""
        waiters = self._release_waiters
        if len(waiters) > 2 * len(self.cursors) + 16:  # watchers gone while waiting
            waiters[:] = [w for w in waiters if not w.done()]
        waiter = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        return waiter

    def sleeping(self) -> list[asyncio.Future[None]]:
        """The waits of the readers asleep until the next release (or the log's end)."""
        return [waiter for waiter in self._release_waiters if not waiter.done()]

    def push_in_order(self, sink: FrameSink, item: bytes) -> None:
        """Give ``sink`` ``item`` after every frame logged so far, once those are stored.

        A session's invocation must follow the events before it, which a store that commits
        on its own thread has not released yet.
        """
        if self.released >= len(self.frames):
            sink.push(item)
        else:
            self._held.append((len(self.frames), sink, item))

    def drop_held(self, sink: FrameSink) -> None:
        """Forget the items ``push_in_order`` holds for ``sink`` (its stream went away)."""
        self._held = collections.deque(entry for entry in self._held if entry[1] is not sink)

    def release(self, sequence: int) -> None:
        """The store holds every frame up to ``sequence``: hand them to the readers."""
        sequence = min(sequence, len(self.frames))
        if sequence <= self.released:
            return
        previous, self.released = self.released, sequence
        if sequence == previous + 1:  # the in-memory store releases frames one by one
            self.released_bytes += len(self.frames[previous])
        else:
            self.released_bytes += sum(map(len, self.frames[previous:sequence]))
        start, held = previous, self._held
        while held and held[0][0] <= sequence:
            mark, sink, item = held.popleft()
            self._push(start, mark)
            sink.push(item)
            start = mark
        self._push(start, sequence)
        if self.cursors:
            if previous // _LAG_CHECK_EVERY != sequence // _LAG_CHECK_EVERY:
                self._drop_laggards()
            self._wake_cursors()
        if self._storing:
            self._wake_stored(sequence)
        if self._on_end is not None and sequence >= self._end_at:
            on_end, self._on_end = self._on_end, None
            self.close()
            on_end()

    def close(self) -> None:
        """The log is complete: close the sinks and let the cursors read to its end."""
        self.closed = True
        self.live.close()
        for sink in self.sinks:
            sink.close()
        self.sinks.clear()
        self.cursors.clear()
        self._wake_cursors()
        self._wake_stored(len(self.frames) if self._storing else 0)

    def _wake_stored(self, sequence: int) -> None:
        """Wake the ``stored`` waits for a sequence up to ``sequence`` (all, once closed)."""
        waiting, self._storing = self._storing, []
        for mark, waiter in waiting:
            if mark <= sequence or self.closed:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                self._storing.append((mark, waiter))

    def _push(self, start: int, stop: int) -> None:
        if self.sinks and stop > start:
            items = self.frames[start:stop]
            for sink in self.sinks:
                for item in items:
                    sink.push(item)

    def _drop_laggards(self) -> None:
        """Drop the cursors too far behind (checked every few events: lag grows slowly)."""
        for cursor in [c for c in self.cursors if c.lag > c.limit]:
            cursor.dropped = True
            self.cursors.remove(cursor)
            self.stats.dropped_watchers += 1
            log.warning(
                "watcher dropped", run_id=self.run_id, reason="too far behind", lag=cursor.lag
            )

    def _wake_cursors(self) -> None:
        waiters, self._release_waiters = self._release_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
