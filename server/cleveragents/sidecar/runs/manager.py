"""``RunManager``: admits runs, drives each one's loop to its terminal event, finds them by
id, cancels them, drains at shutdown and forgets finished ones in time (by count, total size
and age).

A new run is refused while the sidecar stops or its store cannot write, when the sidecar is
full, and for a run id too long or taken. When the store fails to write, every live run ends
with ``run_failed`` (``UNAVAILABLE``, naming the store's error) and new runs are refused,
until the store writes again. Every way out of a run's loop logs a terminal event: the
loop's own, or one written here when the loop never got to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import grpc
import structlog

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.identity import DEFAULT_IDENTITY
from cleveragents.sidecar.runs.log import LogStats, RunLog
from cleveragents.sidecar.runs.parked import ParkedRuns
from cleveragents.sidecar.runs.quotas import RunQuotas
from cleveragents.sidecar.runs.readers import FrameSink
from cleveragents.sidecar.runs.recovery import (
    ADOPTION_REASON,
    RESTART_REASON,
    ResumeInfo,
    Resumer,
    crashed,
    partial_result,
    restore,
    resumption_of,
    settle,
)
from cleveragents.sidecar.runs.retained import RetainedRuns
from cleveragents.sidecar.runs.run import Launchable, Run, RunObserver, RunPhase
from cleveragents.sidecar.runs.store import EventStore, MemoryEventStore, StoredRun
from cleveragents.sidecar.runs.watchers import WatchCursors
from cleveragents.tool import (
    LLMCallError,
    Resumption,
    RunCancelled,
    RunFailed,
    RunStarted,
    StopReason,
    ToolCallingRuntime,
    ToolCallRunResult,
    ToolSpec,
)

if TYPE_CHECKING:
    from cleveragents.sidecar.config import Policy

__all__ = ["MAX_RUN_ID", "RunManager"]

log = structlog.get_logger("cleveragents.sidecar.runs")

#: How long start-up waits for the store to hold the end of each run a crash interrupted.
_SETTLE_TIMEOUT_S = 10.0
#: What brought a parked run back, for the message of its end if nobody re-attaches.
_EVENTS = {RESTART_REASON: "the restart", ADOPTION_REASON: "its adoption"}


class RunManager:
    """The sidecar's runs: live ones by id, and finished ones kept for ``GetRun``/``WatchRun``."""

    def __init__(
        self,
        *,
        max_concurrent_runs: int,
        max_finished_runs: int,
        finished_run_ttl_s: float,
        max_finished_run_bytes: int = 256 * 1024 * 1024,
        watcher_queue_size: int,
        store: EventStore | None = None,
        observers: Sequence[RunObserver] = (),
        frame_limit: int = 0,
        session_reattach_s: float = 0.0,
        policy_of: Callable[[str], Policy | None] = lambda name: None,
    ) -> None:
        self.store: EventStore = store if store is not None else MemoryEventStore()
        self.observers = list(observers)
        self.stats = LogStats()
        self.max_concurrent_runs = max_concurrent_runs
        self.max_finished_runs = max_finished_runs
        self.watcher_queue_size = watcher_queue_size
        #: The largest frame a run may log, so that one message carries it (0: no limit).
        self.frame_limit = frame_limit
        self.accepting = True
        #: The store's error while it cannot write (runs are refused meanwhile).
        self.store_failure: str | None = None
        #: Set whenever ``store_failure`` changes (the server's health follows it).
        self.store_changed = asyncio.Event()
        self._hurry = asyncio.Event()
        self._live: dict[str, Run] = {}
        #: The loops of runs lost to another sidecar, still ending (awaited at the drain).
        self._stopping: set[asyncio.Task[None]] = set()
        #: The watchers' cursors (``follow``, ``unfollow``, ``drop_stalled``).
        self.watchers = WatchCursors(self.stats, watcher_queue_size)
        #: Finished runs kept for GetRun and WatchRun.
        self._finished = RetainedRuns(
            self.store,
            max_runs=max_finished_runs,
            ttl_s=finished_run_ttl_s,
            max_bytes=max_finished_run_bytes,
        )
        self.quotas = RunQuotas()
        #: The governance policy a stored run names (``None``: gone): a run taken back counts
        #: against its owner's quotas under it.
        self._policy_of = policy_of
        self._resumer: Resumer | None = None
        #: Session runs waiting for their client to re-attach (see ``parked``).
        self.parked = ParkedRuns(session_reattach_s)
        self.store.listen(self)

    # -- the store -----------------------------------------------------------------------------

    def open(self, resumer: Resumer | None = None) -> int:
        """Open the store and take back the runs it holds (see ``take_back``); returns how many.

        ``resumer`` is kept for the runs adopted later from a shared store's dead sidecars.
        """
        self._resumer = resumer
        return self.take_back(self.store.open())

    def take_back(self, stored_runs: Sequence[StoredRun], reason: str = RESTART_REASON) -> int:
        """Keep the stored runs (see ``recovery``); returns how many. ``reason`` is why they
        came back (their ``run_resumed`` says it): a restart, or an adoption.

        With a ``resumer``, each run that was live resumes (``resume``); without one, or when
        it cannot, it ends with ``run_failed``. A run whose log cannot be decoded is
        quarantined (set aside in the store, with a warning) and the others start.
        """
        restored, resumer = [], self._resumer
        for stored in stored_runs:
            try:
                run = restore(
                    stored, self.store, self.stats, self.frame_limit, keep_live=resumer is not None
                )
                if resumer is None or run.ended or not self._resume(run, resumer, reason):
                    restored.append(run)
            except Exception as exc:  # one bad row must not keep the others from starting
                log.warning(
                    "run quarantined: its stored log cannot be read back",
                    run_id=stored.run_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                self.store.quarantine(stored.run_id)
        restored.sort(key=lambda run: run.finished_at or 0.0)
        for run in restored:
            self._finished.keep(run)
        self._finished.expire()
        return len(restored)

    def _resume(self, run: Run, resumer: Resumer, reason: str) -> bool:
        """Start ``run`` again from its log; ``False`` (the run then failed, saying why) when
        it cannot: a Session run, a run not detached, or one that no longer assembles."""
        info = ResumeInfo.from_json(run.log.resume_info)
        if info is None:
            crashed(run, "it was stored without what resuming it needs")
            return False
        if info.hosted != "server":
            return self._park_restored(run, self._policy_of(info.policy), reason)
        if not info.detach:
            crashed(run, "it was not detached, so it ended with the call that started it")
            return False
        resumption = resumption_of(run.log.frames, reason)
        try:
            assembled = resumer.reassemble(run, info, resumption)
        except SidecarError as exc:
            crashed(run, f"it could not resume: {exc.message}")
            return False
        self._launch(run, assembled, None, None, {}, resumption)
        self.quotas.count(run, run.owner, self._policy_of(info.policy))
        run.logger.warning("run resumed", after_sequence=resumption.after_sequence)
        return True

    def _park_restored(self, run: Run, policy: Policy | None, reason: str) -> bool:
        """Let a Session run live at a restart wait for its client (``resume_parked``)."""
        window = self.parked.window_s
        if window <= 0:
            crashed(run, "a Session run does not resume here (session_reattach_s is 0)")
            return False
        self._live[run.run_id] = run
        event = _EVENTS.get(reason, "its hand-over")
        why = f"no client re-attached within session_reattach_s ({window:g} s) of {event}"
        self.parked.park(run, None, lambda: self._give_up(run, why), reason)
        self.quotas.count(run, run.owner, policy)
        return True

    def resume_parked(
        self, run: Run, assembled: Launchable, sink: FrameSink, resume: Resumption, answers: bool
    ) -> None:
        """Go on with the Session run ``run`` (parked at a restart) now that its client
        re-attached, sending its frames and invocations to ``sink``."""
        answering = sink if answers and assembled.approvals.self_approval else None
        self._launch(run, assembled, sink, answering, {}, resume)
        run.logger.warning("session run resumed", after_sequence=resume.after_sequence)

    def _give_up(self, run: Run, why: str) -> None:
        """End a run parked at a restart that nobody re-attached to."""
        self.parked.unpark(run.run_id)
        crashed(run, why)
        self._retire(run)

    async def settle(self, timeout_s: float = _SETTLE_TIMEOUT_S) -> None:
        """Wait (at most ``timeout_s``) until the store holds the ``run_failed`` that ``open``
        gave each crashed run (see ``recovery.settle``)."""
        await settle(self._finished.runs(), timeout_s)

    async def close(self, *, clean: bool = True) -> None:
        """Let the store write what it holds, and close it (``clean``: every run ended; see
        ``EventStore.close``)."""
        await self.store.close(clean=clean)

    async def abandon(self, message: str) -> int:
        """Stop every live run here without logging its end (as a crash would: they stay
        live in the store, to be taken back); returns how many there were, once their loops
        have ended."""
        runs = list(self._live.values())
        for run in runs:
            self.lose(run.run_id, message)
        await asyncio.gather(*self._stopping, return_exceptions=True)
        return len(runs)

    @property
    def live_count(self) -> int:
        """How many runs are in flight."""
        return len(self._live)

    def live_runs(self) -> list[Run]:
        """The runs in flight."""
        return list(self._live.values())

    def retained_runs(self) -> list[Run]:
        """Finished runs still kept, oldest first."""
        self._finished.expire()
        return self._finished.runs()

    def get(self, run_id: str) -> Run | None:
        """A live or retained run."""
        self._finished.expire()
        return self._live.get(run_id) or self._finished.get(run_id)

    def require(self, run_id: str, allowed: Callable[[Run], bool] | None = None) -> Run:
        """A live or retained run (that ``allowed`` lets through), or ``NOT_FOUND``: the same
        for a run not allowed as for an unknown id, so that ids do not leak."""
        run = self.get(run_id)
        if run is None or (allowed is not None and not allowed(run)):
            raise SidecarError.not_found(f"no run with id {run_id!r} (unknown, or expired)")
        return run

    # -- a run's life ----------------------------------------------------------------------------

    def start(
        self,
        assembled: Launchable,
        *,
        sink: FrameSink | None = None,
        metadata: Mapping[str, str] | None = None,
        sink_answers_approvals: bool = True,
        owner: str = DEFAULT_IDENTITY.name,
        policy: Policy | None = None,
        resume_info: str = "",
    ) -> Run:
        """Admit an assembled run (its id picked if it has none), owned by the identity named
        ``owner``, and start its loop.

        The id of a run another identity owns, live or kept, is refused (``ALREADY_EXISTS``):
        a finished run's log is replaced only by a new run of its own owner.

        ``policy``'s run quotas (none without one) count the runs of ``owner``.

        ``sink`` is attached before the first event, so the stream that started the run sees
        every event. While it is attached (and ``sink_answers_approvals``), or while a watcher
        follows the run, the run's approval requests wait for an answer. ``resume_info``
        (``resume.ResumeInfo`` as JSON) is stored with the log, for resuming after a restart.
        """
        run_id = assembled.request.run_id or uuid.uuid4().hex
        refuse_unless_open(self.accepting, self.store_failure, run_id)
        if (taken := self.get(run_id)) is not None and taken.owner != owner:
            raise SidecarError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"run_id {run_id!r} is taken by another client's run; choose another run_id",
            )
        if run_id in self._live:
            raise SidecarError(grpc.StatusCode.ALREADY_EXISTS, f"run {run_id!r} is still running")
        refuse_when_full(len(self._live), self.max_concurrent_runs, self.stats)
        try:
            bucket = self.quotas.check(owner, policy) if policy is not None else None
        except SidecarError:
            self.stats.refused_runs += 1
            raise
        if self._finished.pop(run_id) is not None:
            self.store.forget(run_id)
        request = dataclasses.replace(assembled.request, run_id=run_id)
        run = Run(
            request,
            RunLog(run_id, self.store, self.stats, owner, resume_info),
            self.observers,
            frame_limit=self.frame_limit,
        )
        if policy is not None:
            self.quotas.admit(run, owner, policy, bucket)
        # The stream that started the run is its owner's: it answers only if the owner may.
        owner_decides = sink_answers_approvals and assembled.approvals.self_approval
        self._launch(run, assembled, sink, sink if owner_decides else None, metadata or {})
        run.logger.info("run started", tools=list(assembled.runtime.registry.names()), owner=owner)
        return run

    def _launch(
        self,
        run: Run,
        assembled: Launchable,
        sink: FrameSink | None,
        answering: FrameSink | None,
        metadata: Mapping[str, str],
        resume: Resumption | None = None,
    ) -> None:
        """Make ``run`` live and start its loop (from its log, with ``resume``)."""
        run_log, run_id = run.log, run.run_id

        def attended() -> bool:
            if any(cursor.decides for cursor in run_log.cursors):
                return True
            return answering is not None and answering in run_log.sinks

        assembled.approvals.bind(run_id, attended, run.owner)
        for observer in self.observers:
            observer.run_started(run, metadata)
        if sink is not None:
            run.log.attach(sink)
        self._live[run_id] = run
        task = asyncio.create_task(self._drive(run, assembled, resume), name=f"run-{run_id}")
        run.started(task, assembled.approvals)

    def cancel(self, run: Run, reason: str) -> None:
        """Cancel a live run; it ends with ``run_cancelled`` carrying ``reason``."""
        if run.ended:
            return
        if run.task is None:  # parked at a restart, its loop not rebuilt yet
            if self.parked.get(run.run_id) is not None:
                self._give_up(run, f"cancelled while waiting for its client: {reason}")
            return
        if run.phase is not RunPhase.STARTING:
            run.task.cancel(reason)
        else:
            # Not one step yet: cancelling now would keep its body (and run_started) from
            # ever running. Its first step is already scheduled, so cancel right after it.
            asyncio.get_running_loop().call_soon(self.cancel, run, reason)

    def fail(
        self, run: Run, message: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    ) -> None:
        """End a live run now with ``run_failed`` (``code``, ``message``) and stop it."""
        if run.ended or run.task is None:
            return
        if run.phase is RunPhase.STARTING:  # its first step logs run_started: fail it after
            asyncio.get_running_loop().call_soon(self.fail, run, message, code)
            return
        error = SidecarError(code, message)
        run.emit(RunFailed(message, partial_result(run.run_id, run.log.frames), error))
        run.task.cancel(message)  # the loop stops; what it logs now is ignored

    def lose(self, run_id: str, message: str) -> None:
        """Stop (and forget) the run ``run_id``, which another sidecar took over (``Run.lose``)."""
        run = self._live.get(run_id) or self._finished.get(run_id)
        if run is None or not run.lose(message):
            return
        # Forgotten at once (it is another's now): retained (its loop ended, its end not
        # stored) or live; a loop still running ends on its own, awaited at the drain.
        self.parked.unpark(run_id)
        self._finished.pop(run_id)
        self._retire(run)
        if run.task is not None and not run.task.done():
            self._stopping.add(run.task)
            run.task.add_done_callback(self._stopping.discard)

    def hurry(self) -> None:
        """End a drain's grace period now (a second Ctrl-C): its live runs are cancelled."""
        self._hurry.set()

    async def drain(self, grace_s: float) -> None:
        """Stop accepting runs, let live ones finish within ``grace_s``, then cancel the rest."""
        self.accepting = False
        self.parked.close()
        await drain_live(self._live, self._hurry, grace_s, self.cancel)
        await asyncio.gather(*self._stopping, return_exceptions=True)

    async def _drive(
        self, run: Run, assembled: Launchable, resume: Resumption | None = None
    ) -> None:
        try:
            await drive(run, assembled, resume)
        finally:
            self._retire(run)

    # -- what the store tells (``StoreListener``) -----------------------------------------------

    def run_taken(self, run_id: str, message: str) -> None:
        """The store refused a frame of ``run_id``: another sidecar owns it now."""
        self.lose(run_id, message)

    def log_lost(self, run_id: str, message: str) -> None:
        """The store lost the log of ``run_id``: the run fails here (``DATA_LOSS``), and
        this sidecar keeps what it has of it; one whose end is logged finishes as it ended."""
        if (run := self._live.get(run_id)) is not None:
            self.fail(run, message, grpc.StatusCode.DATA_LOSS)

    def health_changed(self, failure: str | None) -> None:
        """The store failed to write (every live run ends), or writes again."""
        self.store_failure = failure
        self.store_changed.set()
        if failure is not None:
            message = f"the run store failed ({failure}); the run was ended"
            for run in list(self._live.values()):
                self.fail(run, message)

    def _retire(self, run: Run) -> None:
        if self._live.get(run.run_id) is not run:  # retired already (lost, its loop ending)
            return
        del self._live[run.run_id]
        self.quotas.release(run)
        if self.max_finished_runs > 0 and run.lost is None:  # a lost run is another's now
            self._finished.keep(run)
        self._finished.expire()


