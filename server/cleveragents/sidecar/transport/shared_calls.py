"""Finding the run a call names, ``DecideApproval``, ``ListRuns`` and where ``CancelRun``
goes: the calls whose runs may be another sidecar's on a shared store, kept out of
``service.py``. They raise ``SidecarError``; the service aborts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cleveragents.sidecar.approvals import own_run_refusal
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.identity import Access, roles_granting
from cleveragents.sidecar.runs import Run
from cleveragents.sidecar.transport.caller import current_caller
from cleveragents.toolruntime.v1 import service_pb2
from cleveragents.wire import RunSummary, summary_to_pb

if TYPE_CHECKING:
    from cleveragents.sidecar.transport.service import ToolRuntimeService

__all__ = ["current", "decide", "list_runs", "locate"]


async def locate(service: ToolRuntimeService, run_id: str, access: Access) -> tuple[Run, str]:
    """The run ``run_id``, and the other sidecar sharing the store that runs it (``""``: this
    one), if the caller may ``access`` it; else ``NOT_FOUND``, as for an unknown id, but
    ``PERMISSION_DENIED`` for a run the caller may read (it knows the run exists) and not
    cancel or decide."""
    try:
        return service.require(run_id, access), ""
    except SidecarError as exc:
        missing = exc
    found = await _shared_run(service, run_id, access)
    if found is not None:
        return found
    if access is not Access.READ and await _readable(service, run_id):
        raise _not_allowed(current_caller().name, run_id, access)
    raise missing


async def _readable(service: ToolRuntimeService, run_id: str) -> bool:
    """Whether the caller may read ``run_id``, here or on another sidecar."""
    try:
        service.require(run_id, Access.READ)
    except SidecarError:
        return await _shared_run(service, run_id, Access.READ) is not None
    return True


async def _shared_run(
    service: ToolRuntimeService, run_id: str, access: Access
) -> tuple[Run, str] | None:
    """The run of another sidecar sharing the store, if the caller may ``access`` it."""
    caller, shared = current_caller(), service.manager.shared  # another's log is never read:
    if shared is None:  # the owner is checked on the run's hash first
        return None
    return await shared.get(run_id, lambda owner: caller.may(access, owner))


def _not_allowed(caller: str, run_id: str, access: Access) -> SidecarError:
    """Refusing an identity that may read a run what it may not do to it: it knows the run
    exists, so ``NOT_FOUND`` would mislead it."""
    doing = "cancel it" if access is Access.CONTROL else "decide its approvals"
    roles = " or ".join(roles_granting(access))
    return SidecarError.denied(
        f"identity {caller!r} may read run {run_id!r} but not {doing}: that needs the {roles} "
        "role, or owning the run"
    )


async def current(service: ToolRuntimeService, run: Run, sidecar: str) -> tuple[Run, str]:
    """``run`` and the sidecar running it (``""``: this one) as the shared store says now.

    A sidecar that stalled past its lease still has its copy of a run another sidecar took
    over until its next renewal finds out: that copy is stopped now (as the renewal would),
    and the other sidecar's run is returned, so that a cancel reaches the run that goes on.
    """
    shared = service.manager.shared
    if shared is None or sidecar or run.finished:
        return run, sidecar
    if not await shared.taken_over(run.run_id):
        return run, sidecar
    found = await shared.get(run.run_id)  # its owner is the caller's, checked on the copy
    return found if found is not None else (run, sidecar)


async def decide(
    service: ToolRuntimeService, run: Run, sidecar: str, request: service_pb2.DecideApprovalRequest
) -> None:
    """Decide a call of ``run`` as the caller: here, or (``sidecar``: another sidecar runs it)
    through that sidecar's control stream, after the run's self-approval rule is checked."""
    caller = current_caller()
    if service.manager.shared is not None and sidecar:  # the owner checks the call id
        policy = service.config.policy_named(caller.policy)
        refused = own_run_refusal(policy.self_approval, policy.where, caller.name, run.run_id)
        if caller.name == run.owner and refused:
            raise SidecarError.denied(refused)
        from cleveragents.sidecar.runs.shared import Control  # a fleet's only

        decision = Control(
            "decide", run.run_id, request.reason, request.call_id, request.approved, caller.name
        )
        await service.manager.shared.control(sidecar, decision)
    elif run.approvals is None:
        raise SidecarError.out_of_order(f"run {run.run_id!r} has no approvals")
    else:
        run.approvals.decide(request.call_id, request.approved, request.reason, "rpc", caller.name)


async def list_runs(
    service: ToolRuntimeService, request: service_pb2.ListRunsRequest
) -> service_pb2.ListRunsResponse:
    """The caller's runs (all of them for a reader of every identity's), newest first: live,
    kept, and with a shared store the other sidecars' recent runs."""
    if request.limit < 0:
        raise SidecarError.invalid("limit must not be negative")
    caller, manager = current_caller(), service.manager
    runs = manager.live_runs() + manager.retained_runs()
    if manager.shared is not None:  # and the runs of the sidecars sharing the store
        local = {run.run_id for run in runs}
        runs += await manager.shared.recent(request.limit or 100, local)
    runs = [run for run in runs if caller.may(Access.READ, run.owner)]
    summaries = sorted((_summary(run) for run in runs), key=lambda s: -s.started_at)
    return service_pb2.ListRunsResponse(
        runs=[summary_to_pb(s) for s in summaries[: request.limit or 100]]
    )


def _summary(run: Run) -> RunSummary:
    return RunSummary(
        run_id=run.run_id,
        state=run.state,
        stop_reason=run.stop_reason,
        last_sequence=run.last_sequence,
        started_at=run.started_at,
        finished_at=run.finished_at,
        iterations=run.iterations,
        tool_calls=run.tool_calls,
        prompt=run.request.prompt[:200],
    )
