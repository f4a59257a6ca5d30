"""One LLM call of the loop, and the time limit a run runs under (kept out of ``runtime.py``)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from cleveragents.tool.budget import RunBudget
from cleveragents.tool.errors import LLMCallError
from cleveragents.tool.llm import LLMCaller
from cleveragents.tool.loop.checks import response_problem
from cleveragents.tool.loop.run_state import RunState
from cleveragents.tool.messages import LLMRequest, LLMResponse
from cleveragents.tool.records import StopReason

__all__ = ["call_llm", "run_limit"]


async def call_llm(
    caller: LLMCaller,
    request: LLMRequest,
    is_async: bool,
    state: RunState,
    max_calls: int | None,
) -> LLMResponse:
    """``caller``'s response to ``request``; ``LLMCallError`` when it raises or returns
    something the loop cannot use."""
    iteration = request.iteration
    try:
        if is_async:
            response: Any = await caller.call(request)  # type: ignore[misc]
        else:
            response = await asyncio.to_thread(caller.call, request)
            if inspect.isawaitable(response):
                response = await response
    except Exception as exc:
        raise LLMCallError(
            f"the LLM call of iteration {iteration} failed: {type(exc).__name__}: {exc}",
            iteration=iteration,
            result=state.result(StopReason.ERROR),
        ) from exc
    problem = response_problem(response, max_calls)
    if problem is not None:
        raise LLMCallError(
            f"the LLM caller of iteration {iteration} {problem}",
            iteration=iteration,
            result=state.result(StopReason.ERROR),
        )
    return response  # type: ignore[no-any-return]


def run_limit(
    budget: RunBudget, timeout_s: float | None
) -> tuple[float | None, bool, StopReason, str]:
    """The earlier of the deadline (it cancels) and the wall-clock budget (a limit): its
    seconds (``None``: neither), whether it is the budget, its stop reason and its name."""
    wall_clock = budget.max_wall_clock_s
    by_budget = wall_clock is not None and (timeout_s is None or wall_clock <= timeout_s)
    if by_budget:
        return wall_clock, True, StopReason.WALL_CLOCK_BUDGET, "wall-clock budget (max_wall_clock)"
    return timeout_s, False, StopReason.DEADLINE, "deadline"
