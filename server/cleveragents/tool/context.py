"""``ToolActorContext``: the environment a run executes in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cleveragents.tool.records import ToolCallRecord

__all__ = ["ToolActorContext"]


@dataclass(slots=True)
class ToolActorContext:
    """Who is running, where, and with which resources; collects every record as the loop runs.

    ``sandbox_root`` and ``resource_bindings`` are threaded into every tool's inputs. The
    context is deliberately mutable: ``tool_call_history`` is appended to as calls complete,
    so the history survives even when a run fails part-way.
    """

    plan_id: str = ""
    phase: str = ""
    sandbox_root: str | None = None
    automation_profile: str = ""
    resource_bindings: dict[str, Any] = field(default_factory=dict)
    project_resources: dict[str, Any] = field(default_factory=dict)
    tool_call_history: list[ToolCallRecord] = field(default_factory=list)

    def threaded_inputs(self) -> dict[str, Any]:
        """The keys the runtime adds to every tool's inputs (empty when there are none)."""
        keys: dict[str, Any] = {}
        if self.sandbox_root:
            keys["sandbox_root"] = self.sandbox_root
        if self.resource_bindings:
            keys["resource_bindings"] = self.resource_bindings
        return keys
