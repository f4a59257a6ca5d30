"""Mirrors: the runs other sidecars of the fleet run, read back from the store and kept up live.

With a fleet, ``GetRun``, ``ListRuns``, ``WatchRun`` and ``FollowRun`` serve a run this sidecar
does not have. Such a run is a *mirror*: a ``Run`` rebuilt from the stored log (its owner
identity with it), which a task keeps up to date with blocking stream reads while
someone watches it, so that its watchers' cursors work as on a local run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc
import structlog

from cleveragents.sidecar.errors import DamagedLog, SidecarError
from cleveragents.sidecar.fleet.fencing import gone_message
from cleveragents.sidecar.runs.log import LogStats
from cleveragents.sidecar.runs.run import Run
from cleveragents.sidecar.runs.store import EventStore, MemoryEventStore, StoredRun

__all__ = ["FleetLog", "HeldRun", "Mirrors", "RunHead", "mirror"]

log = structlog.get_logger("cleveragents.sidecar.fleet")

T = TypeVar("T")
#: How long one blocking read of a mirror's run waits before it looks whether anyone still
#: watches (milliseconds).
BLOCK_MS = 1000
#: A mirror nobody watches is still kept up this long after it was asked for (a CancelRun
#: waits on it).
KEEP_S = 10.0


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A run as the fleet's store holds it, and the sidecar that runs (or ran) it."""

    stored: StoredRun
    sidecar: str


@dataclass(frozen=True, slots=True)
class RunHead:
    """What the store's hash of a run says without its log: the identity that owns it, the
    sidecar that runs (or ran) it and its ``resume_info``."""

    owner: str
    sidecar: str
    resume_info: str


class FleetLog(Protocol):
    """What the fleet's store lets this sidecar read of the runs of others."""

    async def read_runs(self, run_ids: list[str]) -> list[HeldRun]:
        """The stored runs of ``run_ids`` there are (unknown ones left out)."""
        ...

    async def read_head(self, run_id: str) -> RunHead | None:
        """The hash of ``run_id`` (``None``: no such run), read without its log: an owner
        check costs one small read, however long the log."""
        ...

    async def recent_run_ids(self, limit: int) -> list[str]:
        """The ``limit`` runs started last, newest first."""
        ...

    async def read_after(self, run_id: str, after: int, block_ms: int) -> list[bytes]:
        """The frames after sequence ``after``, waiting up to ``block_ms`` for one."""
        ...


def mirror(stored: StoredRun, stats: LogStats, frame_limit: int = 0) -> Run:
    """The run ``stored`` holds, finished if its log ends, else live: to be fed (``take``)."""
    return Run.from_log(stored, MemoryEventStore(), stats, frame_limit)


