"""The refusals a new run meets before it is admitted: a stopping sidecar, a failing store, a
full sidecar, and run ids that are too long or taken (kept out of ``manager.py``)."""

from __future__ import annotations

import grpc
import structlog

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.runs.log import LogStats

__all__ = ["MAX_RUN_ID", "refuse_unless_open", "refuse_when_full"]

log = structlog.get_logger("cleveragents.sidecar.runs")

#: The longest run id a client may choose.
MAX_RUN_ID = 128


def refuse_unless_open(accepting: bool, store_failure: str | None, run_id: str) -> None:
    """``UNAVAILABLE`` while the sidecar stops or its store cannot write; ``INVALID_ARGUMENT``
    for a run id longer than ``MAX_RUN_ID``."""
    if not accepting:
        raise SidecarError(grpc.StatusCode.UNAVAILABLE, "the sidecar is shutting down")
    if store_failure is not None:
        raise SidecarError(
            grpc.StatusCode.UNAVAILABLE,
            f"the run store cannot write ({store_failure}); new runs are refused "
            "until it works again: retry later",
        )
    if len(run_id) > MAX_RUN_ID:
        raise SidecarError.invalid(f"run_id is longer than {MAX_RUN_ID} characters")


def refuse_when_full(live: int, limit: int, stats: LogStats) -> None:
    """``RESOURCE_EXHAUSTED`` (counted and logged) when ``live`` runs fill ``limit``."""
    if live < limit:
        return
    # A burst over the limit must be visible on the server too: a line and a count.
    stats.refused_runs += 1
    log.warning(
        "run refused", reason="max_concurrent_runs", live_runs=live,
        refused_total=stats.refused_runs,
    )  # fmt: skip
    raise SidecarError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"the sidecar already runs {live} runs, its max_concurrent_runs; retry later",
    )
