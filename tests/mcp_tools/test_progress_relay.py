"""The coalescing of one call's progress reports (``ProgressRelay``), against a real event
loop: reports are never passed on closer together than the server's ``progress_interval``."""

from __future__ import annotations

import asyncio
import time

from cleveragents.sidecar.config.mcp import McpServerConfig
from cleveragents.sidecar.mcp.progress import ProgressRelay
from cleveragents.tool import CallScope, ToolCall

INTERVAL_S = 0.5  # long beside what the test does between its reports: it is not timing-bound


def _relay(sent: list[float]) -> ProgressRelay:
    loop = asyncio.get_running_loop()
    scope = CallScope(
        ToolCall("c1", "r_spam", {}),
        iteration=1,
        timeout_s=None,
        progress=lambda progress, total, message: sent.append(loop.time()),
    )
    server = McpServerConfig("r", command="true", progress_interval_s=INTERVAL_S)
    return ProgressRelay(server, scope)


def _hold_the_loop(seconds: float) -> None:
    """Keep the event loop's thread busy for ``seconds`` (as a burst of work would)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


async def test_a_report_sent_at_once_after_a_busy_loop_restarts_the_interval() -> None:
    sent: list[float] = []
    relay = _relay(sent)
    await relay(1, None, None)  # passed on at once
    await relay(2, None, None)  # held: its interval's timer is set
    _hold_the_loop(INTERVAL_S * 1.5)  # busy past that timer, as under a flood of reports
    await relay(3, None, None)  # its interval has ended: passed on at once
    await relay(4, None, None)  # held again, for a full interval from report 3
    for _ in range(3):  # the stale timer, already due, gets its turn
        await asyncio.sleep(0)

    assert len(sent) == 2
    relay.flush()
    assert len(sent) == 3
