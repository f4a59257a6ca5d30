"""A ``Session`` client re-attaching to its run, and a run waiting for that.

When a Session's stream goes away while its run lives and the run waits on its client (it
hosts tools or the LLM), the run is not cancelled: it parks for ``session_reattach_s`` (see
``runs.parked``), its calls to the client still owed. A ``SessionStart`` with
``reattach_run_id`` from the run's owner then takes it over: the stream is sent the events
after ``after_sequence``, then the invocations still owed, as they were first sent (same call
ids, same idempotency keys). A run that was live when the sidecar restarted is rebuilt around
the re-declared tools and resumes from its log (calls in flight re-run only for idempotent
tools). A run another stream holds is refused (``FAILED_PRECONDITION``): taking it over
silently would leave two clients answering the same calls.

With a Redis fleet the client may reach any sidecar: a run parked on another sidecar is taken
over here (``fleet.redis_fleet``: one compare-and-set on the run's hash) and resumes as an
adopted one does (from its log after the claim: calls in flight re-run only for idempotent
tools, the others get the interrupted record); one attached to a live stream there is refused
(``FAILED_PRECONDITION`` naming that sidecar); one whose sidecar died is ``UNAVAILABLE`` until
the fleet adopts it (the client retries). Ownership is checked first: another identity's run is
``NOT_FOUND``, and nothing is read of its log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cleveragents.sidecar.assembly import RunAssembler
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.fleet.directory import RunDirectory
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.identity import Identity
from cleveragents.sidecar.runs import Run, RunManager
from cleveragents.sidecar.runs.parked import ParkedRun
from cleveragents.sidecar.runs.recovery import RESTART_REASON, ResumeInfo, resumption_of
from cleveragents.tool import (
    IterationStarted,
    LLMResponded,
    Resumption,
    ToolCallCompleted,
    ToolCallStarted,
)
from cleveragents.wire import SessionOpening

__all__ = ["DEADLINE_SLACK_S", "Opened", "Reattach", "SessionRuns"]

#: A client that gives up this close to its deadline gave up *at* it (clocks differ).
DEADLINE_SLACK_S = 0.1

#: What a re-attach reads from its ``SessionStart``: the run's opening and its new host.
Opened = tuple[SessionOpening, ClientHost]


class Abandon(Protocol):
    """What ends a run whose starting stream ended early (``Gateway.abandoned``)."""

    def __call__(
        self, run: Run, deadline_s: float | None, reason: str, *, force: bool = False
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Reattach:
    """A ``SessionStart`` that re-attaches: the run, the last event its client has, the
    client tools it re-declares, and how to read its opening for the run's prompt (only
    needed for a run rebuilt from its log; checked before the run is taken)."""

    run_id: str
    after_sequence: int
    tool_names: Sequence[str]
    open: Callable[[str], Awaitable[Opened]]


class SessionRuns:
    """What happens to a Session run when its client's stream goes, and when it comes back."""

    def __init__(
        self,
        config: SidecarConfig,
        manager: RunManager,
        directory: RunDirectory,
        assembler: RunAssembler,
        abandon: Abandon,
    ) -> None:
        self.config = config
        self.manager = manager
        self.directory = directory
        self.assembler = assembler
        self._abandon = abandon

    def gone(self, run: Run, host: ClientHost, deadline_s: float | None, hosts: bool) -> None:
        """The stream of ``run`` ended early (``deadline_s`` left of its call): park the run
        for its client to re-attach when it waits on that client (``hosts``), else cancel it
        as a stream that ends early does (``Gateway.abandoned``)."""
        window = self.config.session_reattach_s
        at_deadline = deadline_s is not None and deadline_s <= DEADLINE_SLACK_S
        if hosts and window > 0 and not at_deadline and not run.ended and host.violation is None:
            why = (
                f"its client went away and no client re-attached within session_reattach_s "
                f"({window:g} s)"
            )
            self.directory.park(run, host, lambda: self.manager.cancel(run, why))
            run.logger.info("session client went away", waits_s=window)
            return
        self._abandon(run, deadline_s, "the client went away", force=hosts)

    async def reattach(self, caller: Identity, ask: Reattach) -> tuple[Run, ClientHost | None]:
        """The run ``ask`` re-attaches to and its host, its outbox filled with what the client
        missed (``None``: the run has ended; its log has the rest). ``SidecarError`` says why
        it cannot (``NOT_FOUND`` for a run of another identity, as for an unknown id)."""
        run_id, after = ask.run_id, ask.after_sequence
        handle = await self.directory.locate(run_id, lambda owner: owner == caller.name)
        if handle is None:
            raise SidecarError.not_found(f"no run with id {run_id!r} (unknown, or expired)")
        run = handle.run
        if run.lost is not None:  # handed over (or taken over): another sidecar has it now
            raise SidecarError.out_of_order(run.lost.message)
        _check_after(run, after)
        if run.ended:
            return run, None
        _refuse_server_hosted(run)  # retrying would not help: it never waits for a client

        async def prepare(waiting: ParkedRun | None) -> Opened | None:
            """Check the start before the run is taken: the tools of a run whose host waits
            here; else (rebuilt from its log, here or where it comes from) the opening."""
            if waiting is not None and isinstance(waiting.host, ClientHost):
                declared, owed = sorted(ask.tool_names), sorted(waiting.host.tool_names)
                if declared != owed:
                    raise SidecarError.invalid(
                        f"start.tools must re-declare the run's client tools {owed}, not {declared}"
                    )
                return None
            return await ask.open(run.request.prompt)

        attachment = await handle.reattach(caller.name, prepare)
        run, waiting = attachment.run, attachment.waiting
        if waiting is None:  # it ended meanwhile: its log has the rest
            return run, None
        try:
            if isinstance(waiting.host, ClientHost):  # its stream dropped; the run went on
                host = waiting.host
                self.manager.parked.unpark(run.run_id)
                run.reattached()
                host.rebind(run.log, run.log.frames[after : run.log.released])
                run.log.attach(host.outbox)
                run.logger.info("session client re-attached", after_sequence=after)
                return run, host
            assert attachment.prepared is not None
            return run, self._resumed(run, waiting, after, attachment.prepared)
        except BaseException:
            attachment.give_back()
            raise

    def _resumed(self, run: Run, waiting: ParkedRun, after: int, opened: Opened) -> ClientHost:
        """Resume ``run``, parked rebuilt from its log (a restart, an adoption, a hand-over),
        around the tools the opening re-declares."""
        opening, host = opened
        info = ResumeInfo.from_json(run.log.resume_info)
        if info is None:  # pragma: no cover - a run that parks rebuilt was stored with it
            raise SidecarError.not_found(f"run {run.run_id!r} stopped waiting for its client")
        resumption = resumption_of(run.log.frames, waiting.reason or RESTART_REASON)
        assembled = self.assembler.reassemble(run.request, run.owner, info, resumption, opened)
        self.manager.parked.unpark(run.run_id)
        tools, llm = _in_flight(resumption)
        for call_id in tools:  # answered late by the client: not a violation
            host.forget("tool", call_id)
        if llm is not None:  # asked again under its id: one more answer to it is ignored
            host.forget("llm", llm)
        host.attach(run.log)
        for item in run.log.frames[after:]:
            host.outbox.push(item)
        answers = opening.handles_approvals
        self.manager.resume_parked(run, assembled, host.outbox, resumption, answers)
        return host