# -- admission and a run's loop -------------------------------------------------------------

#: The longest run id a client may choose.
MAX_RUN_ID = 128


def refuse_unless_open(accepting: bool, store_failure: str | None, run_id: str) -> None:
    """``UNAVAILABLE`` while the sidecar stops or its store cannot write; ``INVALID_ARGUMENT``
    for a run id longer than ``MAX_RUN_ID``."""
    if not accepting:
        raise SidecarError(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
    if store_failure is not None:
        raise SidecarError(
            grpc.StatusCode.UNAVAILABLE,
            f"the run store cannot write ({store_failure}); new runs are refused "
            "until it works again: retry later",
        )
    if len(run_id) > MAX_RUN_ID:
        raise SidecarError.invalid(f"run_id is longer than {MAX_RUN_ID} characters")


def refuse_when_full(live: int, limit: int, stats: LogStats) -> None:
    """``RESOURCE_EXHAUSTED`` (counted and logged) when ``live`` runs fill ``limit``."""
    if live < limit:
        return
    # A burst over the limit must be visible on the server too: a line and a count.
    stats.refused_runs += 1
    log.warning(
        "run refused", reason="max_concurrent_runs", live_runs=live,
        refused_total=stats.refused_runs,
    )  # fmt: skip
    raise SidecarError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the sidecar already runs {live} runs, its max_concurrent_runs; retry later",
    )


