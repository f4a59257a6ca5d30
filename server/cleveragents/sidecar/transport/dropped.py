"""Why a run dropped a watcher (it fell too far behind, or its client stopped reading), and
the status that ends such a watcher's call with the sequence to resume from."""

from __future__ import annotations

import grpc

from cleveragents.sidecar.runs import Run, WatchCursor
from cleveragents.sidecar.transport.calls import Context, end_if_lost

__all__ = ["dropped_reason", "end_if_dropped"]


def dropped_reason(cursor: WatchCursor, queue_size: int, stall_s: float) -> str | None:
    """Why the run dropped the watcher of ``cursor`` (``queue_size`` events behind, or a write
    waiting over ``stall_s``); ``None`` if it did not."""
    if not cursor.dropped or cursor.read_all:  # it was sent the whole log all the same
        return None
    if not cursor.stalled:
        return f"this watcher fell more than {queue_size} events behind"
    return f"this watcher's client stopped reading (a write waited over {stall_s:g} s)"


async def end_if_dropped(
    run: Run, cursor: WatchCursor, context: Context, queue_size: int, stall_s: float
) -> None:
    """End a watcher's call: ``RESOURCE_EXHAUSTED`` if its run dropped it."""
    await end_if_lost(run, context)
    if (why := dropped_reason(cursor, queue_size, stall_s)) is not None:
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{why} and was dropped; reconnect with after_sequence={cursor.cursor}",
        )
