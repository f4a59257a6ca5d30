"""``RunDirectory``: where a run lives, and a handle that acts on it there.

``locate`` looks a run up (a run of this sidecar first, else, with a fleet, a mirror of
another sidecar's) and returns a handle that cancels it, decides its calls, follows its log and
re-attaches a Session client to it, here or on the sidecar that runs it: callers never branch on
where it lives, as callers of Dapr's actor router never do. A handle on a local run checks
first that the run is still this sidecar's (a lost ownership names the sidecar that has it
now, as Temporal's ownership checks do) and acts on the other sidecar's run when it is not.

Without a fleet (``NoFleet``) every run is local. With one (``RedisFleet``), the directory is
also what the fleet reports to (``FleetRuns``): runs adopted from dead sidecars, runs
lost to others, and the cancels and decisions other sidecars send.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import grpc
import structlog

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.fleet.control import CANCEL, DECIDE, TAKEN, Control
from cleveragents.sidecar.runs import Run, RunManager, RunPhase, WatchCursor
from cleveragents.sidecar.runs.parked import ParkedRun
from cleveragents.sidecar.runs.recovery import ADOPTION_REASON, handover_reason
from cleveragents.sidecar.runs.store import EventStore, StoredRun
from cleveragents.wire import RunState

__all__ = [
    "NO_FLEET", "Attachment", "Decision", "Fleet", "FleetRuns", "Handover", "LocalRun",
    "NoFleet", "RemoteRun", "RunDirectory", "RunHandle",
]  # fmt: skip

log = structlog.get_logger("cleveragents.sidecar.fleet")

T = TypeVar("T")
#: How long a cancel waits for the run to end (a tool that ignores cancellation).
CANCEL_WAIT_S = 5.0
#: What a re-attach checks of its client's start before the run is taken for it: given the
#: run's wait here (``None``: the run is another sidecar's), the start's opening, or ``None``.
Prepare = Callable[[ParkedRun | None], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class Decision:
    """An approval decision for one call of a run, made by ``identity``."""

    call_id: str
    approved: bool
    reason: str
    identity: str


class FleetRuns(Protocol):
    """Where a lease reports what the fleet did to this sidecar's runs (the directory)."""

    async def adopt(self, stored: list[StoredRun]) -> None:
        """Take back the live runs of a dead sidecar, claimed for this one (``stored``)."""
        ...

    def lose(self, run_id: str, message: str) -> None:
        """Another sidecar took the run over: stop this sidecar's copy (its streams get
        ``message``)."""
        ...

    async def obey(self, control: Control) -> None:
        """Another sidecar asks this one to cancel a run, or to decide one of its calls, or
        tells it that it took one over."""
        ...


class Fleet(Protocol):
    """What the directory asks of the other sidecars sharing this one's store."""

    @property
    def sidecar_id(self) -> str: ...

    def running(self, runs: FleetRuns) -> AbstractAsyncContextManager[None]:
        """Take part in the fleet while the block runs, reporting to ``runs``."""
        ...

    async def mirror(self, run_id: str, may: Callable[[str], bool]) -> tuple[Run, str] | None:
        """Another sidecar's run (a mirror) and that sidecar, if its owner is one the caller
        ``may`` see; ``UNAVAILABLE`` if the store cannot be read."""
        ...

    async def recent(self, limit: int, skip: set[str]) -> list[tuple[Run, str]]:
        """Snapshots of the ``limit`` runs started last on any sidecar, but ``skip``, each
        with the sidecar that runs (or ran) it."""
        ...

    async def reserve(self, run_id: str, owner: str, store: EventStore) -> None:
        """Let a new run of ``owner`` take ``run_id`` (``ALREADY_EXISTS`` if another's)."""
        ...

    async def verify(self, run_id: str) -> str | None:
        """``None`` while this sidecar still owns ``run_id``; else why its copy stops."""
        ...

    async def send(self, sidecar: str, control: Control) -> None:
        """Ask ``sidecar``, which runs the run, to cancel it or decide one of its calls."""
        ...

    async def take(self, run_id: str, identity: str) -> Handover:
        """Take a parked run of ``identity`` from the sidecar holding it (a hand-over)."""
        ...

    async def hold(self, run_id: str) -> str | None:
        """Hold a parked run of this sidecar's for a client re-attaching here: ``None``, or
        why it cannot (another sidecar took it: the message of its loss)."""
        ...

    async def park(self, run_id: str) -> None:
        """Let other sidecars take this sidecar's run ``run_id``, which parked here."""
        ...


