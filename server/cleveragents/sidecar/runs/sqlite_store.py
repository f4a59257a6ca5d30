"""Run logs in a SQLite file that survives crashes, committed in groups on a writer thread.

The SQLite store commits frames in batches on a writer thread (group commit: whatever arrives
while one commit runs goes into the next) and calls back after each commit, so after a
``kill -9`` the file holds every event any client was sent, and the events of any run are a
gap-free prefix of what the run produced.

A commit that fails (a full disk, a file gone read-only) does not stop the writer: the store
turns *failing*, tells its listeners (the run manager ends the live runs and refuses new
ones), releases what it holds so that no reader hangs, and tries the same batch again every
``retry_interval_s`` until a commit succeeds; then it tells its listeners it works again.

A store file belongs to one sidecar at a time: ``open`` takes an exclusive advisory lock
(``flock``) on ``<file>.lock`` beside it, held until ``close`` (or the process's end, a crash
included), and writes there who holds it. A second sidecar on the file would take the first
one's live runs for a crash's and run them again, tools and all: it refuses to start instead,
naming the holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable

import structlog

from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.identity import DEFAULT_IDENTITY
from cleveragents.sidecar.runs.store import LogOwner, StoredRun, StoreListener
from cleveragents.wire.frames import single

__all__ = ["SqliteEventStore", "claim_file"]

log = structlog.get_logger("cleveragents.sidecar.store")


_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    run_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    frame BLOB NOT NULL,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID
"""
#: Who owns each run (its identity's name), written with the run's first frame. A store
#: from before owners were recorded has none: its runs belong to ``default``.
_OWNERS = """
CREATE TABLE IF NOT EXISTS owners (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL)
"""
#: What a restarted sidecar needs to resume each run beyond its log (``LogOwner.resume_info``),
#: written with the run's first frame; a run stored without one is not resumed.
_RESUMES = """
CREATE TABLE IF NOT EXISTS resumes (run_id TEXT PRIMARY KEY, info TEXT NOT NULL)
"""
#: Runs whose logs could not be read back go to ``quarantine``, out of the way, kept.
_QUARANTINE = (
    "INSERT OR REPLACE INTO quarantine SELECT * FROM events WHERE run_id = ?",
    "DELETE FROM events WHERE run_id = ?",
)
#: A forgotten run: its rows go.
_FORGET = (
    "DELETE FROM events WHERE run_id = ?",
    "DELETE FROM owners WHERE run_id = ?",
    "DELETE FROM resumes WHERE run_id = ?",
)
#: How often a failing store tries its unwritten batch again.
RETRY_INTERVAL_S = 1.0

#: What the writer stores: a frame (owner, sequence, frame), or statements on a run's rows.
_Item = tuple[LogOwner, int, bytes] | tuple[str, tuple[str, ...]]


