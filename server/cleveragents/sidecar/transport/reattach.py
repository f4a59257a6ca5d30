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

With a Redis fleet the client may reach any sidecar: one that does not run the run asks the
sidecar that does to hand it over (``runs.redis_handover``; at most ``min(event_store_lease_s,
5 s)``). A parked run moves here and resumes as an adopted one does (from its log after the
claim: calls in flight re-run only for idempotent tools, the others get the interrupted
record); one attached to a live stream there is refused (``FAILED_PRECONDITION`` naming that
sidecar); no answer in time is ``UNAVAILABLE`` (the client retries). Ownership is checked
first: another identity's run is ``NOT_FOUND``, and nothing is asked.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.runs import Run
from cleveragents.sidecar.runs.resume import RESTART_REASON, ResumeInfo, resumption_of
from cleveragents.sidecar.transport.caller import current_caller
from cleveragents.sidecar.transport.calls import DEADLINE_SLACK_S, Context
from cleveragents.sidecar.transport.opening import read_opening
from cleveragents.tool import (
    IterationStarted,
    LLMResponded,
    Resumption,
    ToolCallCompleted,
    ToolCallStarted,
)
from cleveragents.toolruntime.v1 import session_pb2
from cleveragents.wire import SessionOpening

if TYPE_CHECKING:
    from cleveragents.sidecar.transport.service import ToolRuntimeService

__all__ = ["reattach", "session_gone"]

#: What a re-attach reads from its ``SessionStart``: the run's opening and its new host.
Opened = tuple[SessionOpening, ClientHost]


def session_gone(
    service: ToolRuntimeService, run: Run, host: ClientHost, context: Context, hosts: bool
) -> None:
    """The stream of ``run`` ended early: park the run for its client to re-attach when it
    waits on that client, else cancel it as before (see ``ToolRuntimeService.abandoned``)."""
    parked = service.manager.parked
    remaining = context.time_remaining()
    at_deadline = remaining is not None and remaining <= DEADLINE_SLACK_S
    waits = hosts and parked.window_s > 0 and not at_deadline
    if waits and not run.ended and host.violation is None:
        why = (
            f"its client went away and no client re-attached within session_reattach_s "
            f"({parked.window_s:g} s)"
        )
        parked.park(run, host, lambda: service.manager.cancel(run, why))
        run.logger.info("session client went away", waits_s=parked.window_s)
        return
    service.abandoned(run, context, "the client went away", force=hosts)


async def reattach(
    service: ToolRuntimeService, start: session_pb2.SessionStart
) -> tuple[Run, ClientHost | None]:
    """The run ``start`` re-attaches to and its host, its outbox filled with what the client
    missed (``None``: the run has ended; its log has the rest). ``SidecarError`` says why it
    cannot (``NOT_FOUND`` for a run of another identity, as for an unknown id)."""
    caller = current_caller()
    away = await _elsewhere(service, start, caller.name)
    if isinstance(away, tuple):  # handed over to this sidecar for this very re-attach
        run, opened = away
        try:
            return run, _resumed(service, run, start, opened, handed=True)
        except SidecarError:
            if (entry := service.manager.parked.get(run.run_id)) is not None:
                entry.reserved = False  # another re-attach may have it
            raise
    run = away or service.manager.require(start.reattach_run_id, lambda r: r.owner == caller.name)
    if run.lost is not None:  # handed over (or taken over): another sidecar has it now
        raise SidecarError.out_of_order(run.lost.message)
    after = start.after_sequence
    _check_after(run, after)
    if run.ended:
        return run, None
    parked = service.manager.parked.get(run.run_id)
    if parked is None or parked.reserved:
        _refuse_server_hosted(run)
        raise SidecarError.out_of_order(
            f"run {run.run_id!r} is not waiting for a client: a Session run is attached to "
            "another stream (a run has one client at a time; watch it with FollowRun meanwhile)"
        )
    if isinstance(parked.host, ClientHost):  # its stream dropped; the run went on
        host = parked.host
        declared = sorted(tool.name for tool in start.tools)
        if declared != sorted(host.tool_names):
            raise SidecarError.invalid(
                f"start.tools must re-declare the run's client tools {sorted(host.tool_names)}, "
                f"not {declared}"
            )
        service.manager.parked.unpark(run.run_id)
        host.rebind(run.log, run.log.frames[after : run.log.released])
        run.log.sinks.append(host.outbox)
        run.logger.info("session client re-attached", after_sequence=after)
        return run, host
    return run, await _rebuilt(service, run, start)


def _check_after(run: Run, after: int) -> None:
    if after > run.last_sequence:
        raise SidecarError.invalid(
            f"after_sequence {after} is past the run's last event ({run.last_sequence})"
        )


