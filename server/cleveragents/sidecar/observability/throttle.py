"""A warning that can repeat without end, logged at most once an interval.

A peer that does the same wrong thing over and over (an MCP server writing line after line
that is not JSON) would otherwise write a log line for each, as fast as it can: tens of MB a
second. ``LogThrottle`` lets the first of an interval through and counts the rest, which the
next line that goes through reports (``not_logged_since_last_line``), or ``flush`` at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LogThrottle"]


class LogThrottle:
    """Whether a repeated warning may be logged now, and how many were not."""

    __slots__ = ("_clock", "_next_line_at", "_suppressed", "interval_s")

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self._clock = clock
        self._next_line_at = float("-inf")
        self._suppressed = 0

    def admit(self) -> int | None:
        """One more occurrence: ``None`` when it must not be logged (it is counted); else the
        number not logged since the last line, to log with it."""
        now = self._clock()
        if now < self._next_line_at:
            self._suppressed += 1
            return None
        self._next_line_at = now + self.interval_s
        return self.flush()

    def flush(self) -> int:
        """The occurrences not logged since the last line (now counted as reported)."""
        suppressed, self._suppressed = self._suppressed, 0
        return suppressed
