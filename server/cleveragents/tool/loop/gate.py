"""The gate between a validated tool call and its execution: automation profile, approvals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from cleveragents.tool.events import ApprovalDecided, ApprovalRequested, EventSink
from cleveragents.tool.messages import ToolCall
from cleveragents.tool.policy import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    AutomationProfile,
    Decision,
)
from cleveragents.tool.spec import ToolSpec

__all__ = ["CallGate"]


class CallGate:
    """Applies an automation profile to one run's calls, asking ``approver`` when it must.

    A call that needs approval emits ``ApprovalRequested``, waits at most ``timeout_s`` for
    the approver, and emits ``ApprovalDecided``. With no approver, or when the wait times out,
    ``on_timeout`` decides (deny unless configured otherwise). ``help`` words the event's
    ``how_to_answer``.
    """

    __slots__ = ("_approver", "_emit", "help", "on_timeout", "profile", "timeout_s")

    def __init__(
        self,
        profile: AutomationProfile,
        approver: Approver | None,
        emit: EventSink,
        *,
        timeout_s: float,
        on_timeout: bool = False,
        help: Callable[[ApprovalRequest], str] | None = None,
    ) -> None:
        self.profile = profile
        self.help = help
        self._approver = approver
        self._emit = emit
        self.timeout_s = timeout_s
        self.on_timeout = on_timeout

    async def __call__(
        self, call: ToolCall, inputs: Mapping[str, Any], spec: ToolSpec, iteration: int
    ) -> str | None:
        decision = self.profile.decide(spec)
        if decision is Decision.ALLOW:
            return None
        if decision is Decision.FORBID:
            return f"tool {spec.name!r} is forbidden by automation profile {self.profile.name!r}"
        why = f"automation profile {self.profile.name!r} asks before running " + (
            "tools with side effects" if spec.side_effects else f"{spec.name!r}"
        )
        request = ApprovalRequest(call.id, spec.name, inputs, iteration, why)
        how = self.help(request) if self.help is not None else ""
        self._emit(ApprovalRequested(call.id, spec.name, inputs, iteration, why, how))
        answer = await self._ask(request)
        self._emit(
            ApprovalDecided(
                call.id, answer.approved, answer.reason, answer.by, iteration, answer.identity
            )
        )
        if answer.approved:
            return None
        return f"denied by {answer.by}" + (f": {answer.reason}" if answer.reason else "")

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        if self._approver is None:
            return ApprovalDecision(self.on_timeout, "no one is there to approve it", "policy")
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._approver(request)
        except TimeoutError:
            return ApprovalDecision(
                self.on_timeout, f"no decision within {self.timeout_s:g}s", "timeout"
            )
        except Exception as exc:  # an approver that fails cannot approve
            return ApprovalDecision(False, f"the approver failed: {exc}", "approver")
