"""The loop of a resumed run: its log replayed, its calls in flight settled, then on as usual.

Kept apart from ``runtime.py`` (which calls it for ``arun_tool_loop(resume=...)``): what a
call in flight at the stop becomes is decided here. A call that never began executing (not
started, or waiting for an approval) simply runs, asked again; one that may have been
executing runs again only if its tool is idempotent, and otherwise ends with a failed record
(``INTERRUPTED``) the model sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cleveragents.tool.events import EventSink, RunResumed
from cleveragents.tool.loop.batch import ToolBatch
from cleveragents.tool.loop.resume import INTERRUPTED, PendingBatch, Resumption, replay
from cleveragents.tool.loop.run_state import RunState
from cleveragents.tool.records import StopReason, ToolCallRunResult
from cleveragents.tool.router import route_call

if TYPE_CHECKING:
    from cleveragents.tool.execution.registry import ToolRegistry
    from cleveragents.tool.loop.runtime import ToolCallingRuntime

__all__ = ["interrupted_calls", "resume_loop"]


async def resume_loop(
    runtime: ToolCallingRuntime,
    state: RunState,
    tools: Sequence[Mapping[str, Any]],
    emit: EventSink,
    resume: Resumption,
    left_s: float | None = None,
) -> ToolCallRunResult:
    """Rebuild ``state`` from ``resume``'s events, log ``RunResumed`` and finish the run;
    ``left_s`` is the time its limits leave it (negative: it ran out while the sidecar was
    down)."""
    route = runtime.router.route if runtime.router is not None else route_call
    budget = runtime.budget
    at = replay(
        resume.events, state, route=route, budget=budget, max_iterations=runtime.max_iterations,
        answers=runtime.answers,
    )  # fmt: skip
    pending = at.batch
    interrupted = [] if pending is None else interrupted_calls(pending, runtime.registry)
    rerun = [] if pending is None else [i for i in pending.in_flight() if i not in interrupted]
    emit(
        RunResumed(
            resume.after_sequence, state.iterations, resume.reason, tuple(rerun),
            tuple(interrupted),
        )
    )  # fmt: skip
    if left_s is not None and left_s <= 0:
        # The deadline or wall-clock budget passed while the sidecar was down: wait for the
        # runtime's timeout, already due, to end the run before anything runs again.
        await asyncio.Event().wait()
    if at.settled is not None:
        return at.settled
    if at.final is not None:
        return state.result(at.stop or StopReason.FINAL_ANSWER, content=at.final)
    if pending is not None:
        batch = state.batch = ToolBatch(
            pending.calls, pending.iteration, runner=runtime.runner, context=state.context,
            emit=emit, gate=state.gate, allowed=pending.allowed, over_budget=pending.refusal,
            run_id=state.run_id,
        )  # fmt: skip
        batch.resume(
            pending.records, logged_starts=frozenset(pending.started),
            approved=frozenset(pending.approved), interrupted=interrupted, reason=INTERRUPTED,
        )  # fmt: skip
        await batch.run(
            parallel=runtime.parallel_tool_calls, max_concurrent=budget.max_concurrent_tool_calls
        )
        runtime._finish_batch(state, batch)
        at.stop = pending.stop
    if at.stop is None:
        return await runtime._loop(state, tools, emit, state.iterations + 1)
    if budget.summarize_on_stop:
        return await runtime._summarize(state, at.stop, emit)
    return state.result(at.stop)


def interrupted_calls(pending: PendingBatch, registry: ToolRegistry) -> list[str]:
    """The calls in flight at the stop whose tools are not declared idempotent."""
    names = {call.id: call.name for call in pending.calls}
    out = []
    for call_id in pending.in_flight():
        entry = registry.get(names[call_id])
        if entry is None or not entry.spec.idempotent:
            out.append(call_id)
    return out
