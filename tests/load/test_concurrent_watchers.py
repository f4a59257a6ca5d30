"""300 concurrent runs with 3 watchers each, against one sidecar process."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from cleveragents.client import AsyncSidecarClient, StreamedEvent
from cleveragents.tool import RunStarted

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

RUNS = 300
WATCHERS = 3
ITERATIONS = 8


@pytest.fixture
def sidecar(serve_sidecar: ServeSidecar) -> ServedSidecar:
    # One malloc arena: with one per allocating thread, the RSS after the same round grew 1-16 %
    # as the machine's load had gRPC's threads allocate, with nothing kept (one arena: -0.8 to
    # +0.4 % over six runs, this tree and the one before it alike).
    return serve_sidecar(max_finished_runs=RUNS, env={"MALLOC_ARENA_MAX": "1"})


SCRIPT: list[dict[str, Any]] = [
    {"content": f"step {i}", "tool_calls": [{"id": f"c{i}", "name": "echo",
                                             "arguments": {"text": "x" * 64}}]}
    for i in range(ITERATIONS - 1)
] + [{"content": "done"}]  # fmt: skip
EVENTS_PER_RUN = 4 * ITERATIONS


async def _one_run(client: AsyncSidecarClient, index: int) -> list[list[StreamedEvent]]:
    """Start a run, attach watchers as soon as it exists, and collect every stream."""
    run_id = f"load-{index}"
    started = asyncio.Event()
    own: list[StreamedEvent] = []

    async def start() -> list[StreamedEvent]:
        async for streamed in client.stream_tool_loop(
            "go", script=SCRIPT, max_iterations=ITERATIONS, run_id=run_id
        ):
            own.append(streamed)
            if isinstance(streamed.event, RunStarted):
                started.set()
        return own

    async def watch() -> list[StreamedEvent]:
        await started.wait()
        return [streamed async for streamed in client.watch(run_id)]

    return list(await asyncio.gather(start(), *(watch() for _ in range(WATCHERS))))


async def _load(address: str) -> list[list[list[StreamedEvent]]]:
    async with AsyncSidecarClient(address) as client:
        return list(await asyncio.gather(*(_one_run(client, i) for i in range(RUNS))))


@pytest.mark.timeout(180)
async def test_every_watcher_sees_every_event_once_in_order_and_memory_returns(
    sidecar: ServedSidecar,
) -> None:
    address = sidecar.address
    # Warm-up: allocator arenas and caches reach their working size, and the sidecar keeps
    # its RUNS finished runs. The measured round reuses their ids, so a sidecar that does not
    # grow with load ends where it began. The C allocator hands memory back to the system
    # after some rounds and not after others (readings after successive rounds alternate by
    # up to 15 %, with no growth), so the working size is the larger warm-up reading.
    readings = []
    for _ in range(2):
        await _load(address)
        readings.append(sidecar.status_kib())
    baseline = max(readings)

    results = await _load(address)
    after = sidecar.status_kib()

    for streams in results:
        reference = [(e.sequence, e.event) for e in streams[1]]
        assert [s for s, _ in reference] == list(range(1, EVENTS_PER_RUN + 1))
        for stream in streams[2:]:
            assert [(e.sequence, e.event) for e in stream] == reference
        assert [(e.sequence, e.event) for e in streams[0]] == reference
    print(f"sidecar RSS: {baseline} KiB before the measured round, {after} KiB after")
    assert after <= baseline * 1.10, (baseline, after)
