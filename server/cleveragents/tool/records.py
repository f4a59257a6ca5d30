"""What a run produces: one ``ToolCallRecord`` per tool call and a ``ToolCallRunResult``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cleveragents.tool.frozen import quick_init
from cleveragents.tool.messages import Usage
from cleveragents.tool.outputjson import OutputText

__all__ = ["ErrorKind", "StopReason", "ToolCallRecord", "ToolCallRunResult"]


class ErrorKind(enum.StrEnum):
    """Why a tool call failed."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    TIMEOUT = "timeout"
    EXCEPTION = "exception"
    CANCELLED = "cancelled"
    DENIED = "denied"


class StopReason(enum.StrEnum):
    """Why a run ended."""

    FINAL_ANSWER = "final_answer"
    MAX_ITERATIONS = "max_iterations"
    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    ERROR = "error"
    TOOL_CALL_BUDGET = "tool_call_budget"
    TOKEN_BUDGET = "token_budget"
    WALL_CLOCK_BUDGET = "wall_clock_budget"
    MAX_OUTPUT_RETRIES = "max_output_retries"
    REFUSAL = "refusal"


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """The outcome of one tool call, successful or not.

    ``inputs`` are what the tool received, context keys included; ``output`` is a JSON object
    (``{}`` on failure); ``started_at`` is a Unix timestamp in seconds. The output's JSON text
    is made once, on first use (:meth:`output_json`), and kept with the record: a large output
    is then not encoded again for each event, result and model message that carries it.
    """

    tool_name: str
    inputs: Mapping[str, Any]
    output: Mapping[str, Any]
    duration_ms: float
    success: bool
    error: str | None
    iteration: int
    call_id: str = ""
    error_kind: ErrorKind | None = None
    started_at: float = 0.0
    #: Not copied by ``dataclasses.replace``: a record with another output gets its own text.
    _text: OutputText | None = field(default=None, init=False, repr=False, compare=False)

    def output_json(self) -> str:
        """The output as ``json.dumps(output, ensure_ascii=False)`` writes it (what the model
        reads); ``TypeError`` or ``ValueError`` for an output that is not JSON."""
        return self.output_text().spaced

    def output_json_compact(self) -> str:
        """The output as compact JSON text (what the wire carries)."""
        return self.output_text().compact(self.output)

    def output_text(self) -> OutputText:
        """The output's text, made on first use and kept."""
        text = self._text
        if text is None:
            text = OutputText.of(self.output)
            object.__setattr__(self, "_text", text)
        return text

    def known_output_size(self) -> int:
        """At least how many bytes the compact output text has, as far as it is known without
        encoding the output (0: not known): a frame that must stay under a limit checks it."""
        text = self._text
        return 0 if text is None else text.compact_length() or 0

    def with_text(self, text: OutputText) -> ToolCallRecord:
        """This record, keeping ``text`` (made from its output) for its output's JSON."""
        object.__setattr__(self, "_text", text)
        return self


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallRunResult:
    """The end of a run: the final (or partial) text and every record, in order.

    With an output schema, ``output_json`` is the final answer's JSON text once it validated
    ("" otherwise), and ``output_error`` why the last answer was refused when
    ``max_output_retries`` ran out.
    """

    content: str
    tool_call_history: tuple[ToolCallRecord, ...]
    iterations: int
    terminated_by_limit: bool
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = StopReason.FINAL_ANSWER
    run_id: str = ""
    output_json: str = ""
    output_error: str = ""