async def _elsewhere(
    service: ToolRuntimeService, start: session_pb2.SessionStart, owner: str
) -> Run | tuple[Run, Opened] | None:
    """With a shared store, the run of ``owner`` that another sidecar ran and ended (its log
    is sent as for a local one), or the live one it ran and handed over to this sidecar
    (parked here for this re-attach, with the opening read from ``start``).

    The sidecar running it is asked to hand it over if it is parked there; one attached to a
    stream there is ``FAILED_PRECONDITION``; no answer in time (that sidecar stalled, or
    died: once its lease expires, the fleet adopts the run) ``UNAVAILABLE``, and the client
    retries. A server-hosted run is ``FAILED_PRECONDITION`` (no client takes it over).
    ``None``: the run is this sidecar's, unknown or another identity's (``require`` says so).
    """
    shared, run_id = service.manager.shared, start.reattach_run_id
    if shared is None or service.manager.get(run_id) is not None:
        return None
    found = await shared.get(run_id, lambda o: o == owner)  # another's log is not read
    if found is None:
        return None
    run, sidecar = found
    if run.finished:
        return run
    _refuse_server_hosted(run)  # retrying would not help: it never waits for a client
    _check_after(run, start.after_sequence)
    asked = ""
    if service.config.resume_runs and service.manager.parked.window_s > 0:
        opened = await _opening(service, run, start)  # a bad start is refused before asking
        try:
            answer = await shared.ask_release(sidecar, run_id, owner)
        except asyncio.CancelledError:  # the client left: a run handed over waits for anyone
            if (entry := service.manager.parked.get(run_id)) is not None:
                entry.reserved = False
            raise
        handed = service.manager.get(run_id)
        entry = service.manager.parked.get(run_id)
        if handed is not None and entry is not None and entry.reserved:
            return handed, opened  # kept for this re-attach (its answer may have come late)
        from cleveragents.sidecar.runs.shared import ATTACHED  # a fleet's only

        if answer is not None and answer.reason == ATTACHED:
            raise SidecarError.out_of_order(
                f"run {run_id!r} is attached to another stream on sidecar {sidecar!r} (a run "
                "has one client at a time; watch it with FollowRun meanwhile)"
            )
        if handed is not None:  # it came here meanwhile: re-attach to it as to a local run
            return None
        if run.finished:  # it ended there meanwhile (its mirror is followed)
            return run
        asked = " and did not hand it over in time"
    raise SidecarError(
        grpc.StatusCode.UNAVAILABLE,
        f"run {run_id!r} runs on sidecar {sidecar!r}, not this one{asked}: retry (here or "
        "there; once that sidecar's store lease, event_store_lease_s, expires, a sidecar of "
        "the fleet adopts the run, and it waits session_reattach_s for its client)",
    )


def _refuse_server_hosted(run: Run) -> None:
    """``FAILED_PRECONDITION`` if ``run`` (live, here or on another sidecar) is not a Session
    run: no client can take it over, it is only watched."""
    info = ResumeInfo.from_json(run.log.resume_info)
    if info is None or info.hosted != "session":
        raise SidecarError.out_of_order(
            f"run {run.run_id!r} is not a Session run: watch it with FollowRun or WatchRun"
        )


async def _opening(
    service: ToolRuntimeService, run: Run, start: session_pb2.SessionStart
) -> Opened:
    """The opening of a re-attach to a run rebuilt from its log, with its new client host."""
    if not start.spec.prompt:  # the spec is the run's own; only the tools are new
        start.spec.prompt = run.request.prompt
    return await read_opening(start, service.config, service.frame_limit, service.openings)


async def _rebuilt(
    service: ToolRuntimeService, run: Run, start: session_pb2.SessionStart
) -> ClientHost:
    """Resume ``run``, parked since the restart, around the tools ``start`` re-declares."""
    return _resumed(service, run, start, await _opening(service, run, start), handed=False)


def _resumed(
    service: ToolRuntimeService,
    run: Run,
    start: session_pb2.SessionStart,
    opened: Opened,
    *,
    handed: bool,
) -> ClientHost:
    """Resume ``run``, parked rebuilt from its log (a restart, an adoption, a hand-over for
    this re-attach when ``handed``), around the tools the opening re-declares."""
    opening, host = opened
    info = ResumeInfo.from_json(run.log.resume_info)
    parked = service.manager.parked.get(run.run_id)
    if run.lost is not None:  # handed over to another sidecar meanwhile
        raise SidecarError.out_of_order(run.lost.message)
    if parked is None or info is None:  # its window ended
        raise SidecarError.not_found(f"run {run.run_id!r} stopped waiting for its client")
    if parked.reserved and not handed:
        raise SidecarError.out_of_order(
            f"run {run.run_id!r} is being re-attached by another stream (a run has one client "
            "at a time; watch it with FollowRun meanwhile)"
        )
    resumption = resumption_of(run.log.frames, parked.reason or RESTART_REASON)
    assembled = service.reassemble(run, info, resumption, (opening, host))
    service.manager.parked.unpark(run.run_id)
    tools, llm = _in_flight(resumption)
    for call_id in tools:  # answered late by the client: not a violation
        host.forget("tool", call_id)
    if llm is not None:  # asked again under its id: one more answer to it is ignored
        host.forget("llm", llm)
    host.attach(run.log)
    for item in run.log.frames[start.after_sequence :]:
        host.outbox.push(item)
    answers = opening.handles_approvals
    service.manager.resume_parked(run, assembled, host.outbox, resumption, answers)
    return host


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
