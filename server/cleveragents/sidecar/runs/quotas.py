"""Run quotas per principal: how many runs one caller may have live, and start per minute.

A principal is whoever calls (an identity's name; ``""`` while the sidecar has one shared
token). Its policy's ``max_concurrent_runs`` counts its runs that have not finished: a run
stops counting once its terminal event is stored, the moment its client can see it ended.
``runs_per_minute`` is a token bucket of that many tokens, refilled at ``runs_per_minute / 60``
per second: a burst of that many starts, then one every ``60 / runs_per_minute`` seconds.
A run taken back from a durable store (resumed, adopted, waiting for its client) counts
against its owner's concurrency quota like one started here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from cleveragents.sidecar.errors import SidecarError

if TYPE_CHECKING:
    from cleveragents.sidecar.config import Policy
    from cleveragents.sidecar.runs.run import Run

__all__ = ["RunQuotas"]

log = structlog.get_logger("cleveragents.sidecar.runs")


class _Bucket:
    """``capacity`` tokens, refilled continuously at ``rate`` per second."""

    __slots__ = ("capacity", "rate", "tokens", "updated")

    def __init__(self, per_minute: int, now: float) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.tokens, self.updated = self.capacity, now

    def refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now


class RunQuotas:
    """The live runs and start tokens of each principal, checked as a run is admitted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: Each principal's runs that counted against a concurrency quota when admitted.
        self._live: dict[str, list[Run]] = {}
        self._principal_of: dict[str, str] = {}
        self._buckets: dict[tuple[str, int], _Bucket] = {}

    def check(self, principal: str, policy: Policy) -> _Bucket | None:
        """Raise ``RESOURCE_EXHAUSTED`` if ``principal`` may not start a run now; the bucket
        to take a token from once the run is admitted (``None``: no rate quota)."""
        who = f"principal {principal!r}" if principal else "this client"
        limit = policy.max_concurrent_runs
        if limit:
            runs = self._live.get(principal, [])
            runs[:] = [run for run in runs if not run.finished]
            if len(runs) >= limit:
                log.warning("run refused", reason=f"{policy.where}.max_concurrent_runs",
                            principal=principal, live_runs=len(runs))  # fmt: skip
                raise SidecarError.quota(
                    f"{who} already has {len(runs)} live run(s), as many as "
                    f"{policy.where}.max_concurrent_runs = {limit} allows: retry once one ends"
                )
        per_minute = policy.runs_per_minute
        if not per_minute:
            return None
        now = self._clock()
        bucket = self._buckets.get((principal, per_minute))
        if bucket is None:
            bucket = self._buckets[(principal, per_minute)] = _Bucket(per_minute, now)
        bucket.refill(now)
        if bucket.tokens < 1.0:
            wait_s = (1.0 - bucket.tokens) / bucket.rate
            log.warning("run refused", reason=f"{policy.where}.runs_per_minute",
                        principal=principal)  # fmt: skip
            raise SidecarError.quota(
                f"{who} started more than {policy.where}.runs_per_minute = {per_minute} runs "
                f"in the last minute: retry in {wait_s:.1f} s"
            )
        return bucket

    def admit(self, run: Run, principal: str, policy: Policy, bucket: _Bucket | None) -> None:
        """Count ``run``, which ``check`` allowed, against ``principal``'s quotas."""
        if bucket is not None:
            bucket.tokens -= 1.0
        if policy.max_concurrent_runs:
            self._live.setdefault(principal, []).append(run)
            self._principal_of[run.run_id] = principal

    def count(self, run: Run, principal: str, policy: Policy | None) -> None:
        """Count ``run``, taken back from the store (resumed at a restart, adopted, or waiting
        for its client), against ``principal``'s concurrency quota (``policy``'s; ``None``: it
        is gone) without refusing it: it exists already, and new runs are refused while it
        lives. No start token is taken."""
        if policy is not None:
            self.admit(run, principal, policy, None)

    def release(self, run: Run) -> None:
        """``run`` is over: forget it (its finish already stopped it counting)."""
        principal = self._principal_of.pop(run.run_id, None)
        runs = self._live.get(principal) if principal is not None else None
        if principal is None or runs is None:
            return
        runs[:] = [other for other in runs if other is not run and not other.finished]
        if not runs:
            del self._live[principal]
