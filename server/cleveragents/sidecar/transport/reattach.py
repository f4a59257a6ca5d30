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
"""

from __future__ import annotations

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

if TYPE_CHECKING:
    from cleveragents.sidecar.transport.service import ToolRuntimeService

__all__ = ["reattach", "session_gone"]


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
    run = await _elsewhere(service, start.reattach_run_id, caller.name) or (
        service.manager.require(start.reattach_run_id, lambda r: r.owner == caller.name)
    )
    after = start.after_sequence
    if after > run.last_sequence:
        raise SidecarError.invalid(
            f"after_sequence {after} is past the run's last event ({run.last_sequence})"
        )
    if run.ended:
        return run, None
    parked = service.manager.parked.get(run.run_id)
    if parked is None:
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


async def _elsewhere(service: ToolRuntimeService, run_id: str, owner: str) -> Run | None:
    """With a shared store, the run ``run_id`` of ``owner`` that another sidecar ran and
    ended (its log is sent as for a local one); ``UNAVAILABLE`` while another sidecar runs it:
    the client retries, and once that sidecar's lease expires the run is adopted and waits for
    it (``FAILED_PRECONDITION`` for a server-hosted run, which no client takes over). ``None``:
    the run is this sidecar's, unknown or another identity's (``require`` says so)."""
    shared = service.manager.shared
    if shared is None or service.manager.get(run_id) is not None:
        return None
    found = await shared.get(run_id, lambda o: o == owner)  # another's log is not read
    if found is None:
        return None
    run, sidecar = found
    if run.finished:
        return run
    _refuse_server_hosted(run)  # retrying would not help: it never waits for a client
    raise SidecarError(
        grpc.StatusCode.UNAVAILABLE,
        f"run {run_id!r} runs on sidecar {sidecar!r}, not this one: re-attach there, or retry "
        "here (once that sidecar's store lease, event_store_lease_s, expires, a sidecar of "
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


async def _rebuilt(
    service: ToolRuntimeService, run: Run, start: session_pb2.SessionStart
) -> ClientHost:
    """Resume ``run``, parked since the restart, around the tools ``start`` re-declares."""
    if not start.spec.prompt:  # the spec is the run's own; only the tools are new
        start.spec.prompt = run.request.prompt
    opening, host = await read_opening(start, service.config, service.frame_limit, service.openings)
    info = ResumeInfo.from_json(run.log.resume_info)
    parked = service.manager.parked.get(run.run_id)
    if parked is None or info is None:  # its window ended
        raise SidecarError.not_found(f"run {run.run_id!r} stopped waiting for its client")
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
