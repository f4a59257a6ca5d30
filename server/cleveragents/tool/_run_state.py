"""The mutable bookkeeping of one run, kept apart from the loop's logic in ``runtime.py``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.governance import CallGate
from cleveragents.tool.messages import LLMResponse, Message, ToolCall, Usage
from cleveragents.tool.records import StopReason, ToolCallRecord, ToolCallRunResult

__all__ = ["RunState"]

#: Stop reasons that mean a limit ended the run (``terminated_by_limit``).
_LIMITS = frozenset(
    {StopReason.MAX_ITERATIONS, StopReason.TOOL_CALL_BUDGET, StopReason.TOKEN_BUDGET}
)


class RunState:
    """Conversation, history, usage and the batch of tool calls currently in flight."""

    __slots__ = (
        "batch_calls",
        "batch_iteration",
        "batch_records",
        "batch_started",
        "context",
        "gate",
        "history",
        "iterations",
        "messages",
        "run_id",
        "tasks",
        "texts",
        "tool_calls",
        "usage",
    )

    def __init__(self, run_id: str, context: ToolActorContext) -> None:
        self.run_id = run_id
        self.context = context
        self.messages: list[Message] = []
        self.history: list[ToolCallRecord] = []
        self.texts: list[str] = []
        self.usage = Usage()
        self.iterations = 0
        self.tool_calls = 0
        self.gate: CallGate | None = None
        self.batch_calls: Sequence[ToolCall] = ()
        self.batch_iteration = 0
        self.batch_records: list[ToolCallRecord | None] = []
        self.batch_started: list[tuple[Mapping[str, Any], float] | None] = []
        self.tasks: list[asyncio.Task[None]] = []

    def add_response(self, response: LLMResponse) -> None:
        """Account for one LLM response's text and usage."""
        if response.content:
            self.texts.append(response.content)
        if response.usage is not None:
            self.usage = self.usage + response.usage

    def start_batch(self, calls: Sequence[ToolCall], iteration: int) -> None:
        """Begin tracking the tool calls of one LLM response."""
        self.batch_calls = calls
        self.batch_iteration = iteration
        self.batch_records = [None] * len(calls)
        self.batch_started = [None] * len(calls)
        self.tasks = []

    def mark_started(self, index: int, inputs: Mapping[str, Any]) -> None:
        """Remember that call ``index`` started, with which inputs and when."""
        self.batch_started[index] = (inputs, time.time())

    def end_batch(self) -> list[ToolCallRecord]:
        """Append the batch's records, in request order, to the run's and context's history."""
        records = [r for r in self.batch_records if r is not None]
        self.history.extend(records)
        self.context.tool_call_history.extend(records)
        self.batch_calls = ()
        self.batch_records = []
        self.batch_started = []
        self.tasks = []
        return records

    def result(self, stop_reason: StopReason, content: str | None = None) -> ToolCallRunResult:
        """The run's result so far; partial runs join the assistant texts with newlines."""
        return ToolCallRunResult(
            content="\n".join(self.texts) if content is None else content,
            tool_call_history=tuple(self.history),
            iterations=self.iterations,
            terminated_by_limit=stop_reason in _LIMITS,
            usage=self.usage,
            stop_reason=stop_reason,
            run_id=self.run_id,
        )
