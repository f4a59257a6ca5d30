"""An MCP call's ``notifications/progress``, passed on to its run as ``ToolCallProgress``.

A server may report progress as often as it likes; the run's log keeps every event it is
given, so the reports are coalesced here: at most one per ``progress_interval`` seconds: the
first at once, then the latest of each interval, sent when the interval ends (by a loop timer
the relay owns, which ``flush`` cancels), and one still held goes out at ``flush``, before the
call's record; at most ``MAX_PROGRESS_EVENTS`` for one call. A report whose ``progress`` is
not a finite number is dropped, and a ``total`` that is not becomes ``None`` (unknown).
A report's ``message`` is cut to ``MAX_PROGRESS_MESSAGE_BYTES`` (UTF-8, on a character
boundary, with a marker saying how much was cut), so one report cannot exceed what an event
may carry and a call's progress events stay small. A server sending a hundred thousand
reports adds a bounded number of events, and holds one pending report at a time.

With ``progress_extends_timeout``, every report (coalesced or not) pushes the call's timeout
back to a full ``timeout`` from now, but never past ``max_timeout`` after the call began: a
call that keeps reporting runs on, one that goes quiet times out, one that never ends stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import math

from cleveragents.sidecar.config.mcp import McpServerConfig
from cleveragents.tool import CallScope

__all__ = ["MAX_PROGRESS_EVENTS", "MAX_PROGRESS_MESSAGE_BYTES", "ProgressRelay", "cut_message"]

#: The most ``ToolCallProgress`` events one call adds to its run's log.
MAX_PROGRESS_EVENTS = 1000
#: The most UTF-8 bytes of a report's ``message`` an event keeps (the marker included).
MAX_PROGRESS_MESSAGE_BYTES = 1024


def cut_message(message: str, limit: int = MAX_PROGRESS_MESSAGE_BYTES) -> str:
    """``message`` when it fits in ``limit`` UTF-8 bytes, else its start (whole characters)
    followed by a marker saying how many bytes were cut."""
    data = message.encode("utf-8", "replace")
    if len(data) <= limit:
        return message
    marker_room = 48
    head = data[: max(limit - marker_room, 0)].decode("utf-8", "ignore")
    cut = len(data) - len(head.encode("utf-8"))
    return f"{head}… [{cut} more bytes cut]"


class ProgressRelay:
    """One call's progress callback (the SDK's ``progress_callback``); ``flush`` at its end."""

    __slots__ = (
        "_closed",
        "_deadline",
        "_handle",
        "_last",
        "_loop",
        "_pending",
        "_scope",
        "_window",
        "interval_s",
        "sent",
    )

    def __init__(self, server: McpServerConfig, scope: CallScope | None) -> None:
        self._scope = scope
        self._loop = asyncio.get_running_loop()
        self.interval_s = server.progress_interval_s
        #: Events passed on so far.
        self.sent = 0
        self._last = -math.inf
        self._pending: tuple[float, float | None, str] | None = None
        self._closed = False
        #: The timer sending the held report when its interval ends (``flush`` cancels it).
        self._handle: asyncio.TimerHandle | None = None
        #: The timeout each report renews, and the hard maximum (loop time), when extending.
        self._window: float | None = None
        self._deadline = math.inf
        if server.progress_extends_timeout and scope is not None and scope.timer is not None:
            self._window = scope.timeout_s
            limit = server.max_timeout_s
            if limit is None and scope.timeout_s is not None:
                limit = scope.timeout_s * 10
            if limit is not None:
                self._deadline = self._loop.time() + limit

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """A report from the server."""
        self._extend()
        if self._scope is None or self.sent >= MAX_PROGRESS_EVENTS or self._closed:
            return
        if not math.isfinite(progress):  # NaN or infinite: nothing a client could show
            return
        if total is not None and not math.isfinite(total):
            total = None
        now = self._loop.time()
        report = (progress, total, cut_message(message or ""))
        if now - self._last >= self.interval_s:
            self._send(report, now)
        else:
            self._pending = report
            if self._handle is None:
                self._handle = self._loop.call_at(self._last + self.interval_s, self._due)

    def flush(self) -> None:
        """Pass on the latest report the interval held back, before the call's record (call
        it however the call ends); the reports after it are dropped."""
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._pending is not None and self.sent < MAX_PROGRESS_EVENTS:
            self._send(self._pending, self._loop.time())

    def _due(self) -> None:
        """The held report's interval has ended: pass it on now."""
        self._handle = None
        if self._pending is not None and not self._closed and self.sent < MAX_PROGRESS_EVENTS:
            self._send(self._pending, self._loop.time())

    def _send(self, report: tuple[float, float | None, str], now: float) -> None:
        assert self._scope is not None
        if self._handle is not None:  # sent at once after a busy loop: its interval restarts
            self._handle.cancel()
            self._handle = None
        self._pending = None
        self._last = now
        self.sent += 1
        self._scope.progress(*report)

    def _extend(self) -> None:
        timer = self._scope.timer if self._scope is not None else None
        if self._window is None or timer is None or timer.expired():
            return
        when = min(self._loop.time() + self._window, self._deadline)
        current = timer.when()
        if current is not None and when > current:
            with contextlib.suppress(RuntimeError):  # the call has ended meanwhile
                timer.reschedule(when)
