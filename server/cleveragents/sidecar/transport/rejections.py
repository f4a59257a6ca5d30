"""Rejected credentials: every one counted, at most one warning line per interval.

A peer guessing tokens makes one refused call after another; a line for each would let it
flood the log. The first rejection of an interval is logged at ``warning`` with the caller's
peer address, the method and why; the ones after it in the same interval are counted, and the
next line says how many were not logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

__all__ = ["Rejections"]

log = structlog.get_logger("cleveragents.sidecar.auth")


class Rejections:
    """The count of rejected calls (``cleveragents_auth_rejected_total``) and their log."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        #: Calls refused for their credentials since start-up.
        self.count = 0
        self._clock = clock
        self._next_line_at = float("-inf")
        self._suppressed = 0

    def reject(self, peer: str, method: str, reason: str) -> None:
        """Count one rejected call, and log it unless a line was logged this interval."""
        self.count += 1
        now = self._clock()
        if now < self._next_line_at:
            self._suppressed += 1
            return
        log.warning(
            "credentials rejected",
            peer=peer,
            method=method,
            reason=reason,
            rejected_total=self.count,
            not_logged_since_last_line=self._suppressed,
        )
        self._suppressed = 0
        self._next_line_at = now + self.interval_s
