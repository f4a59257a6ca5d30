"""Driving one run's loop to its terminal event, whatever ends it (kept out of the manager)."""

from __future__ import annotations

import asyncio
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from cleveragents.sidecar.runs.run import Launchable
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
    from cleveragents.sidecar.runs.run import Run

__all__ = ["drain_live", "drive"]


async def drive(run: Run, assembled: Launchable, resume: Resumption | None = None) -> None:
    """Run ``run``'s loop (from its log, with ``resume``); every way out logs a terminal
    event: the loop's own, or one written here when the loop never got to it."""
    run.begin()
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


async def drain_live(
    live: Mapping[str, Run],
    hurry: asyncio.Event,
    grace_s: float,
    cancel: Callable[[Run, str], None],
) -> None:
    """Let the ``live`` runs finish within ``grace_s`` (or until ``hurry`` is set), then
    ``cancel`` the rest and wait for them to end."""
    tasks = [run.task for run in live.values() if run.task is not None]
    if not tasks:
        return
    ended = asyncio.ensure_future(asyncio.wait(tasks))
    hurried = asyncio.ensure_future(hurry.wait())
    await asyncio.wait((ended, hurried), timeout=grace_s, return_when=FIRST_COMPLETED)
    for waiter in (ended, hurried):
        waiter.cancel()
    await asyncio.gather(ended, hurried, return_exceptions=True)
    pending = [task for task in tasks if not task.done()]
    for run in list(live.values()):
        cancel(run, "the sidecar is shutting down")
    if pending:
        await asyncio.wait(pending)