def _check_after(run: Run, after: int) -> None:
    if after > run.last_sequence:
        raise SidecarError.invalid(
            f"after_sequence {after} is past the run's last event ({run.last_sequence})"
        )


def _refuse_server_hosted(run: Run) -> None:
    """``FAILED_PRECONDITION`` if ``run`` (live, here or on another sidecar) is not a Session
    run: no client can take it over, it is only watched."""
    info = ResumeInfo.from_json(run.log.resume_info)
    if info is None or info.hosted != "session":
        raise SidecarError.out_of_order(
            f"run {run.run_id!r} is not a Session run: watch it with FollowRun or WatchRun"
        )


def _in_flight(resumption: Resumption) -> tuple[list[str], str | None]:
    """The ids of the calls of the run's last response that started and never ended, and the
    request id of an LLM call started and never answered: their client may still answer them
    (a rerun is asked again under the same id; another's answer comes too late)."""
    started: list[str] = []
    ended: set[str] = set()
    llm: str | None = None
    for event in resumption.events:
        if isinstance(event, IterationStarted):
            llm = f"llm_{event.iteration}"  # the request id ClientLLMCaller gives it
        elif isinstance(event, LLMResponded):
            started, ended, llm = [], set(), None
        elif isinstance(event, ToolCallStarted):
            started.append(event.call_id)
        elif isinstance(event, ToolCallCompleted):
            ended.add(event.record.call_id)
    return [call_id for call_id in started if call_id not in ended], llm
