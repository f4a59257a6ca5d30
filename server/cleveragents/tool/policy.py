"""Automation profiles: which tools run freely, which need approval, which are forbidden."""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cleveragents.tool.spec import ToolSpec

__all__ = [
    "BUILTIN_PROFILES",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AutomationProfile",
    "Decision",
]


class Decision(enum.StrEnum):
    """What a profile says about one tool."""

    ALLOW = "allow"
    ASK = "ask"
    FORBID = "forbid"


@dataclass(frozen=True, slots=True)
class AutomationProfile:
    """Rules by tool name (glob patterns) and by the ``side_effects`` flag of a ``ToolSpec``.

    The first rule that matches wins, in this order: ``forbid``, ``ask``, ``allow`` patterns,
    then ``side_effects`` for tools that have them, then ``default``.
    """

    name: str
    allow: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()
    side_effects: Decision = Decision.ALLOW
    default: Decision = Decision.ALLOW

    def decide(self, spec: ToolSpec) -> Decision:
        """The decision for ``spec``."""
        for patterns, decision in (
            (self.forbid, Decision.FORBID),
            (self.ask, Decision.ASK),
            (self.allow, Decision.ALLOW),
        ):
            if patterns and any(fnmatch.fnmatchcase(spec.name, p) for p in patterns):
                return decision
        return self.side_effects if spec.side_effects else self.default


#: The profiles every sidecar knows: no questions asked; approval for anything with side
#: effects (the default when a run names no profile); nothing with side effects at all.
BUILTIN_PROFILES: Mapping[str, AutomationProfile] = {
    "full_auto": AutomationProfile("full_auto"),
    "supervised": AutomationProfile("supervised", side_effects=Decision.ASK),
    "read_only": AutomationProfile("read_only", side_effects=Decision.FORBID),
}


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool call waiting for someone's decision, and why it has to wait."""

    call_id: str
    tool_name: str
    inputs: Mapping[str, Any]
    iteration: int
    reason: str


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """Someone's answer to an ``ApprovalRequest``; ``by`` says how (or ``timeout``),
    ``identity`` which caller answered, when the host knows callers apart."""

    approved: bool
    reason: str = ""
    by: str = field(default="")
    identity: str = ""


#: Decides approval requests; may take as long as it likes (the runtime bounds the wait).
Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