@dataclass(frozen=True, slots=True)
class Handover:
    """What a take found. ``taken``: the run is this sidecar's now, taken from ``holder``;
    ``stored`` is its live log (``None``: it had ended). Else ``holder`` keeps it (``alive``:
    that sidecar's lease lives)."""

    taken: bool
    holder: str
    stored: StoredRun | None = None
    alive: bool = False


class NoFleet:
    """A sidecar alone: every run is its own, and no other sidecar asks for any."""

    sidecar_id = ""

    def running(self, runs: FleetRuns) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def mirror(self, run_id: str, may: Callable[[str], bool]) -> tuple[Run, str] | None:
        return None

    async def recent(self, limit: int, skip: set[str]) -> list[tuple[Run, str]]:
        return []

    async def reserve(self, run_id: str, owner: str, store: EventStore) -> None:
        return None

    async def verify(self, run_id: str) -> str | None:
        return None

    async def send(self, sidecar: str, control: Control) -> None:
        raise AssertionError("a sidecar alone has no other sidecar to ask")

    async def take(self, run_id: str, identity: str) -> Handover:
        raise AssertionError("a sidecar alone has no other sidecar to take a run from")

    async def hold(self, run_id: str) -> str | None:
        return None

    async def park(self, run_id: str) -> None:
        return None


NO_FLEET = NoFleet()


@dataclass(slots=True)
class Attachment(Generic[T]):
    """A run a re-attach got: ``waiting`` is its wait here (its client host, or none: it is
    rebuilt from its log), kept for this re-attach alone; ``None`` when the run has ended
    (its log is all there is). ``prepared`` is what ``Prepare`` gave. ``give_back`` lets the
    run wait for a client again when the re-attach fails."""

    run: Run
    waiting: ParkedRun | None
    prepared: T | None = None
    _directory: RunDirectory | None = field(default=None, repr=False)

    def give_back(self) -> None:
        """The re-attach failed: the run waits for any client again (here, or another
        sidecar's, which may take it)."""
        if self.waiting is not None and self._directory is not None:
            self.run.give_back()
            self._directory.mark(self.run.run_id)


class RunHandle(Protocol):
    """A run wherever it lives: this sidecar's, or another's (read through its mirror)."""

    @property
    def run(self) -> Run:
        """The run (a mirror, for another sidecar's): its state, its log."""
        ...

    @property
    def sidecar(self) -> str:
        """The id of the sidecar that runs (or ran) it: this one's own for a local run
        (``""`` for a sidecar alone)."""
        ...

    async def cancel(self, reason: str) -> RunState:
        """Cancel the run (waiting a moment for its end); its state then."""
        ...

    async def decide(self, decision: Decision) -> None:
        """Decide one of its calls waiting for approval."""
        ...

    def watch(self, after: int, *, decides: bool) -> WatchCursor:
        """A watcher's cursor on its log after sequence ``after`` (``decides``: whether the
        watcher may decide its approvals, and so counts as someone who can answer them)."""
        ...

    async def reattach(self, owner: str, prepare: Prepare[T]) -> Attachment[T]:
        """Take the live Session run of ``owner`` for a client re-attaching here."""
        ...


class LocalRun:
    """A run of this sidecar's."""

    def __init__(self, run: Run, directory: RunDirectory) -> None:
        self._run = run
        self._directory = directory

    @property
    def run(self) -> Run:
        return self._run

    @property
    def sidecar(self) -> str:
        return self._directory.fleet.sidecar_id

    async def cancel(self, reason: str) -> RunState:
        run, directory = self._run, self._directory
        if run.finished:
            return run.state
        if (lost := await directory.fleet.verify(run.run_id)) is not None:
            # A copy stale here (taken over while this sidecar stalled) is stopped, and the
            # cancel goes to the run that goes on.
            directory.lose(run.run_id, lost)
            there = await directory.fleet.mirror(run.run_id, lambda owner: True)
            if there is not None:
                return await RemoteRun(*there, directory).cancel(reason)
            return run.state
        directory.manager.cancel(run, reason)
        with contextlib.suppress(TimeoutError):  # a tool that ignores cancellation
            await asyncio.wait_for(run.wait(), CANCEL_WAIT_S)
        return run.state

    async def decide(self, decision: Decision) -> None:
        run = self._run
        if run.approvals is None:
            raise SidecarError.out_of_order(f"run {run.run_id!r} has no approvals")
        run.approvals.decide(
            decision.call_id, decision.approved, decision.reason, "rpc", decision.identity
        )

    def watch(self, after: int, *, decides: bool) -> WatchCursor:
        return self._directory.manager.watchers.watch(self._run, after, decides=decides)

    async def reattach(self, owner: str, prepare: Prepare[T]) -> Attachment[T]:
        run, directory = self._run, self._directory
        if run.lost is not None:  # handed over (or taken over): another sidecar has it now
            raise SidecarError.out_of_order(run.lost.message)
        if run.ended:
            return Attachment(run, None)
        waiting = directory.manager.parked.get(run.run_id)
        if waiting is None or run.phase is not RunPhase.PARKED:
            raise SidecarError.out_of_order(
                f"run {run.run_id!r} is not waiting for a client: a Session run is attached "
                "to another stream (a run has one client at a time; watch it with FollowRun "
                "meanwhile)"
            )
        run.reserve()  # no other client (here, or at another sidecar) takes it now
        try:
            prepared = await prepare(waiting)
            await directory.marked(run.run_id)
            lost = await directory.fleet.hold(run.run_id)
        except BaseException:
            run.give_back()
            raise
        if lost is not None:
            directory.lose(run.run_id, lost)
            raise SidecarError.out_of_order(lost)
        if directory.manager.parked.get(run.run_id) is not waiting or run.ended:
            raise SidecarError.not_found(f"run {run.run_id!r} stopped waiting for its client")
        return Attachment(run, waiting, prepared, directory)


