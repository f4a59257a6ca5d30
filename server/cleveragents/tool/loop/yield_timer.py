"""``YieldTimer``: makes a loop that never waits on its own still give other tasks a turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "YieldTimer"]


class Clock(Protocol):
    """What ``YieldTimer`` needs of an event loop."""

    def time(self) -> float: ...

    def call_soon(self, callback: Callable[[], object]) -> object: ...


class YieldTimer:
    """Says when a loop that has not let other tasks run for ``interval_s`` must yield.

    A loop that suspends on its own (for a client's tool, a real LLM) is never told to: a
    callback queued when the timer is armed only runs once the loop has given way, and finding
    it ran re-arms the timer. So only a loop that never waits pays for the extra turns.
    """

    __slots__ = ("_deadline", "_interval_s", "_loop", "_yielded")

    def __init__(self, loop: Clock, interval_s: float) -> None:
        self._loop = loop
        self._interval_s = interval_s
        self._deadline = 0.0
        self._yielded = False
        self.arm()

    def arm(self) -> None:
        """Start a new interval now."""
        self._start(self._loop.time())

    def due(self) -> bool:
        """Whether the loop must yield now.

        If it gave way since the timer was armed, a new interval starts now: when it resumed
        is not known (the marker runs as it starts waiting, which may have lasted any time),
        and now is the latest that moment can be.
        """
        now = self._loop.time()
        if self._yielded:
            self._start(now)
            return False
        return now >= self._deadline

    def _start(self, at: float) -> None:
        self._yielded = False
        self._deadline = at + self._interval_s
        self._loop.call_soon(self._mark)

    def _mark(self) -> None:
        self._yielded = True
