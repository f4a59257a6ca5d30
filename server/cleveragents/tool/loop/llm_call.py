"""One LLM call of the loop, ``DeltaRelay``, which turns its streamed deltas into events, and
the time limit a run runs under (kept out of ``runtime.py``).

The relay is the call's ``LLMRequest.deltas`` sink: each ``ResponseDelta`` becomes an
``LLMDelta`` event, numbered within the call, emitted at once (before the call's
``LLMResponded``). A caller that runs in a worker thread (a plain ``call``) may feed it from
there: its deltas are handed to the event loop's thread, in order. Deltas that come after the
call returned are dropped, so ``LLMResponded`` is always the call's last word.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cleveragents.tool.budget import RunBudget
from cleveragents.tool.errors import LLMCallError
from cleveragents.tool.events import EventSink, LLMDelta
from cleveragents.tool.llm import LLMCaller
from cleveragents.tool.loop.checks import response_problem
from cleveragents.tool.loop.loop_state import LoopState
from cleveragents.tool.messages import LLMRequest, LLMResponse, ResponseDelta, StructuredRequest
from cleveragents.tool.output import OutputSchema
from cleveragents.tool.records import StopReason

__all__ = ["DeltaRelay", "call_llm", "run_limit"]

log = logging.getLogger("cleveragents.tool.loop")


class DeltaRelay:
    """The deltas sink of one LLM call: each delta becomes an ``LLMDelta`` event; never
    blocks, never raises."""

    __slots__ = ("_emit", "_loop", "_read", "_thread", "closed", "count", "iteration")

    def __init__(
        self, emit: EventSink, iteration: int, read: Callable[[], bool] | None = None
    ) -> None:
        self._emit = emit
        self._read = read
        self.iteration = iteration
        #: How many deltas became events.
        self.count = 0
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def __call__(self, delta: ResponseDelta) -> None:
        if self.closed:
            return
        if threading.get_ident() != self._thread:
            # RuntimeError: the event loop has closed, so the run is over.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._relay, delta)
            return
        self._relay(delta)

    @property
    def read(self) -> bool:
        """Whether the run's consumer reads deltas now (``deltas_read``: always, unless its
        ``read`` says otherwise)."""
        return self._read is None or self._read()

    def close(self) -> None:
        """The call returned: later deltas are dropped."""
        self.closed = True

    def _relay(self, delta: ResponseDelta) -> None:
        if self.closed or not isinstance(delta, ResponseDelta):
            return
        event = LLMDelta(
            self.iteration, self.count, delta.text, delta.tool_call_index, delta.tool_call_id,
            delta.tool_name, delta.arguments, delta.usage,
        )  # fmt: skip
        self.count += 1
        try:
            self._emit(event)
        except Exception:  # the caller must not see the consumer's failure
            log.exception("an LLMDelta consumer raised")


async def call_llm(
    caller: LLMCaller,
    is_async: bool,
    state: LoopState,
    tools: Sequence[Mapping[str, Any]],
    iteration: int,
    emit: EventSink,
    max_calls: int | None,
    output: OutputSchema | None = None,
) -> LLMResponse:
    """Make the ``iteration``-th LLM call, its deltas relayed to ``emit`` as they come;
    ``output`` is the run's output schema, which the request carries to the caller.

    Raises ``LLMCallError`` when the caller raises or answers something that is not a
    usable response.
    """
    relay = DeltaRelay(emit, iteration, state.deltas_read)
    if output is None:
        request = LLMRequest(state.messages, tools, iteration, relay)
    else:
        request = StructuredRequest(state.messages, tools, iteration, relay, output)
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
    finally:
        relay.close()
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