async def drive(run: Run, assembled: Launchable, resume: Resumption | None = None) -> None:
    """Run ``run``'s loop (from its log, with ``resume``); every way out logs a terminal
    event: the loop's own, or one written here when the loop never got to it. On a store other
    sidecars share, a tool call runs only once this sidecar surely still owns the run: its
    lease fresh by its own clock, or else the store holding the call's start (``Run.stored``)."""
    run.begin()
    runtime = assembled.runtime
    hosted, store, run_id = assembled.hosted_tools, run.log.store, run.run_id

    async def checkpoint(spec: ToolSpec) -> None:
        # A client's tool is invoked after its start is stored already (``push_in_order``).
        if spec.name not in hosted and not store.holds(run_id):
            await run.stored()

    try:
        await runtime.arun_tool_loop(
            run.request.prompt,
            assembled.context,
            run_id=run.run_id,
            timeout_s=assembled.timeout_s,
            on_event=run.emit,
            resume=resume,
            checkpoint=checkpoint if store.shared else None,
            deltas_read=run.log.live.read,
        )
    except asyncio.CancelledError as exc:
        if not run.ended:  # cancelled before the loop began
            _ensure_started(run, runtime)
            reason = str(exc.args[0]) if exc.args and exc.args[0] else "cancelled"
            run.emit(RunCancelled(reason, _empty_result(run.run_id, StopReason.CANCELLED)))
    except LLMCallError:
        pass  # the loop has logged run_failed
    except Exception as exc:
        run.logger.exception("run crashed")
        if not run.ended:
            _ensure_started(run, runtime)
            result = _empty_result(run.run_id, StopReason.ERROR)
            run.emit(RunFailed(f"internal error: {exc}", result, None))


