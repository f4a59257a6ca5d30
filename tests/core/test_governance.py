"""Automation profiles decide which tools run, which wait for approval, which are hidden."""

from __future__ import annotations

import asyncio

import pytest

from cleveragents.tool import (
    BUILTIN_PROFILES,
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    AutomationProfile,
    Decision,
    ErrorKind,
    LLMResponse,
    RunEvent,
    RunStarted,
    ToolCall,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)

from .conftest import recording_llm


def _registry(ran: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def look(path: str) -> str:
        """Read something."""
        ran.append("look")
        return path

    @registry.tool(side_effects=True)
    def change(path: str) -> str:
        """Change something."""
        ran.append("change")
        return path

    return registry


def _calls(*names: str) -> list[LLMResponse]:
    return [
        LLMResponse(tool_calls=[ToolCall(f"c{i}", n, {"path": "p"}) for i, n in enumerate(names)]),
        LLMResponse("done"),
    ]


class Approver:
    """Answers approval requests with a fixed decision, recording what it was asked."""

    def __init__(self, approved: bool, delay: asyncio.Event | None = None) -> None:
        self.approved = approved
        self.delay = delay
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        if self.delay is not None:
            await self.delay.wait()
        return ApprovalDecision(self.approved, "checked by a test", "tester")


def test_profiles_decide_by_glob_before_side_effects() -> None:
    profile = AutomationProfile(
        "p", allow=("safe_*",), ask=("ask_*",), forbid=("rm*",), side_effects=Decision.ASK
    )
    spec = ToolSpec
    assert profile.decide(spec("rm_all", side_effects=False)) is Decision.FORBID
    assert profile.decide(spec("ask_me")) is Decision.ASK
    assert profile.decide(spec("safe_write", side_effects=True)) is Decision.ALLOW
    assert profile.decide(spec("write", side_effects=True)) is Decision.ASK
    assert profile.decide(spec("read")) is Decision.ALLOW


def test_builtin_profiles_cover_auto_supervised_and_read_only() -> None:
    effects = ToolSpec("x", side_effects=True)
    assert BUILTIN_PROFILES["full_auto"].decide(effects) is Decision.ALLOW
    assert BUILTIN_PROFILES["supervised"].decide(effects) is Decision.ASK
    assert BUILTIN_PROFILES["read_only"].decide(effects) is Decision.FORBID
    assert BUILTIN_PROFILES["supervised"].decide(ToolSpec("y")) is Decision.ALLOW


async def test_forbidden_tools_are_not_offered_to_the_model() -> None:
    ran: list[str] = []
    registry = _registry(ran)
    llm = recording_llm([LLMResponse("nothing to do")])
    runtime = ToolCallingRuntime(
        registry, ToolRunner(registry), llm, profile=BUILTIN_PROFILES["read_only"]
    )
    await runtime.arun_tool_loop("go")
    assert [t["name"] for t in llm.requests[0].tools] == ["look"]


async def test_a_forbidden_tool_called_anyway_is_denied_and_fed_back() -> None:
    ran: list[str] = []
    registry = _registry(ran)
    llm = recording_llm(_calls("change"))
    runtime = ToolCallingRuntime(
        registry, ToolRunner(registry), llm, profile=BUILTIN_PROFILES["read_only"]
    )
    result = await runtime.arun_tool_loop("go")
    record = result.tool_call_history[0]
    assert (record.success, record.error_kind) == (False, ErrorKind.DENIED)
    assert "forbidden by automation profile 'read_only'" in (record.error or "")
    assert ran == []
    assert "forbidden" in llm.requests[1].messages[-1].content


async def test_an_approved_call_runs_and_the_approval_is_in_the_event_log() -> None:
    ran: list[str] = []
    registry = _registry(ran)
    approver = Approver(approved=True)
    events: list[RunEvent] = []
    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        recording_llm(_calls("look", "change")),
        profile=BUILTIN_PROFILES["supervised"],
        approver=approver,
    )
    result = await runtime.arun_tool_loop("go", on_event=events.append)
    assert [r.success for r in result.tool_call_history] == [True, True]
    assert sorted(ran) == ["change", "look"]
    assert [r.tool_name for r in approver.requests] == ["change"]
    assert "side effects" in approver.requests[0].reason
    requested = [e for e in events if isinstance(e, ApprovalRequested)]
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(e.call_id, e.tool_name, e.iteration) for e in requested] == [("c1", "change", 1)]
    assert [(e.call_id, e.approved, e.by) for e in decided] == [("c1", True, "tester")]


async def test_a_denied_call_becomes_a_denied_record_the_model_sees() -> None:
    ran: list[str] = []
    registry = _registry(ran)
    llm = recording_llm(_calls("change"))
    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        llm,
        profile=BUILTIN_PROFILES["supervised"],
        approver=Approver(approved=False),
    )
    result = await runtime.arun_tool_loop("go")
    record = result.tool_call_history[0]
    assert record.error_kind is ErrorKind.DENIED
    assert record.error == "denied by tester: checked by a test"
    assert ran == []
    assert llm.requests[1].messages[-1].is_error


async def test_an_approval_that_times_out_is_denied_by_default() -> None:
    ran: list[str] = []
    registry = _registry(ran)
    never = asyncio.Event()
    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        recording_llm(_calls("change")),
        profile=BUILTIN_PROFILES["supervised"],
        approver=Approver(True, delay=never),
        approval_timeout_s=0.05,
    )
    events: list[RunEvent] = []
    result = await runtime.arun_tool_loop("go", on_event=events.append)
    record = result.tool_call_history[0]
    assert record.error_kind is ErrorKind.DENIED
    assert "no decision within 0.05s" in (record.error or "")
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(d.approved, d.by) for d in decided] == [(False, "timeout")]


async def test_without_an_approver_calls_that_need_approval_are_denied() -> None:
    registry = _registry([])
    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        recording_llm(_calls("change")),
        profile=BUILTIN_PROFILES["supervised"],
    )
    result = await runtime.arun_tool_loop("go")
    assert result.tool_call_history[0].error_kind is ErrorKind.DENIED


async def test_an_approver_that_raises_denies() -> None:
    registry = _registry([])

    async def broken(request: ApprovalRequest) -> ApprovalDecision:
        raise RuntimeError("approval service down")

    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        recording_llm(_calls("change")),
        profile=BUILTIN_PROFILES["supervised"],
        approver=broken,
    )
    result = await runtime.arun_tool_loop("go")
    assert "approval service down" in (result.tool_call_history[0].error or "")


def test_decorated_tools_can_declare_side_effects() -> None:
    registry = _registry([])
    assert {s.name: s.side_effects for s in registry.specs()} == {"look": False, "change": True}


@pytest.mark.parametrize("name", ["full_auto", "supervised", "read_only"])
def test_every_builtin_profile_allows_tools_without_side_effects(name: str) -> None:
    assert BUILTIN_PROFILES[name].decide(ToolSpec("read")) is Decision.ALLOW


async def test_run_started_names_only_the_tools_the_model_is_offered() -> None:
    ran: list[str] = []
    registry = _registry(ran)
    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        recording_llm([LLMResponse("nothing to do")]),
        profile=BUILTIN_PROFILES["read_only"],
    )
    events: list[RunEvent] = []
    await runtime.arun_tool_loop("go", on_event=events.append)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.tool_names == ("look",)  # change has side effects: read_only hides it
    assert [s.name for s in runtime.offered_specs()] == ["look"]
