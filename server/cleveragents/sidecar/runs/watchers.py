"""``WatchCursors``: every watcher's cursor, with the run it follows, so that those stuck in a write
can be found and dropped, and each drop is counted and logged."""

from __future__ import annotations

import time

import structlog

from cleveragents.sidecar.runs.log import LogStats
from cleveragents.sidecar.runs.readers import WatchCursor
from cleveragents.sidecar.runs.run import Run

__all__ = ["WatchCursors"]

log = structlog.get_logger("cleveragents.sidecar.runs")


class WatchCursors:
    """The cursors of the watchers following runs; ``stats`` counts the dropped ones."""

    def __init__(self, stats: LogStats, queue_size: int) -> None:
        self.stats = stats
        self.queue_size = queue_size
        self._cursors: dict[WatchCursor, Run] = {}

    def watch(self, run: Run, after_sequence: int, *, decides: bool = True) -> WatchCursor:
        """A watcher's cursor on ``run``, dropped when it falls too far behind or when it
        stalls in a write (``drop_stalled``); ``unfollow`` it when done. ``decides``: whether
        the watcher may decide the run's approvals."""
        cursor = run.log.cursor(after_sequence, self.queue_size)
        cursor.decides = decides
        self._cursors[cursor] = run
        return cursor

    def unwatch(self, run: Run, cursor: WatchCursor) -> None:
        """The watcher of ``cursor`` is gone."""
        run.log.unsubscribe(cursor)
        self._cursors.pop(cursor, None)

    def count_dropped(self, run: Run, reason: str) -> None:
        """Count and log a watcher its own handler dropped (``reason`` says why)."""
        self.stats.dropped_watchers += 1
        log.warning("watcher dropped", run_id=run.run_id, reason=reason)

    def drop_stalled(self, stall_s: float) -> int:
        """Drop the watchers stuck in one write for over ``stall_s``; returns how many.

        Its write is left to gRPC: what the client has not read stays buffered there until it
        reads (then it gets the status after it) or goes. Once the write completes, the
        cursor reads nothing more and the handler ends the call.
        """
        horizon = time.monotonic() - stall_s
        dropped = 0
        for cursor, run in list(self._cursors.items()):
            since = cursor.busy_since
            if since is None or since > horizon or cursor.dropped:
                continue
            cursor.dropped = cursor.stalled = True
            self.unwatch(run, cursor)
            self.count_dropped(run, "its client stopped reading")
            dropped += 1
        return dropped
