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

from typing import TYPE_CHECKING

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.runs import Run
from cleveragents.sidecar.runs.parked import ParkedRun
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
    window = service.config.session_reattach_s
    remaining = context.time_remaining()
    at_deadline = remaining is not None and remaining <= DEADLINE_SLACK_S
    waits = hosts and window > 0 and not at_deadline
    if waits and not run.ended and host.violation is None:
        why = (
            f"its client went away and no client re-attached within session_reattach_s "
            f"({window:g} s)"
        )
        service.directory.park(run, host, lambda: service.manager.cancel(run, why))
        run.logger.info("session client went away", waits_s=window)
        return
    service.abandoned(run, context, "the client went away", force=hosts)


async def reattach(
    service: ToolRuntimeService, start: session_pb2.SessionStart
) -> tuple[Run, ClientHost | None]:
    """The run ``start`` re-attaches to and its host, its outbox filled with what the client
    missed (``None``: the run has ended; its log has the rest). ``SidecarError`` says why it
    cannot (``NOT_FOUND`` for a run of another identity, as for an unknown id)."""
    caller, run_id = current_caller(), start.reattach_run_id
    handle = await service.directory.locate(run_id, lambda owner: owner == caller.name)
    if handle is None:
        raise SidecarError.not_found(f"no run with id {run_id!r} (unknown, or expired)")
    run = handle.run
    if run.lost is not None:  # handed over (or taken over): another sidecar has it now
        raise SidecarError.out_of_order(run.lost.message)
    _check_after(run, start.after_sequence)
    if run.ended:
        return run, None
    _refuse_server_hosted(run)  # retrying would not help: it never waits for a client

    async def prepare(waiting: ParkedRun | None) -> Opened | None:
        """Check the start before the run is taken: the tools of a run whose host waits
        here; else (rebuilt from its log, here or at the sidecar it comes from) the opening."""
        if waiting is not None and isinstance(waiting.host, ClientHost):
            declared = sorted(tool.name for tool in start.tools)
            if declared != sorted(waiting.host.tool_names):
                raise SidecarError.invalid(
                    f"start.tools must re-declare the run's client tools "
                    f"{sorted(waiting.host.tool_names)}, not {declared}"
                )
            return None
        return await _opening(service, run, start)

    attachment = await handle.reattach(caller.name, prepare)
    run, waiting = attachment.run, attachment.waiting
    if waiting is None:  # it ended meanwhile: its log has the rest
        return run, None
    try:
        if isinstance(waiting.host, ClientHost):  # its stream dropped; the run went on
            host = waiting.host
            service.manager.parked.unpark(run.run_id)
            host.rebind(run.log, run.log.frames[start.after_sequence : run.log.released])
            run.log.sinks.append(host.outbox)
            run.logger.info("session client re-attached", after_sequence=start.after_sequence)
            return run, host
        assert attachment.prepared is not None
        return run, _resumed(service, run, waiting, start, attachment.prepared)
    except BaseException:
        attachment.give_back()
        raise


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


async def _opening(
    service: ToolRuntimeService, run: Run, start: session_pb2.SessionStart
) -> Opened:
    """The opening of a re-attach to a run rebuilt from its log, with its new client host."""
    if not start.spec.prompt:  # the spec is the run's own; only the tools are new
        start.spec.prompt = run.request.prompt
    return await read_opening(start, service.config, service.frame_limit, service.openings)


def _resumed(
    service: ToolRuntimeService,
    run: Run,
    waiting: ParkedRun,
    start: session_pb2.SessionStart,
    opened: Opened,
) -> ClientHost:
    """Resume ``run``, parked rebuilt from its log (a restart, an adoption, a hand-over),
    around the tools the opening re-declares."""
    opening, host = opened
    info = ResumeInfo.from_json(run.log.resume_info)
    if info is None:  # pragma: no cover - a run that parks rebuilt was stored with it
        raise SidecarError.not_found(f"run {run.run_id!r} stopped waiting for its client")
    resumption = resumption_of(run.log.frames, waiting.reason or RESTART_REASON)
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
