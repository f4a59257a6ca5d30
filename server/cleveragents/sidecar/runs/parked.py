"""Session runs waiting for their client to re-attach (``session_reattach_s``).

A Session run parks when its client's stream goes away while the run lives (it keeps
running; the calls it sent the client stay owed), or when the sidecar restarts on a durable
store (its loop waits to be rebuilt around the client's re-declared tools). A re-attaching
``SessionStart`` takes it; if nobody does within the window, the window's timer ends it,
saying why. The timer is a loop callback, not a task: nothing is left running to await, and
taking it or closing cancels it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cleveragents.sidecar.runs.run import Run

__all__ = ["ParkedRun", "ParkedRuns"]


@dataclass
class ParkedRun:
    """A run waiting for its client: ``host`` is the client host the run still uses (its
    stream dropped while the sidecar lived), or ``None`` for a run rebuilt at re-attach
    (live at a restart)."""

    run: Run
    host: object | None
    timer: asyncio.TimerHandle
    #: Why it waits here: the ``run_resumed`` reason once its client re-attaches.
    reason: str = ""


class ParkedRuns:
    """The runs waiting for a re-attach, by id, each with the timer that ends its wait."""

    def __init__(self, window_s: float) -> None:
        #: How long a run waits (``session_reattach_s``); 0: runs do not park.
        self.window_s = window_s
        self._parked: dict[str, ParkedRun] = {}
        #: Set each time a run parks (whoever waits for one clears it first).
        self.parked_one = asyncio.Event()

    def park(
        self, run: Run, host: object | None, expire: Callable[[], None], reason: str = ""
    ) -> None:
        """Let ``run`` wait the window; ``expire`` runs if nobody takes it by then. ``reason``
        says why a run rebuilt from its log waits (a restart, an adoption, a
        hand-over)."""

        def expired() -> None:
            if self._parked.get(run.run_id) is entry:
                del self._parked[run.run_id]
                if not run.ended:
                    expire()

        timer = asyncio.get_running_loop().call_later(self.window_s, expired)
        entry = ParkedRun(run, host, timer, reason)
        self.unpark(run.run_id)
        run.park()
        self._parked[run.run_id] = entry
        self.parked_one.set()

    def entries(self) -> list[ParkedRun]:
        """The runs waiting now."""
        return list(self._parked.values())

    def get(self, run_id: str) -> ParkedRun | None:
        """The parked run ``run_id``, or ``None``."""
        return self._parked.get(run_id)

    def unpark(self, run_id: str) -> ParkedRun | None:
        """Take ``run_id`` out of the wait (its timer stops); ``None`` if it was not parked."""
        entry = self._parked.pop(run_id, None)
        if entry is not None:
            entry.timer.cancel()
        return entry

    def close(self) -> None:
        """Stop every timer (the sidecar is stopping: the store keeps what is live)."""
        for entry in self._parked.values():
            entry.timer.cancel()
        self._parked.clear()
