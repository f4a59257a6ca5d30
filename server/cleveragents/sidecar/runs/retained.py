"""``RetainedRuns``: the finished runs a sidecar keeps for ``GetRun``/``WatchRun``, oldest
first, forgotten in time: beyond a count, a total size of their logs, or an age."""

from __future__ import annotations

import collections
import time

from cleveragents.sidecar.runs.run import Run
from cleveragents.sidecar.runs.store import EventStore

__all__ = ["RetainedRuns"]


class RetainedRuns:
    """Finished runs by id, oldest first, with the size of their logs together."""

    def __init__(self, store: EventStore, *, max_runs: int, ttl_s: float, max_bytes: int) -> None:
        self._store = store
        self.max_runs = max_runs
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        #: The size of the retained runs' logs together (their frames: all a finished run keeps).
        self.bytes = 0
        self._runs: collections.OrderedDict[str, Run] = collections.OrderedDict()

    def get(self, run_id: str) -> Run | None:
        """The retained run ``run_id``, if kept."""
        return self._runs.get(run_id)

    def runs(self) -> list[Run]:
        """The retained runs, oldest first."""
        return list(self._runs.values())

    def keep(self, run: Run) -> None:
        """Keep ``run`` (it has ended) as the newest."""
        self._runs[run.run_id] = run
        self.bytes += _size(run)

    def pop(self, run_id: str) -> Run | None:
        """Stop keeping ``run_id`` (its store rows stay); the run, if it was kept."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            self.bytes -= _size(run)
        return run

    def expire(self) -> None:
        """Forget the oldest runs beyond the count, the byte budget, or the age (their store
        rows too)."""
        horizon = time.time() - self.ttl_s
        while self._runs:
            oldest = next(iter(self._runs.values()))
            if (
                len(self._runs) <= self.max_runs
                and self.bytes <= self.max_bytes
                and (oldest.finished_at is None or oldest.finished_at > horizon)
            ):
                break
            self._runs.popitem(last=False)
            self.bytes -= _size(oldest)
            self._store.forget(oldest.run_id)


def _size(run: Run) -> int:
    """What a finished run's log holds, in bytes (its frames no longer change)."""
    return sum(map(len, run.log.frames))
