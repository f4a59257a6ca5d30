"""Time from a sidecar's death to its runs resuming on another sidecar sharing one Redis.

Sidecar A starts ``RUNS`` detached runs, each paused in a long tool call; sidecar B, on the
same Redis, watches every one of them. A is killed with ``SIGKILL``; each run's time is from
the kill to its ``run_resumed`` event (written by B, which adopted it) reaching B's watcher.

The lease bounds it: A's lease (``event_store_lease_s``, L) was last renewed at most L/3
before the kill, so it expires between 2L/3 and L after it; B looks for expired leases every
L/3. A run resumes between 2L/3 and 4L/3 after the death, plus the adoption itself (claiming
and reading the runs' logs, rebuilding each run). Measured for two leases, so the share the
lease has is seen.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import RunResumed, ToolCallStarted

if TYPE_CHECKING:
    from bench import scenarios_load, stores
    from bench.scenarios_load import Figure
else:
    import scenarios_load
    import stores
    from scenarios_load import Figure

RUNS = 20
LEASES_S = (1.0, 3.0)
#: Each run pauses in this call (far longer than the bench): A dies with every run in it.
PAUSED: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "p", "name": "pause", "arguments": {"seconds": 600}}]},
    {"content": "resumed"},
]


async def _start_paused(client: AsyncSidecarClient, run_id: str) -> int:
    """Start a detached run and return the sequence of its paused call's start."""
    stream = client.stream_tool_loop("go", script=PAUSED, run_id=run_id, detach=True)
    async for streamed in stream:
        if isinstance(streamed.event, ToolCallStarted):
            return streamed.sequence
    raise RuntimeError(f"run {run_id} ended before its pause")


async def _resumed_at(
    client: AsyncSidecarClient, run_id: str, caught_up: int, ready: asyncio.Event
) -> float:
    """Watch ``run_id``; set ``ready`` once the watcher has what was logged before the kill;
    return when its ``run_resumed`` arrived."""
    async for streamed in client.watch(run_id):
        if streamed.sequence >= caught_up:
            ready.set()
        if isinstance(streamed.event, RunResumed):
            return time.perf_counter()
    raise RuntimeError(f"run {run_id} ended without resuming")


async def one_lease(lease_s: float) -> list[float]:
    """Seconds from A's death to each of its runs' ``run_resumed`` on B."""
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as scratch:
        redis_process, url = stores.start_redis(Path(scratch))
        settings = {"event_store": url, "event_store_lease_s": str(lease_s)}
        doomed = scenarios_load.start_sidecar(sidecar_id="doomed", **settings)
        survivor = scenarios_load.start_sidecar(sidecar_id="survivor", **settings)
        try:
            run_ids = [f"failover-{i}" for i in range(RUNS)]
            async with AsyncSidecarClient(doomed[1]) as client:
                paused = await asyncio.gather(*(_start_paused(client, r) for r in run_ids))
            async with AsyncSidecarClient(survivor[1]) as client:
                ready = [asyncio.Event() for _ in run_ids]
                watchers = [
                    asyncio.create_task(_resumed_at(client, run_id, sequence, event))
                    for run_id, sequence, event in zip(run_ids, paused, ready, strict=True)
                ]
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 60)
                killed = time.perf_counter()
                doomed[0].send_signal(signal.SIGKILL)
                doomed[0].wait(15)
                resumed = await asyncio.wait_for(asyncio.gather(*watchers), 60 + 3 * lease_s)
        finally:
            for process in (doomed[0], survivor[0]):
                if process.poll() is None:
                    scenarios_load.stop(process)
            redis_process.terminate()
            redis_process.wait(15)
    return [at - killed for at in resumed]


async def death_to_resume() -> list[Figure]:
    """The median and the slowest run's time from the death to its resumption, per lease."""
    figures: list[Figure] = []
    for lease_s in LEASES_S:
        seconds = await one_lease(lease_s)
        bound = (
            f"event_store_lease_s = {lease_s:g}: expected {2 * lease_s / 3:.2f}-"
            f"{4 * lease_s / 3:.2f} s (2/3 to 4/3 of a lease) plus the adoption"
        )
        for label, value in (("median", statistics.median(seconds)), ("max", max(seconds))):
            figures.append(
                Figure(
                    "failover",
                    f"lease {lease_s:g} s: death to resume, {label} of {RUNS} runs",
                    value * 1000,
                    "ms",
                    notes=[bound] if label == "max" else [],
                    samples=[s * 1000 for s in seconds],
                )
            )
    return figures


if __name__ == "__main__":
    for figure in asyncio.run(death_to_resume()):
        notes = f"  ({'; '.join(figure.notes)})" if figure.notes else ""
        print(f"{figure.name:52} {figure.value:9.0f} {figure.unit}{notes}", file=sys.stdout)
