"""A sidecar's stop in a fleet (a shared Redis store) returns even when redis-py loses the
cancel of a blocking ``XREAD`` (Python 3.11's ``asyncio.wait_for``, which redis-py writes
commands under, drops a cancel that comes as the write ends): the cancelled read came back as
if nothing happened, and a loop that relied on the cancel read on for ever (the stop never
returned)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

import redis.asyncio

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.sidecar.fleet.control import Control
from cleveragents.sidecar.fleet.fencing import Claims
from cleveragents.sidecar.fleet.layout import Keys
from cleveragents.sidecar.fleet.lease import Lease
from cleveragents.sidecar.fleet.mirrors import HeldRun, Mirrors, RunHead
from cleveragents.sidecar.runs.log import LogStats
from cleveragents.sidecar.runs.store import StoredRun
from cleveragents.tool import ToolCallStarted

NAP: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 60}}]},
]


class LosesCancels:
    """A Redis client whose blocking ``XREAD`` answers "nothing came" when it is cancelled,
    as redis-py's did: the cancel does not reach the caller. ``reading`` is set once a read
    blocks."""

    def __init__(self) -> None:
        self.reads = 0
        self.cancels_lost = 0
        self.reading = asyncio.Event()
        self._never = asyncio.Event()

    async def xread(self, streams: dict[Any, Any], block: int = 0, count: int = 0) -> list[Any]:
        self.reads += 1
        self.reading.set()
        try:
            await asyncio.wait_for(self._never.wait(), block / 1000)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            self.cancels_lost += 1  # swallowed: the read answers as if its block ran out
        return []


class Reported:
    """Where a lease reports (a fake of the run directory): nothing comes here."""

    async def adopt(self, stored: list[StoredRun]) -> None:
        raise AssertionError("nothing is adopted")

    def lose(self, run_id: str, message: str) -> None:
        raise AssertionError("nothing is lost")

    async def obey(self, control: Control) -> None:
        raise AssertionError("nothing is asked")


async def test_a_leases_stop_returns_though_its_control_reads_cancel_is_lost() -> None:
    client = LosesCancels()
    lease = Lease(cast("redis.asyncio.Redis", client), Claims("lossy"), 30.0, Keys())

    async def running() -> None:
        async with lease.running(Reported()):
            await client.reading.wait()  # the control loop is in its blocking read

    await asyncio.wait_for(running(), 15)
    assert client.cancels_lost == 1
    assert client.reads == 1  # it read no more once told to stop


class FollowedElsewhere:
    """A fleet's store holding one live run of another sidecar, whose blocking read of the
    run's next frames loses its cancel as ``LosesCancels.xread`` does."""

    def __init__(self, stored: StoredRun) -> None:
        self.stored = stored
        self.reads = 0
        self.cancels_lost = 0
        self.reading = asyncio.Event()
        self._never = asyncio.Event()

    async def read_runs(self, run_ids: list[str]) -> list[HeldRun]:
        return [HeldRun(self.stored, "there")]

    async def read_head(self, run_id: str) -> RunHead | None:
        return RunHead(self.stored.owner, "there", "")

    async def recent_run_ids(self, limit: int) -> list[str]:
        return [self.stored.run_id]

    async def read_after(self, run_id: str, after: int, block_ms: int) -> list[bytes]:
        self.reads += 1
        self.reading.set()
        try:
            await asyncio.wait_for(self._never.wait(), block_ms / 1000)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            self.cancels_lost += 1
        return []


async def _live_frames() -> StoredRun:
    """The first frames of a live run (a real sidecar's, on the memory store)."""
    config = SidecarConfig(
        listen="127.0.0.1:0", sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],)
    )
    async with Sidecar(config) as sidecar, AsyncSidecarClient(sidecar.address) as client:
        calls = client.stream_tool_loop("go", script=NAP, run_id="elsewhere", detach=True)
        async for streamed in calls:
            if isinstance(streamed.event, ToolCallStarted):
                break
        run = sidecar.manager.get("elsewhere")
        assert run is not None
        frames = list(run.log.frames)
        sidecar.hurry()
    return StoredRun("elsewhere", frames, run.owner, "")


async def test_following_another_sidecars_run_stops_though_its_reads_cancel_is_lost() -> None:
    store = FollowedElsewhere(await _live_frames())
    mirrors = Mirrors(store, LogStats())
    found = await mirrors.get("elsewhere")
    assert found is not None
    assert not found[0].finished
    found[0].log.cursor(len(store.stored.frames), 100)  # someone watches it: it is kept up
    await store.reading.wait()
    await asyncio.wait_for(mirrors.close(), 15)
    assert store.cancels_lost == 1
    assert store.reads == 1
