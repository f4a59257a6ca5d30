"""Where run logs live: the ``EventStore`` protocol, and the in-memory store (the default).

The store decides when an event counts as *acknowledged*: the run's log hands it each frame
and only streams it to clients (or reports it through ``GetRun``) once the store calls back.
The in-memory store calls back at once; ``SqliteEventStore`` (``sqlite_store.py``) after each
commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cleveragents.sidecar.identity import DEFAULT_IDENTITY

__all__ = ["EventStore", "LogOwner", "MemoryEventStore", "StoreListener", "StoredRun"]


class StoreListener(Protocol):
    """Told, on the event loop, what a store finds about the runs it keeps (the manager)."""

    def health_changed(self, failure: str | None) -> None:
        """The store stopped writing (``failure`` says why), or writes again (``None``)."""
        ...

    def run_taken(self, run_id: str, message: str) -> None:
        """A store several sidecars share refused a frame of ``run_id``: another sidecar owns
        the run now (``message`` says which, for the run's streams)."""
        ...

    def log_lost(self, run_id: str, message: str) -> None:
        """The store no longer holds the log of ``run_id`` (its keys vanished: ``message``
        says so, for the run's streams); it takes the run's frames from now on without
        keeping them."""
        ...


class LogOwner(Protocol):
    """The run log a frame belongs to; told on the event loop once its frames are stored."""

    @property
    def run_id(self) -> str: ...

    @property
    def owner(self) -> str:
        """The name of the identity that owns the run (stored with its first frame)."""
        ...

    @property
    def resume_info(self) -> str:
        """What a restarted sidecar needs to resume the run beyond its log (JSON text, or
        empty: not resumable); a durable store keeps it with the first frame."""
        ...

    def release(self, sequence: int) -> None:
        """Every frame up to ``sequence`` is stored."""
        ...


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run's log as found in the store at start-up, the identity that owns it (runs
    stored before owners were recorded belong to ``default``) and its ``resume_info`` (empty
    for runs stored before resuming existed)."""

    run_id: str
    frames: list[bytes]
    owner: str = DEFAULT_IDENTITY.name
    resume_info: str = ""


class EventStore(Protocol):
    """Keeps each run's frames; tells the run's log when they are safe to hand out."""

    @property
    def shared(self) -> bool:
        """Whether other sidecars write to this store (a shared Redis): a run's tool call
        must then know its sidecar still owns the run before it runs (``holds``)."""
        ...

    def holds(self, run_id: str) -> bool:
        """Whether this sidecar surely owns ``run_id`` now without asking the store; if not,
        a tool call of the run waits until the store holds its start (a fenced write, which
        a sidecar that lost the run cannot make)."""
        ...

    def open(self) -> list[StoredRun]:
        """Start storing; return the runs already stored."""
        ...

    def append(self, owner: LogOwner, sequence: int, frame: bytes) -> None:
        """Store one frame; ``owner.release`` follows once it is safe."""
        ...

    def forget(self, run_id: str) -> None:
        """Drop a run the manager no longer keeps."""
        ...

    def quarantine(self, run_id: str) -> None:
        """Set aside a stored run whose log could not be read back (kept, never served)."""
        ...

    def listen(self, listener: StoreListener) -> None:
        """Tell ``listener`` when the store fails to write, when it works again, and (a store
        several sidecars share) when a run turns out to be another sidecar's.

        While it fails, a store still releases each frame (readers must not hang on it) and
        keeps trying to write what it holds.
        """
        ...

    async def close(self, *, clean: bool = True) -> None:
        """Store what is pending and stop. ``clean``: every run this sidecar held has ended
        (or gone to another sidecar); else some were left live, as a crash leaves them."""
        ...


class MemoryEventStore:
    """Keeps nothing beyond the manager's own memory; every frame is released at once."""

    shared = False

    def holds(self, run_id: str) -> bool:
        return True

    def open(self) -> list[StoredRun]:
        return []

    def append(self, owner: LogOwner, sequence: int, frame: bytes) -> None:
        owner.release(sequence)

    def forget(self, run_id: str) -> None:
        return None

    def quarantine(self, run_id: str) -> None:
        return None

    def listen(self, listener: StoreListener) -> None:
        return None  # memory does not fail, and is no sidecar's but this one's

    async def close(self, *, clean: bool = True) -> None:
        return None
