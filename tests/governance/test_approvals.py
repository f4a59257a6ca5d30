"""Approvals on a real sidecar: granted, denied, timed out; by session and by RPC."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.sidecar import ConfigError, Sidecar, SidecarConfig
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ErrorKind,
    LLMRequest,
    LLMResponse,
    RunCompleted,
    RunStarted,
    ToolActorContext,
    ToolCall,
    ToolRegistry,
)

from .conftest import Start, call

DEPLOY_THEN_DONE: list[dict[str, Any]] = [call("deploy", "prod"), {"content": "done"}]


async def test_supervised_is_the_default_and_an_rpc_approval_lets_the_call_run(
    start: Start,
) -> None:
    sidecar, ran = await start()
    events: list[StreamedEvent] = []
    async with AsyncSidecarClient(sidecar.address) as client:
        async for streamed in client.stream_tool_loop("ship it", script=DEPLOY_THEN_DONE):
            events.append(streamed)
            if isinstance(streamed.event, ApprovalRequested):
                await client.decide_approval(
                    streamed.run_id, streamed.event.call_id, approved=True, reason="looks fine"
                )
    asked = [e.event for e in events if isinstance(e.event, ApprovalRequested)]
    decided = [e.event for e in events if isinstance(e.event, ApprovalDecided)]
    assert ran == ["deploy:prod"]
    assert [(a.call_id, a.tool_name, dict(a.inputs)) for a in asked] == [
        ("c1", "deploy", {"target": "prod"})
    ]
    assert "supervised" in asked[0].reason
    assert [(d.approved, d.reason, d.by) for d in decided] == [(True, "looks fine", "rpc")]
    final = events[-1].event
    assert isinstance(final, RunCompleted)
    assert final.result.tool_call_history[0].success


async def test_an_rpc_denial_becomes_a_denied_record(start: Start) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        async for streamed in client.stream_tool_loop("ship it", script=DEPLOY_THEN_DONE):
            if isinstance(streamed.event, ApprovalRequested):
                await client.decide_approval(
                    streamed.run_id, streamed.event.call_id, approved=False, reason="not today"
                )
            final = streamed.event
    assert ran == []
    assert isinstance(final, RunCompleted)
    record = final.result.tool_call_history[0]
    assert (record.error_kind, record.error) == (ErrorKind.DENIED, "denied by rpc: not today")


async def test_an_approval_nobody_gives_times_out_as_a_denial(start: Start) -> None:
    sidecar, ran = await start(approval_timeout_s=0.2)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e async for e in client.stream_tool_loop("ship it", script=DEPLOY_THEN_DONE)]
    decided = [e.event for e in events if isinstance(e.event, ApprovalDecided)]
    assert [(d.approved, d.by) for d in decided] == [(False, "timeout")]
    assert ran == []


async def test_approve_on_timeout_lets_the_call_run(start: Start) -> None:
    sidecar, ran = await start(approval_timeout_s=0.1, approve_on_timeout=True)
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("ship it", script=DEPLOY_THEN_DONE)
    assert ran == ["deploy:prod"]


async def test_a_session_client_decides_its_own_runs_approvals(start: Start) -> None:
    sidecar, ran = await start()
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(request.inputs.get("target") == "staging", "only staging")

    script = [call("deploy", "prod", "a"), call("deploy", "staging", "b"), {"content": "ok"}]
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e async for e in client.session("deploy", approver=approver, script=script)]
    decided = [(e.event.call_id, e.event.approved, e.event.by) for e in events
               if isinstance(e.event, ApprovalDecided)]  # fmt: skip
    assert decided == [("a", False, "session"), ("b", True, "session")]
    assert ran == ["deploy:staging"]
    assert [r.tool_name for r in asked] == ["deploy", "deploy"]


async def test_client_tools_declare_their_side_effects(start: Start) -> None:
    sidecar, _ = await start()
    tools = ToolRegistry()
    wrote: list[str] = []

    @tools.tool(side_effects=True)
    def write_note(text: str) -> None:
        """Write a note."""
        wrote.append(text)

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w", "name": "write_note", "arguments": {"text": "hi"}}]},
        {"content": "done"},
    ]
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [
            e async for e in client.session("note", tools=tools, approver=lambda r: True,
                                            script=script)
        ]  # fmt: skip
    assert wrote == ["hi"]
    assert any(isinstance(e.event, ApprovalRequested) for e in events)


async def test_read_only_hides_tools_with_side_effects_from_the_model(start: Start) -> None:
    sidecar, _ = await start()
    seen: list[list[str]] = []

    class RecordingLLM:
        async def call(self, request: LLMRequest) -> LLMResponse:
            seen.append([str(t["name"]) for t in request.tools])
            if request.iteration == 1:
                return LLMResponse(tool_calls=[ToolCall("x", "deploy", {"target": "prod"})])
            return LLMResponse("done")

    context = ToolActorContext(automation_profile="read_only")
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e async for e in client.session("go", llm=RecordingLLM(), context=context)]
    assert seen[0] == ["look", "wait"]  # deploy has side effects: not offered
    final = events[-1].event
    assert isinstance(final, RunCompleted)
    record = final.result.tool_call_history[0]
    assert record.error_kind is ErrorKind.DENIED
    assert "forbidden by automation profile 'read_only'" in (record.error or "")


async def test_full_auto_runs_everything_without_asking(start: Start) -> None:
    sidecar, ran = await start()
    context = ToolActorContext(automation_profile="full_auto")
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e async for e in client.stream_tool_loop(
            "go", script=DEPLOY_THEN_DONE, context=context)]  # fmt: skip
    assert ran == ["deploy:prod"]
    assert not any(isinstance(e.event, ApprovalRequested) for e in events)


async def test_a_configured_profile_can_forbid_by_name(start: Start) -> None:
    from cleveragents.tool import AutomationProfile

    profile = AutomationProfile("ci", forbid=("deploy",))
    sidecar, ran = await start(automation_profiles={"ci": profile},
                               default_automation_profile="ci")  # fmt: skip
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=DEPLOY_THEN_DONE)
    assert result.tool_call_history[0].error_kind is ErrorKind.DENIED
    assert ran == []


async def test_an_unknown_automation_profile_is_not_found(start: Start) -> None:
    sidecar, _ = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(SidecarRpcError) as raised:
            await client.run_tool_loop(
                "go", script=DEPLOY_THEN_DONE, context=ToolActorContext(automation_profile="nope")
            )
    assert raised.value.code is grpc.StatusCode.NOT_FOUND


async def test_deciding_a_call_that_does_not_wait_is_a_failed_precondition(start: Start) -> None:
    sidecar, _ = await start()
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=[{"content": "hi"}])
        with pytest.raises(SidecarRpcError) as not_waiting:
            await client.decide_approval(result.run_id, "c1", approved=True)
        with pytest.raises(SidecarRpcError) as no_run:
            await client.decide_approval("no-such-run", "c1", approved=True)
    assert not_waiting.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert no_run.value.code is grpc.StatusCode.NOT_FOUND


async def test_run_started_on_the_wire_names_only_the_tools_the_model_is_offered(
    start: Start,
) -> None:
    sidecar, _ = await start()
    context = ToolActorContext(automation_profile="read_only")
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e async for e in client.stream_tool_loop("go", script=[{}], context=context)]
    started = events[0].event
    assert isinstance(started, RunStarted)
    assert started.tool_names == ("look", "wait")  # deploy has side effects: not offered


async def test_run_started_of_a_session_leaves_out_client_tools_the_profile_forbids(
    start: Start,
) -> None:
    sidecar, _ = await start()
    tools = ToolRegistry()

    @tools.tool
    def read_note() -> str:
        """Read the note."""
        return "note"

    @tools.tool(side_effects=True)
    def write_note(text: str) -> None:
        """Write a note."""

    context = ToolActorContext(automation_profile="read_only")
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e async for e in client.session("go", tools=tools, script=[{}], context=context)]
    started = events[0].event
    assert isinstance(started, RunStarted)
    assert started.tool_names == ("look", "wait", "read_note")


# -- nobody to answer ----------------------------------------------------------------------------

#: Far below the 300 s an unanswerable approval used to wait, far above a prompt answer.
PROMPTLY_S = 20.0


async def test_a_unary_run_nobody_can_answer_is_denied_at_once(start: Start) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client, asyncio.timeout(PROMPTLY_S):
        result = await client.run_tool_loop("ship it", script=DEPLOY_THEN_DONE, run_id="u1")
        events = [e.event async for e in client.watch("u1")]
    assert ran == []
    record = result.tool_call_history[0]
    assert record.error_kind is ErrorKind.DENIED
    assert record.error == (
        "denied by policy: nobody can answer: no Session with handles_approvals, "
        "StreamToolLoop caller or WatchRun watcher follows the run"
    )
    (asked,) = [e for e in events if isinstance(e, ApprovalRequested)]
    assert asked.how_to_answer.startswith("nobody can answer")
    assert "approval_timeout_unattended_s" in asked.how_to_answer
    (decided,) = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.approved, decided.by) == (False, "policy")


async def test_a_streamed_runs_approval_request_says_how_to_answer(start: Start) -> None:
    sidecar, _ = await start(approval_timeout_s=0.2)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [e.event async for e in client.stream_tool_loop(
            "ship it", script=DEPLOY_THEN_DONE, run_id="s1")]  # fmt: skip
    (asked,) = [e for e in events if isinstance(e, ApprovalRequested)]
    assert asked.how_to_answer == (
        "answer with `cleveragents-sidecar approve s1 c1` (or `deny`), the DecideApproval RPC "
        "(run_id 's1', call_id 'c1') or a Session approval_decision; undecided after 0.2s it "
        "is denied"
    )


async def test_a_session_that_does_not_handle_approvals_is_not_asked_to_wait(
    start: Start,
) -> None:
    sidecar, ran = await start()
    async with AsyncSidecarClient(sidecar.address) as client, asyncio.timeout(PROMPTLY_S):
        events = [e.event async for e in client.session("ship it", script=DEPLOY_THEN_DONE)]
    (decided,) = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.approved, decided.by) == (False, "policy")
    assert ran == []


async def test_a_watcher_can_answer_a_unary_runs_approval() -> None:
    held, release, ran = asyncio.Event(), asyncio.Event(), []
    tools = ToolRegistry()

    @tools.tool
    async def hold() -> None:
        """Wait until the test lets go."""
        held.set()
        await release.wait()

    @tools.tool(side_effects=True)
    async def deploy(target: str) -> None:
        """Deploy somewhere."""
        ran.append(target)

    script = [{"tool_calls": [{"id": "h", "name": "hold", "arguments": {}}]}, *DEPLOY_THEN_DONE]
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0"), tools)
    await sidecar.start()
    try:
        async with AsyncSidecarClient(sidecar.address) as client, asyncio.timeout(PROMPTLY_S):
            unary = asyncio.create_task(client.run_tool_loop("go", script=script, run_id="u2"))
            await held.wait()
            async for streamed in client.watch("u2"):
                release.set()  # the watcher is attached before the call asks for approval
                if isinstance(streamed.event, ApprovalRequested):
                    await client.decide_approval("u2", streamed.event.call_id, approved=True)
            result = await unary
    finally:
        await sidecar.stop(1.0)
    assert ran == ["prod"]
    assert result.tool_call_history[1].success


async def test_an_unattended_wait_can_be_configured_and_times_out(start: Start) -> None:
    sidecar, ran = await start(approval_timeout_unattended_s=0.2)
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("ship it", script=DEPLOY_THEN_DONE)
    assert ran == []
    assert result.tool_call_history[0].error == (
        "denied by timeout: no decision within 0.2s, and nobody follows the run "
        "(approval_timeout_unattended_s)"
    )


def test_the_unattended_wait_comes_from_the_environment_and_must_not_be_negative() -> None:
    from cleveragents.sidecar import ConfigError, load_config

    env = {"CLEVERAGENTS_SIDECAR_APPROVAL_TIMEOUT_UNATTENDED_S": "30"}
    assert load_config(env=env).approvals.unattended_timeout_s == 30.0
    assert load_config(env={}).approvals.unattended_timeout_s == 0.0
    with pytest.raises(ConfigError, match="approval_timeout_unattended_s must be 0"):
        SidecarConfig(approval_timeout_unattended_s=-1)


@pytest.mark.parametrize(
    "setting",
    [
        {"approval_timeout_s": math.nan},
        {"approval_timeout_s": math.inf},
        {"approval_timeout_unattended_s": math.nan},
        {"approval_timeout_unattended_s": math.inf},
    ],
)
def test_approval_timeouts_must_be_finite_numbers(setting: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="approval_timeout"):
        SidecarConfig(**setting)
