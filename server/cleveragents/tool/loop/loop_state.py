"""``LoopState``: the loop's bookkeeping of one run, kept apart from its logic in ``runtime.py``
(not the run's state as its clients see it: running, completed, failed or cancelled)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.events import Checkpoint
from cleveragents.tool.loop.batch import ToolBatch
from cleveragents.tool.loop.gate import CallGate
from cleveragents.tool.messages import LLMResponse, Message, Usage
from cleveragents.tool.records import StopReason, ToolCallRecord, ToolCallRunResult

__all__ = ["LoopState"]

#: Stop reasons that mean a limit ended the run (``terminated_by_limit``).
_LIMITS = frozenset(
    {
        StopReason.MAX_ITERATIONS,
        StopReason.TOOL_CALL_BUDGET,
        StopReason.TOKEN_BUDGET,
        StopReason.WALL_CLOCK_BUDGET,
        StopReason.MAX_OUTPUT_RETRIES,
    }
)


class LoopState:
    """Conversation, history, usage and the batch of tool calls currently in flight."""

    __slots__ = (
        "batch",
        "checkpoint",
        "context",
        "deltas_read",
        "gate",
        "history",
        "iterations",
        "messages",
        "output_retries",
        "run_id",
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
        #: Invalid answers sent back to the model for another try (see ``final.py``).
        self.output_retries = 0
        self.gate: CallGate | None = None
        #: Awaited before each tool call runs (``arun_tool_loop``'s ``checkpoint``).
        self.checkpoint: Checkpoint | None = None
        #: Whether anything reads the LLM's deltas now (``arun_tool_loop``'s ``deltas_read``).
        self.deltas_read: Callable[[], bool] | None = None
        #: The calls of the response being worked on, until their results are fed back.
        self.batch: ToolBatch | None = None

    def add_response(self, response: LLMResponse) -> None:
        """Account for one LLM response's text and usage."""
        if response.content:
            self.texts.append(response.content)
        if response.usage is not None:
            self.usage = self.usage + response.usage

    def add_records(self, records: Sequence[ToolCallRecord]) -> None:
        """Append a batch's records, in request order, to the run's and context's history."""
        self.history.extend(records)
        self.context.tool_call_history.extend(records)

    def result(
        self,
        stop_reason: StopReason,
        content: str | None = None,
        output_json: str = "",
        output_error: str = "",
    ) -> ToolCallRunResult:
        """The run's result so far; partial runs join the assistant texts with newlines."""
        return ToolCallRunResult(
            content="\n".join(self.texts) if content is None else content,
            tool_call_history=tuple(self.history),
            iterations=self.iterations,
            terminated_by_limit=stop_reason in _LIMITS,
            usage=self.usage,
            stop_reason=stop_reason,
            run_id=self.run_id,
            output_json=output_json,
            output_error=output_error,
        )