class Mirrors:
    """The mirrors of other sidecars' runs, each kept up by one task while it is wanted. A
    followed run whose log vanishes from the store (``shown``) ends its watchers with
    ``DATA_LOSS``: its sidecar can write none of it there any more."""

    def __init__(
        self, store: FleetLog, stats: LogStats, frame_limit: int = 0, shown: str = ""
    ) -> None:
        self.store = store
        #: The store's URL as messages show it.
        self.shown = shown
        self.stats = stats
        self.frame_limit = frame_limit
        #: The mirrors kept up to date, by run id, with the sidecar running each, and until when
        #: to keep one up that nobody watches.
        self._kept: dict[str, tuple[Run, str]] = {}
        self._keep_until: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Set by ``close``: a mirror's task ends at its next read even if its cancel is lost.
        self._closing = False

    async def head(self, run_id: str) -> RunHead | None:
        """The hash of ``run_id`` (owner, sidecar, resume info), or ``None`` if not stored."""
        return await _read(self.store.read_head(run_id))

    async def get(
        self, run_id: str, may: Callable[[str], bool] = lambda owner: True
    ) -> tuple[Run, str] | None:
        """The mirror of ``run_id`` and the sidecar running it, or ``None`` if not stored or
        its owner is not one the caller ``may`` see: that is checked on the run's hash first,
        so a refused caller makes the sidecar read no log and keep up nothing."""
        if (kept := self._kept.get(run_id)) is not None:
            if not may(kept[0].owner):
                return None
            self._keep_until[run_id] = time.monotonic() + KEEP_S
            return kept
        head = await self.head(run_id)
        if head is None or not may(head.owner):
            return None
        self._keep_until[run_id] = time.monotonic() + KEEP_S
        found = await _read(self.store.read_runs([run_id]))
        if not found:
            self._keep_until.pop(run_id, None)
            return None
        run = mirror(found[0].stored, self.stats, self.frame_limit)
        if run.finished:
            self._keep_until.pop(run_id, None)
            return run, found[0].sidecar
        if (kept := self._kept.get(run_id)) is not None:  # another call got there
            return kept
        self._kept[run_id] = (run, found[0].sidecar)
        task = asyncio.create_task(self._keep_up(run), name=f"mirror-{run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run, found[0].sidecar

    async def reserve(self, run_id: str, owner: str, store: EventStore) -> None:
        """Let a new run of ``owner`` take ``run_id``, unknown here: a finished run of its own
        on the store is forgotten (replaced); ``ALREADY_EXISTS`` if another identity owns it,
        or it still runs. While the store cannot be read, the run starts, and the store's
        failure rules apply to it."""
        try:
            head = await self.head(run_id)  # another's run: its log is not read
        except SidecarError:
            return
        if head is not None and head.owner != owner:
            raise SidecarError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"run_id {run_id!r} is taken by another client's run; choose another run_id",
            )
        try:
            found = None if head is None else await self.get(run_id)
        except SidecarError:
            return
        if found is None:
            return
        if not found[0].finished:
            raise SidecarError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"run {run_id!r} is still running (on another sidecar sharing the store)",
            )
        store.forget(run_id)

    async def recent(self, limit: int, skip: set[str]) -> list[tuple[Run, str]]:
        """Snapshots of the ``limit`` runs started last that are not in ``skip``, each with
        the sidecar that runs (or ran) it."""
        recent = await _read(self.store.recent_run_ids(limit + len(skip)))
        run_ids = [run_id for run_id in recent if run_id not in skip]
        runs = []
        for found in await _read(self.store.read_runs(run_ids[:limit])):
            kept = self._kept.get(found.stored.run_id)
            try:
                runs.append(kept or (mirror(found.stored, self.stats), found.sidecar))
            except DamagedLog as exc:  # left out of the list, not fatal to it
                log.warning(
                    "another sidecar's run unreadable", run_id=exc.run_id, error=exc.message
                )
        return runs

    async def close(self) -> None:
        """Stop keeping mirrors up (every task is awaited). Each is told as well as
        cancelled: redis-py can lose the cancel of a blocking read (see ``lease``)."""
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _keep_up(self, run: Run) -> None:
        run_id = run.run_id
        try:
            while not run.finished and not self._closing:
                wanted = run.log.cursors or time.monotonic() < self._keep_until.get(run_id, 0)
                if not wanted:
                    break
                frames = await self.store.read_after(run_id, len(run.log.frames), BLOCK_MS)
                if not frames and await self.store.read_head(run_id) is None:
                    message = gone_message(run_id, self.shown)
                    log.warning("another sidecar's run is gone from the store", run_id=run_id)
                    run.lose(message, grpc.StatusCode.DATA_LOSS)
                    break
                run.take(frames)
        except DamagedLog as exc:  # its watchers are told, as a reader of the log would be
            log.warning("another sidecar's run unreadable", run_id=run_id, error=exc.message)
            run.lose(exc.message, exc.code)
        except Exception as exc:  # the store went away: the watchers end where they are
            log.warning("another sidecar's run no longer kept up", run_id=run_id, error=repr(exc))
            run.log.close()
        finally:
            with contextlib.suppress(KeyError):
                del self._kept[run_id]
            self._keep_until.pop(run_id, None)


async def _read(call: Awaitable[T]) -> T:
    """``call``'s answer; ``UNAVAILABLE`` naming the store's error if it fails."""
    try:
        return await call
    except Exception as exc:
        raise SidecarError(
            grpc.StatusCode.UNAVAILABLE,
            f"the shared run store cannot be reached ({type(exc).__name__}: {exc}); retry later",
        ) from None
