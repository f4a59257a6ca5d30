"""Run logs in a SQLite file that survives crashes, committed in groups on a writer thread.

The SQLite store commits frames in batches on a writer thread (group commit: whatever arrives
while one commit runs goes into the next) and calls back after each commit, so after a
``kill -9`` the file holds every event any client was sent, and the events of any run are a
gap-free prefix of what the run produced.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterable

import structlog

from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.runs.store import LogOwner, StoredRun
from cleveragents.wire.frames import single

__all__ = ["SqliteEventStore"]

log = structlog.get_logger("cleveragents.sidecar.store")


_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    run_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    frame BLOB NOT NULL,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID
"""
#: Runs whose logs could not be read back go to ``quarantine``, out of the way, kept.
_QUARANTINE = (
    "INSERT OR REPLACE INTO quarantine SELECT * FROM events WHERE run_id = ?",
    "DELETE FROM events WHERE run_id = ?",
)
#: A forgotten run: its rows go.
_FORGET = ("DELETE FROM events WHERE run_id = ?",)


class SqliteEventStore:
    """Run logs in a SQLite file (WAL mode), written by one background thread.

    Each row holds a whole ``WatchRunResponse`` (the frame behind its ``event`` tag).

    ``synchronous=NORMAL`` in WAL mode makes each commit survive the process dying (the data
    is in the OS before the commit returns); an operating-system crash or power loss may
    still lose the last commits.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        #: Frames to store (owner, sequence, frame), and statements to run on a run's rows.
        self._pending: list[tuple[LogOwner, int, bytes] | tuple[str, tuple[str, ...]]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> list[StoredRun]:
        """The stored runs; ``ConfigError`` (one line) for a file that is not a usable store."""
        self._loop = asyncio.get_running_loop()
        try:
            connection = self._connect()
            try:
                runs = _load(connection)
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise ConfigError(
                f"event_store {self.path} is not a usable run store ({exc}): move it away, "
                "or point event_store at another file"
            ) from None
        self._thread = threading.Thread(target=self._write_loop, name="event-store", daemon=True)
        self._thread.start()
        log.info("event store opened", path=self.path, runs=len(runs))
        return runs

    def append(self, owner: LogOwner, sequence: int, frame: bytes) -> None:
        with self._lock:
            self._pending.append((owner, sequence, frame))
        if not self._wake.is_set():
            self._wake.set()

    def forget(self, run_id: str) -> None:
        self._on_rows(run_id, _FORGET)

    def quarantine(self, run_id: str) -> None:
        self._on_rows(run_id, _QUARANTINE)

    def _on_rows(self, run_id: str, statements: tuple[str, ...]) -> None:
        with self._lock:
            self._pending.append((run_id, statements))
        if not self._wake.is_set():
            self._wake.set()

    async def close(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute(_TABLE.format(name="events"))
        connection.execute(_TABLE.format(name="quarantine"))
        return connection

    def _write_loop(self) -> None:
        connection = self._connect()
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                with self._lock:
                    batch, self._pending = self._pending, []
                if batch:
                    self._commit(connection, batch)
                if self._stopping and not self._pending:
                    return
        finally:
            connection.close()

    def _commit(
        self,
        connection: sqlite3.Connection,
        batch: list[tuple[LogOwner, int, bytes] | tuple[str, tuple[str, ...]]],
    ) -> None:
        connection.execute("BEGIN")
        released: dict[int, tuple[LogOwner, int]] = {}
        for item in batch:
            if len(item) == 2:
                run_id, statements = item
                for statement in statements:
                    connection.execute(statement, (run_id,))
            else:
                owner, sequence, frame = item
                connection.execute(
                    "INSERT OR REPLACE INTO events VALUES (?, ?, ?)",
                    (owner.run_id, sequence, single(frame)),
                )
                released[id(owner)] = (owner, sequence)
        connection.execute("COMMIT")
        if released and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_release_all, list(released.values()))


def _release_all(marks: Iterable[tuple[LogOwner, int]]) -> None:
    for owner, sequence in marks:
        owner.release(sequence)


def _load(connection: sqlite3.Connection) -> list[StoredRun]:
    """Every stored run, oldest first, with its gap-free frames."""
    runs: dict[str, list[bytes]] = {}
    for run_id, sequence, frame in connection.execute(
        "SELECT run_id, sequence, frame FROM events ORDER BY run_id, sequence"
    ):
        frames = runs.setdefault(run_id, [])
        if sequence == len(frames) + 1:  # a gap can only follow a torn batch: stop there
            frames.append(frame[1:])  # rows hold whole responses: drop the tag byte
    return [StoredRun(run_id, frames) for run_id, frames in runs.items() if frames]
