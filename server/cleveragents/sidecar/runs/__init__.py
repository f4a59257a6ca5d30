"""Runs: each one's life and numbered log, the readers that follow logs, the manager that
admits and keeps runs, recovery from a store, and the stores.

- ``run``: a run's lifecycle; ``Run.emit`` is where its events become frames.
- ``log``: the log of one run, handing frames to sinks and cursors once stored.
- ``readers``: the queue of the stream that started a run, and a watcher's cursor.
- ``manager``: admission, a run's loop to its end, cancellation, drain at shutdown, retention.
- ``recovery``: the runs a store kept, taken back at start-up.
- ``store`` and ``sqlite_store``: where logs live (the Redis store is the fleet's: ``fleet``);
  ``sqlite_store`` is imported, with sqlite3, only when first asked for.
"""

from typing import TYPE_CHECKING, Any

from cleveragents.sidecar.runs.log import LogStats, RunLog
from cleveragents.sidecar.runs.manager import RunManager
from cleveragents.sidecar.runs.readers import FrameSink, StreamQueue, WatchCursor
from cleveragents.sidecar.runs.run import Run, RunObserver, RunPhase
from cleveragents.sidecar.runs.store import EventStore, MemoryEventStore, StoredRun

if TYPE_CHECKING:
    from cleveragents.sidecar.runs.sqlite_store import SqliteEventStore

__all__ = [
    "EventStore",
    "FrameSink",
    "LogStats",
    "MemoryEventStore",
    "Run",
    "RunLog",
    "RunManager",
    "RunObserver",
    "RunPhase",
    "SqliteEventStore",
    "StoredRun",
    "StreamQueue",
    "WatchCursor",
]


def __getattr__(name: str) -> Any:
    """``SqliteEventStore``, imported (with sqlite3) when first asked for."""
    if name == "SqliteEventStore":
        from cleveragents.sidecar.runs.sqlite_store import SqliteEventStore

        return SqliteEventStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
