"""Per-run budgets beyond the iteration limit."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunBudget"]


@dataclass(frozen=True, slots=True)
class RunBudget:
    """Limits a run stops at, each ending it with its own ``stop_reason`` and partial result.

    ``max_tool_calls``: calls executed over the run; calls requested beyond it are closed as
    ``denied`` records and the run stops (``tool_call_budget``). ``max_total_tokens``: input
    plus output tokens reported by the LLM; the response that crosses it is the last
    (``token_budget``). ``max_concurrent_tool_calls`` bounds the parallel calls of one
    response. ``summarize_on_stop``: when a budget or the iteration limit stops the run, make
    one last LLM call without tools so the model can sum up what it has.
    """

    max_tool_calls: int | None = None
    max_total_tokens: int | None = None
    max_concurrent_tool_calls: int | None = None
    summarize_on_stop: bool = False

    def __post_init__(self) -> None:
        for name in ("max_tool_calls", "max_total_tokens", "max_concurrent_tool_calls"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
