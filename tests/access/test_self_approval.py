"""``self_approval`` (in ``[policy]``/``[policies.NAME]``): whether the identity that started
a run may decide its approvals; and the ``approval_decided`` event names who decided. Real
server, two identities (the owner ``alice`` and the approver ``april``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from cleveragents.client import SidecarRpcError
from cleveragents.sidecar import ClientConfig, Policy
from cleveragents.tool import ApprovalDecided, ApprovalRequest, ToolActorContext

from . import test_identities
from .test_identities import (
    ROLES,
    WAIT_S,
    Start,
    as_,
    clients,
    outcome,
    refused,
    waiting_run,
    write_then_done,
)

start = test_identities.start  # the fixture: sidecars with the identities' tokens


def decided(events: Sequence[object]) -> ApprovalDecided:
    [decision] = [e for e in events if isinstance(e, ApprovalDecided)]
    return decision


def strict_alice() -> dict[str, object]:
    """Settings where alice's runs (policy ``strict``) forbid self-approval, and a call that
    waits for approval waits for DecideApproval even when nobody who may answer follows."""
    named = clients()
    named["alice"] = ClientConfig("alice", token_env="TEST_TOKEN_ALICE", policy="strict")
    return {
        "clients": named,
        "policies": {"strict": Policy(name="strict", self_approval=False)},
        "approval_timeout_unattended_s": WAIT_S,
    }


async def test_by_default_the_owner_decides_and_the_event_names_it(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start()
    async with waiting_run(sidecar, "alice", tmp_path) as events, as_(sidecar, "alice") as alice:
        await alice.decide_approval("gated", "w1", approved=True, reason="mine")

    decision = decided(events)
    assert (decision.by, decision.identity, decision.approved) == ("rpc", "alice", True)
    assert outcome(events).success


async def test_an_approvers_decision_names_the_approver(start: Start, tmp_path: Path) -> None:
    sidecar = await start()
    async with waiting_run(sidecar, "alice", tmp_path) as events, as_(sidecar, "april") as april:
        await april.decide_approval("gated", "w1", approved=False, reason="not today")

        history = [s.event async for s in april.run_history("gated")]

    decision = decided(events)
    assert (decision.by, decision.identity, decision.approved) == ("rpc", "april", False)
    assert decided(history) == decision  # as the run's log keeps it


async def test_without_self_approval_the_owner_is_refused_and_an_approver_decides(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start(**strict_alice())
    async with (
        waiting_run(sidecar, "alice", tmp_path) as events,
        as_(sidecar, "alice") as alice,
        as_(sidecar, "april") as april,
    ):
        own = await refused(alice.decide_approval("gated", "w1", approved=True))
        await april.decide_approval("gated", "w1", approved=True, reason="four eyes")

    assert own.code is grpc.StatusCode.PERMISSION_DENIED
    assert "policies.strict.self_approval = false" in own.details
    assert "an identity with the approver or admin role must decide them" in own.details
    decision = decided(events)
    assert (decision.identity, decision.approved, decision.reason) == ("april", True, "four eyes")
    assert (tmp_path / "notes.md").read_text() == "alice's notes"


async def test_without_self_approval_the_owners_stream_does_not_hold_the_call(
    start: Start, tmp_path: Path
) -> None:
    settings = strict_alice()
    settings["approval_timeout_unattended_s"] = 0.0  # nobody who may answer: decide at once
    sidecar = await start(**settings)
    context = ToolActorContext(sandbox_root=str(tmp_path))
    async with as_(sidecar, "alice") as alice, asyncio.timeout(WAIT_S):
        events = [
            s.event
            async for s in alice.stream_tool_loop(
                "write", script=write_then_done(), context=context, run_id="alone"
            )
        ]

    decision = decided(events)
    assert (decision.by, decision.identity, decision.approved) == ("policy", "", False)
    assert not outcome(events).success
    assert not (tmp_path / "notes.md").exists()


async def test_without_self_approval_a_session_that_handles_approvals_is_refused(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start(**strict_alice())

    def approve(request: ApprovalRequest) -> bool:
        return True

    context = ToolActorContext(sandbox_root=str(tmp_path))
    async with as_(sidecar, "alice") as alice, asyncio.timeout(WAIT_S):
        with pytest.raises(SidecarRpcError) as raised:
            async for _ in alice.session(
                "write", script=write_then_done(), context=context, approver=approve
            ):
                pass
        runs = await alice.list_runs()

    assert raised.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "policies.strict.self_approval = false" in raised.value.details
    assert "leave handles_approvals unset" in raised.value.details
    assert runs == []  # refused before its run started


async def test_another_policy_keeps_self_approval(start: Start, tmp_path: Path) -> None:
    sidecar = await start(**strict_alice())  # bob's runs are under the default [policy]
    async with waiting_run(sidecar, "bob", tmp_path) as events, as_(sidecar, "bob") as bob:
        await bob.decide_approval("gated", "w1", approved=True)

    assert decided(events).identity == "bob"
    assert "bob" not in ROLES  # no role: it decides as the owner
