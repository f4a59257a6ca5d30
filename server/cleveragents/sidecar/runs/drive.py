"""Driving one run's loop to its terminal event, whatever ends it (kept out of the manager)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from cleveragents.tool import (
    LLMCallError,
    Resumption,
    RunCancelled,
    RunFailed,
    RunStarted,
    StopReason,
    ToolCallingRuntime,
    ToolCallRunResult,
)

if TYPE_CHECKING:
    from cleveragents.sidecar.assembly import AssembledRun
    from cleveragents.sidecar.runs.run import Run

__all__ = ["drive"]


async def drive(run: Run, assembled: AssembledRun, resume: Resumption | None = None) -> None:
    """Run ``run``'s loop (from its log, with ``resume``); every way out logs a terminal
    event: the loop's own, or one written here when the loop never got to it."""
    run.begun = True
    runtime = assembled.runtime
    try:
        await runtime.arun_tool_loop(
            run.request.prompt,
            assembled.context,
            run_id=run.run_id,
            timeout_s=assembled.timeout_s,
            on_event=run.emit,
            resume=resume,
        )
    except asyncio.CancelledError as exc:
        if not run.ended:  # cancelled before the loop began
            _ensure_started(run, runtime)
            reason = str(exc.args[0]) if exc.args and exc.args[0] else "cancelled"
            run.emit(RunCancelled(reason, _empty_result(run.run_id, StopReason.CANCELLED)))
    except LLMCallError:
        pass  # the loop has logged run_failed
    except Exception as exc:
        run.logger.exception("run crashed")
        if not run.ended:
            _ensure_started(run, runtime)
            result = _empty_result(run.run_id, StopReason.ERROR)
            run.emit(RunFailed(f"internal error: {exc}", result, None))


def _ensure_started(run: Run, runtime: ToolCallingRuntime) -> None:
    """Log ``run_started`` for a run whose loop never got to: every log begins with it."""
    if run.log.frames:
        return
    names = tuple(spec.name for spec in runtime.offered_specs())
    run.emit(RunStarted(run.run_id, run.request.prompt, names, runtime.max_iterations))


def _empty_result(run_id: str, stop_reason: StopReason) -> ToolCallRunResult:
    return ToolCallRunResult("", (), 0, False, stop_reason=stop_reason, run_id=run_id)