class RemoteRun:
    """A run another sidecar of the fleet runs (``sidecar``), read through its mirror."""

    def __init__(self, run: Run, sidecar: str, directory: RunDirectory) -> None:
        self._run = run
        self.sidecar = sidecar
        self._directory = directory

    @property
    def run(self) -> Run:
        return self._run

    async def cancel(self, reason: str) -> RunState:
        run = self._run
        if run.finished:
            return run.state
        await self._directory.fleet.send(self.sidecar, Control(CANCEL, run.run_id, reason))
        with contextlib.suppress(TimeoutError):  # its mirror follows the run to its end
            await asyncio.wait_for(run.wait(), CANCEL_WAIT_S)
        return run.state

    async def decide(self, decision: Decision) -> None:
        control = Control(
            DECIDE, self._run.run_id, decision.reason, decision.call_id, decision.approved,
            decision.identity,
        )  # fmt: skip
        await self._directory.fleet.send(self.sidecar, control)  # its sidecar checks the call

    def watch(self, after: int, *, decides: bool) -> WatchCursor:
        return self._directory.manager.watchers.watch(self._run, after, decides=decides)

    async def reattach(self, owner: str, prepare: Prepare[T]) -> Attachment[T]:
        run, directory, run_id = self._run, self._directory, self._run.run_id
        if run.ended:
            return Attachment(run, None)
        if not directory.takes_over:
            raise _elsewhere(run_id, self.sidecar, "")
        prepared = await prepare(None)  # a bad start is refused before the run moves
        if (here := directory.manager.get(run_id)) is not None:  # it came here meanwhile
            return await LocalRun(here, directory).reattach(owner, _ready(prepared))
        handover = await directory.fleet.take(run_id, owner)
        if not handover.taken:
            if handover.holder == directory.fleet.sidecar_id:  # an adoption here, under way
                raise SidecarError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"run {run_id!r} is being taken back by this sidecar ({handover.holder!r}) "
                    "from the sidecar that ran it: retry in a moment",
                )
            if not handover.alive:  # its sidecar died: the fleet adopts the run, then retry
                raise _elsewhere(run_id, handover.holder or self.sidecar, "")
            raise SidecarError.out_of_order(
                f"run {run_id!r} is not waiting for a client: it is attached to another "
                f"stream on sidecar {handover.holder!r} (a run has one client at a time; watch "
                "it with FollowRun meanwhile)"
            )
        if handover.stored is None:  # it ended there just now: its mirror follows the end
            raise _elsewhere(run_id, handover.holder, " and ended as it was taken over")
        directory.manager.take_back([handover.stored], handover_reason(handover.holder))
        waiting = directory.manager.parked.get(run_id)
        if waiting is None:  # it could not wait here: it ended, saying why
            taken = directory.manager.get(run_id)
            return Attachment(taken if taken is not None else run, None)
        waiting.run.reserve()
        return Attachment(waiting.run, waiting, prepared, directory)


