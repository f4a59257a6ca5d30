"""The project's exception hierarchy, rooted in :class:`ToolRuntimeError`.

Tool failures are never exceptions: they become failed records. Exceptions are kept for
misuse of the API and for runs that cannot go on (an LLM caller that raises).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cleveragents.tool.records import ToolCallRecord, ToolCallRunResult

__all__ = [
    "LLMCallError",
    "ScriptExhaustedError",
    "ToolDeniedError",
    "ToolError",
    "ToolRuntimeError",
]


class ToolRuntimeError(Exception):
    """Root of every exception this project raises on purpose."""


class ToolError(ToolRuntimeError):
    """Raised by a tool handler to fail its call with exactly this message.

    Any other exception fails the call too, with ``Type: message`` as the record's error.
    """


class ToolDeniedError(ToolError):
    """Raised by a tool handler that refuses the call (a path outside its sandbox, say).

    The record's ``error_kind`` is ``denied`` and its error is this message.
    """


class LLMCallError(ToolRuntimeError):
    """The LLM caller raised, so the run cannot continue.

    Carries the iteration that failed and the partial result, whose ``tool_call_history``
    holds every record produced before the failure. The original exception is ``__cause__``.
    """

    def __init__(self, message: str, *, iteration: int, result: ToolCallRunResult) -> None:
        super().__init__(message)
        self.iteration = iteration
        self.result = result

    @property
    def tool_call_history(self) -> tuple[ToolCallRecord, ...]:
        """The records produced before the LLM call failed."""
        return self.result.tool_call_history


class ScriptExhaustedError(ToolRuntimeError):
    """A :class:`ScriptedLLMCaller` was asked for more responses than it was given."""