class SqliteEventStore:
    """Run logs in a SQLite file (WAL mode), written by one background thread.

    Each row holds a whole ``WatchRunResponse`` (the frame behind its ``event`` tag).

    ``synchronous=NORMAL`` in WAL mode makes each commit survive the process dying (the data
    is in the OS before the commit returns); an operating-system crash or power loss may
    still lose the last commits.
    """

    def __init__(self, path: str, *, retry_interval_s: float = RETRY_INTERVAL_S) -> None:
        self.path = path
        self.retry_interval_s = retry_interval_s
        #: The error of the commit that failed, while the store cannot write (loop's view).
        self.failure: str | None = None
        self._listeners: list[StoreListener] = []
        #: Frames to store (owner, sequence, frame), and statements to run on a run's rows.
        self._pending: list[_Item] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The open lock file that holds the store for this sidecar (``claim_file``).
        self._claim: int | None = None

    def open(self) -> list[StoredRun]:
        """The stored runs; ``ConfigError`` (one line) for a file that is not a usable store,
        or one another sidecar holds (it names that sidecar's process)."""
        self._loop = asyncio.get_running_loop()
        self._claim = claim_file(self.path)
        try:
            connection = self._connect()
            try:
                runs = _load(connection)
            finally:
                connection.close()
        except sqlite3.Error as exc:
            self._let_go()
            raise ConfigError(
                f"event_store {self.path} is not a usable run store ({exc}): move it away, "
                "or point event_store at another file"
            ) from None
        self._thread = threading.Thread(target=self._write_loop, name="event-store", daemon=True)
        self._thread.start()
        log.info("event store opened", path=self.path, runs=len(runs))
        return runs

    #: The file is this sidecar's alone while it is open (``claim_file``).
    shared = False

    def holds(self, run_id: str) -> bool:
        return True

    def append(self, owner: LogOwner, sequence: int, frame: bytes) -> None:
        with self._lock:
            self._pending.append((owner, sequence, frame))
        if not self._wake.is_set():
            self._wake.set()
        if self.failure is not None:  # kept to write once the store works; released now
            owner.release(sequence)

    def listen(self, listener: StoreListener) -> None:
        self._listeners.append(listener)

    def forget(self, run_id: str) -> None:
        self._on_rows(run_id, _FORGET)

    def quarantine(self, run_id: str) -> None:
        self._on_rows(run_id, _QUARANTINE)

    def _on_rows(self, run_id: str, statements: tuple[str, ...]) -> None:
        with self._lock:
            self._pending.append((run_id, statements))
        if not self._wake.is_set():
            self._wake.set()

    async def close(self, *, clean: bool = True) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        self._let_go()

    def _let_go(self) -> None:
        """Let the file go: another sidecar may open it now."""
        if self._claim is not None:
            os.close(self._claim)
            self._claim = None

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute(_TABLE.format(name="events"))
        connection.execute(_TABLE.format(name="quarantine"))
        connection.execute(_OWNERS)
        connection.execute(_RESUMES)
        return connection

    def _write_loop(self) -> None:
        connection: sqlite3.Connection | None = None
        unwritten: list[_Item] = []  # the batch a failed commit left: it goes first, again
        retry_at = 0.0
        try:
            while True:
                # A failing store is tried again once a retry interval, however often frames
                # come meanwhile; a working one writes as soon as they do.
                while unwritten and not self._stopping:
                    if (delay := retry_at - time.monotonic()) <= 0:
                        break
                    self._wake.wait(delay)
                    self._wake.clear()
                if not unwritten:
                    self._wake.wait()
                self._wake.clear()
                with self._lock:
                    batch, self._pending = unwritten + self._pending, []
                if batch:
                    try:
                        if connection is None:
                            connection = self._connect()
                        self._commit(connection, batch)
                    except Exception as exc:  # any failed commit is a store failure, told
                        _discard(connection)  # a fresh connection for the next try
                        connection = None
                        retry_at = time.monotonic() + self.retry_interval_s
                        if not unwritten:
                            self._tell(self._failed, f"{type(exc).__name__}: {exc}")
                        self._tell(_release_all, _marks(batch))  # readers must not wait
                        unwritten = batch
                        if self._stopping:
                            log.error("event store closed unwritten", frames=len(batch))
                            return
                        continue
                    if unwritten:
                        unwritten = []
                        self._tell(self._recovered)
                if self._stopping and not self._pending:
                    return
        finally:
            _discard(connection)

    def _tell(self, callback: Callable[..., None], *args: object) -> None:
        """Run ``callback`` on the event loop (the writer thread's news for the loop)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)

    def _failed(self, error: str) -> None:
        """On the loop: a commit failed. Release what waits, then tell the listeners."""
        self.failure = error
        log.error(
            "event store failed: runs end, new runs are refused until it writes again",
            path=self.path,
            error=error,
            retry_interval_s=self.retry_interval_s,
        )
        with self._lock:
            waiting = _marks(self._pending)
        _release_all(waiting)
        for listener in self._listeners:
            listener.health_changed(error)

    def _recovered(self) -> None:
        """On the loop: a commit succeeded after failures."""
        self.failure = None
        log.warning("event store writes again: runs are accepted", path=self.path)
        for listener in self._listeners:
            listener.health_changed(None)

    def _commit(self, connection: sqlite3.Connection, batch: list[_Item]) -> None:
        connection.execute("BEGIN")
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
                if sequence == 1:
                    connection.execute(
                        "INSERT OR REPLACE INTO owners VALUES (?, ?)", (owner.run_id, owner.owner)
                    )
                    connection.execute(
                        "INSERT OR REPLACE INTO resumes VALUES (?, ?)",
                        (owner.run_id, owner.resume_info),
                    )
        connection.execute("COMMIT")
        marks = _marks(batch)
        if marks:
            self._tell(_release_all, marks)


def claim_file(path: str) -> int:
    """Hold ``path`` for this process: an exclusive ``flock`` on ``<path>.lock``, kept while the
    returned descriptor is open, with this process's pid, host and start written in it;
    ``ConfigError`` naming the holder when another sidecar (or this one) holds it already."""
    lock = f"{path}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"event_store {path}: its lock file {lock} cannot be opened ({exc.strerror}): "
            "the sidecar needs to create and write files beside its store"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError(
            f"event_store {path} is in use by another sidecar ({holder}; its lock: {lock}): "
            "a SQLite store belongs to one sidecar at a time, or each would run the other's "
            "runs again. Stop that sidecar first, give this one its own event_store file, or "
            "share runs between sidecars through Redis (event_store = redis://...)"
        ) from None
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    held = {"pid": os.getpid(), "host": socket.gethostname(), "since": since}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(held).encode(), 0)
    return fd


def _holder(fd: int) -> str:
    """Who holds the lock file ``fd``, as it says (written by ``claim_file``)."""
    try:
        held = json.loads(os.pread(fd, 4096, 0))
        return f"pid {int(held['pid'])} on host {held['host']}, since {held['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its process did not say which it is"


def _marks(batch: Iterable[_Item]) -> list[tuple[LogOwner, int]]:
    """Each owner in ``batch`` with the last sequence of its that ``batch`` holds."""
    released: dict[int, tuple[LogOwner, int]] = {}
    for item in batch:
        if len(item) == 3:
            owner, sequence, _ = item
            released[id(owner)] = (owner, sequence)
    return list(released.values())


def _discard(connection: sqlite3.Connection | None) -> None:
    """Close ``connection`` (a transaction left open rolls back)."""
    if connection is not None:
        with contextlib.suppress(sqlite3.Error):
            connection.close()


def _release_all(marks: Iterable[tuple[LogOwner, int]]) -> None:
    for owner, sequence in marks:
        owner.release(sequence)


def _load(connection: sqlite3.Connection) -> list[StoredRun]:
    """Every stored run, oldest first, with its gap-free frames."""
    runs: dict[str, list[bytes]] = {}
    owners = dict(connection.execute("SELECT run_id, owner FROM owners").fetchall())
    resumes = dict(connection.execute("SELECT run_id, info FROM resumes").fetchall())
    for run_id, sequence, frame in connection.execute(
        "SELECT run_id, sequence, frame FROM events ORDER BY run_id, sequence"
    ):
        frames = runs.setdefault(run_id, [])
        if sequence == len(frames) + 1:  # a gap can only follow a torn batch: stop there
            frames.append(frame[1:])  # rows hold whole responses: drop the tag byte
    return [
        StoredRun(
            run_id, frames, owners.get(run_id, DEFAULT_IDENTITY.name), resumes.get(run_id, "")
        )
        for run_id, frames in runs.items()
        if frames
    ]