class RunDirectory:
    """The runs of this sidecar (``manager``) and, with a ``fleet``, of the sidecars sharing
    its store. ``takes_over``: whether a run parked on another sidecar may come here for its
    client (``resume_runs``, and Session runs wait: ``session_reattach_s`` > 0)."""

    def __init__(
        self, manager: RunManager, fleet: Fleet = NO_FLEET, *, takes_over: bool = False
    ) -> None:
        self.manager = manager
        self.fleet = fleet
        self.takes_over = takes_over
        self._marking: dict[str, asyncio.Task[None]] = {}

    async def locate(self, run_id: str, may: Callable[[str], bool]) -> RunHandle | None:
        """The run ``run_id``, if its owner is one the caller ``may`` see, wherever it lives;
        ``None`` if not (unknown, expired, or another's: callers say ``NOT_FOUND`` alike).
        ``UNAVAILABLE`` if the fleet's store cannot be read. Another sidecar's log is never
        read for a caller who may not see the run: its owner is checked first."""
        run = self.manager.get(run_id)
        if run is not None:
            return LocalRun(run, self) if may(run.owner) else None
        found = await self.fleet.mirror(run_id, may)
        return None if found is None else RemoteRun(*found, self)

    async def reserve(self, run_id: str, owner: str) -> None:
        """Refuse ``run_id`` for a new run of ``owner`` if another sidecar's run has it
        (``ALREADY_EXISTS``); a finished run of the owner's own there is replaced."""
        if run_id and self.manager.get(run_id) is None:
            await self.fleet.reserve(run_id, owner, self.manager.store)

    async def runs(self, limit: int) -> list[RunHandle]:
        """This sidecar's live and kept runs, and the ``limit`` other runs started last (as
        handles: each says where it lives)."""
        here = self.manager.live_runs() + self.manager.retained_runs()
        there = await self.fleet.recent(limit, {run.run_id for run in here})
        handles: list[RunHandle] = [LocalRun(run, self) for run in here]
        return handles + [RemoteRun(run, sidecar, self) for run, sidecar in there]

    def park(self, run: Run, host: object, expire: Callable[[], None]) -> None:
        """Let ``run``, whose client ``host`` went away, wait for it (``expire`` runs if
        nobody re-attaches in time); another sidecar may take it for its client."""
        self.manager.parked.park(run, host, expire)
        self.mark(run.run_id)

    def mark(self, run_id: str) -> None:
        """Tell the fleet that ``run_id`` waits here for its client (in the background: a
        re-attach here waits for it, ``marked``)."""
        task = asyncio.create_task(self.fleet.park(run_id), name=f"park-{run_id}")
        self._marking[run_id] = task
        task.add_done_callback(lambda done: self._unmarking(run_id, done))

    def _unmarking(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self._marking.get(run_id) is task:
            del self._marking[run_id]

    async def marked(self, run_id: str) -> None:
        """Until the fleet knows ``run_id`` waits here (if it was being told)."""
        if (task := self._marking.get(run_id)) is not None:
            await asyncio.shield(task)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Take part in the fleet (there is one) while the block runs: the runs parked at
        start-up may be taken by other sidecars, and the fleet reports here."""
        for entry in self.manager.parked.entries():
            self.mark(entry.run.run_id)
        try:
            async with self.fleet.running(self):
                yield
        finally:
            await asyncio.gather(*self._marking.values(), return_exceptions=True)

    # -- what the fleet reports (``FleetRuns``) ---------------------------------------

    async def adopt(self, stored: list[StoredRun]) -> None:
        self.manager.take_back(stored, ADOPTION_REASON)
        for run in stored:
            if self.manager.parked.get(run.run_id) is not None:
                self.mark(run.run_id)

    def lose(self, run_id: str, message: str) -> None:
        self.manager.lose(run_id, message)

    async def obey(self, control: Control) -> None:
        run = self.manager.get(control.run_id)
        if control.op == TAKEN:
            if run is not None and (lost := await self.fleet.verify(control.run_id)) is not None:
                self.lose(control.run_id, lost)
        elif run is None or run.finished:
            log.info("control for a run not live here", op=control.op, run_id=control.run_id)
        elif control.op == CANCEL:
            self.manager.cancel(run, control.reason or "cancelled by CancelRun")
        elif control.op == DECIDE and run.approvals is not None:
            try:
                run.approvals.decide(
                    control.call_id, control.approved, control.reason, "rpc", control.identity
                )
            except SidecarError as exc:
                log.warning("approval decision refused", run_id=run.run_id, error=exc.message)


def _ready(prepared: T) -> Prepare[T]:
    """A ``Prepare`` whose work is done: it gives ``prepared``."""

    async def ready(waiting: ParkedRun | None) -> T:
        return prepared

    return ready


def _elsewhere(run_id: str, sidecar: str, why: str) -> SidecarError:
    """``UNAVAILABLE`` for a re-attach here to a run ``sidecar`` runs: the client retries."""
    return SidecarError(
        grpc.StatusCode.UNAVAILABLE,
        f"run {run_id!r} runs on sidecar {sidecar!r}, not this one{why}: retry (here or "
        "there; once that sidecar's store lease, event_store_lease_s, expires, a sidecar of "
        "the fleet adopts the run, and it waits session_reattach_s for its client)",
    )