def _ensure_started(run: Run, runtime: ToolCallingRuntime) -> None:
    """Log ``run_started`` for a run whose loop never got to: every log begins with it."""
    if run.log.frames:
        return
    names = tuple(spec.name for spec in runtime.offered_specs())
    run.emit(RunStarted(run.run_id, run.request.prompt, names, runtime.max_iterations))


def _empty_result(run_id: str, stop_reason: StopReason) -> ToolCallRunResult:
    return ToolCallRunResult("", (), 0, False, stop_reason=stop_reason, run_id=run_id)


async def drain_live(
    live: Mapping[str, Run],
    hurry: asyncio.Event,
    grace_s: float,
    cancel: Callable[[Run, str], None],
) -> None:
    """Let the ``live`` runs finish within ``grace_s`` (or until ``hurry`` is set), then
    ``cancel`` the rest and wait for them to end."""
    tasks = [run.task for run in live.values() if run.task is not None]
    if not tasks:
        return
    ended = asyncio.ensure_future(asyncio.wait(tasks))
    hurried = asyncio.ensure_future(hurry.wait())
    await asyncio.wait((ended, hurried), timeout=grace_s, return_when=FIRST_COMPLETED)
    for waiter in (ended, hurried):
        waiter.cancel()
    await asyncio.gather(ended, hurried, return_exceptions=True)
    pending = [task for task in tasks if not task.done()]
    for run in list(live.values()):
        cancel(run, "the sidecar is shutting down")
    if pending:
        await asyncio.wait(pending)
