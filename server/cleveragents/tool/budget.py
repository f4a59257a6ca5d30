"""Per-run budgets beyond the iteration limit."""

from __future__ import annotations

from dataclasses import dataclass

from cleveragents.tool.records import StopReason

__all__ = ["BudgetStop", "RunBudget"]


@dataclass(frozen=True, slots=True)
class BudgetStop:
    """A budget that one response's calls reach: only the first ``allowed`` may run, the rest
    are denied with ``refusal``, and the run then ends with ``stop_reason``."""

    stop_reason: StopReason
    allowed: int
    refusal: str


@dataclass(frozen=True, slots=True)
class RunBudget:
    """Limits a run stops at, each ending it with its own ``stop_reason`` and partial result.

    ``max_tool_calls``: calls executed over the run; calls requested beyond it are closed as
    ``denied`` records and the run stops (``tool_call_budget``). ``max_total_tokens``: input
    plus output tokens reported by the LLM; the response that crosses it is the last
    (``token_budget``); calls that response asks for are closed as ``denied``.
    ``max_wall_clock_s``: seconds from the run's start; calls in flight then are closed as
    ``cancelled`` and the run stops (``wall_clock_budget``). Every budget, like the iteration
    limit, ends the run with ``RunCompleted`` and ``terminated_by_limit``.
    ``max_concurrent_tool_calls`` bounds the parallel calls of one response.
    ``summarize_on_stop``: when a budget other than the wall clock (whose time is up) or the
    iteration limit stops the run, make one last LLM call without tools so the model can sum
    up what it has.
    """

    max_tool_calls: int | None = None
    max_total_tokens: int | None = None
    max_concurrent_tool_calls: int | None = None
    summarize_on_stop: bool = False
    max_wall_clock_s: float | None = None

    def __post_init__(self) -> None:
        wall_clock = self.max_wall_clock_s
        if wall_clock is not None and (isinstance(wall_clock, bool) or not wall_clock > 0):
            raise ValueError(
                f"max_wall_clock_s must be a positive number or None, got {wall_clock!r}"
            )
        for name in ("max_tool_calls", "max_total_tokens", "max_concurrent_tool_calls"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")

    def check(self, tokens: int, calls_done: int, calls_asked: int) -> BudgetStop | None:
        """Whether a response asking ``calls_asked`` calls, after ``tokens`` tokens and
        ``calls_done`` calls, reaches the token or tool-call budget (``None``: neither)."""
        if self.max_total_tokens is not None and tokens >= self.max_total_tokens:
            return BudgetStop(
                StopReason.TOKEN_BUDGET,
                0,
                f"not run: the run's token budget (max_total_tokens={self.max_total_tokens}) "
                f"is used up: {tokens} tokens so far",
            )
        if self.max_tool_calls is not None and self.max_tool_calls - calls_done < calls_asked:
            return BudgetStop(
                StopReason.TOOL_CALL_BUDGET,
                max(self.max_tool_calls - calls_done, 0),
                f"not run: the run's tool-call budget (max_tool_calls={self.max_tool_calls}) "
                "is used up",
            )
        return None
