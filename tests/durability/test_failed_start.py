"""A start that fails undoes what it began: on a real Redis it leaves no lease, and the runs it
took back are left live, as a crash leaves them, for the next start (or the fleet) to take."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import ConfigError, Sidecar, SidecarConfig
from cleveragents.sidecar.fleet.layout import Keys
from cleveragents.sidecar.runs.recovery import RESTART_REASON
from cleveragents.tool import RunCompleted, RunResumed
from cleveragents.wire import decode_frame
from tests.conftest import ServeSidecar
from tests.durability.test_redis_fleet import TERMINAL, start_napping
from tests.redis_server import RedisServer

#: The key names of the default prefix (the tests' sidecars set none).
KEYS = Keys()

#: Two naps, then an answer: a run taken back in the first nap is still live in the second.
NAPS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "nap1", "name": "sleep", "arguments": {"seconds": 60}}]},
    {"tool_calls": [{"id": "nap2", "name": "sleep", "arguments": {"seconds": 60}}]},
    {"content": "done"},
]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def _config(url: str, sidecar_id: str, listen: str) -> SidecarConfig:
    return SidecarConfig(
        listen=listen, event_store=url, sidecar_id=sidecar_id, event_store_lease_s=1.0,
        sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
    )  # fmt: skip


def _logged(url: str, run_id: str) -> list[object]:
    with redis.Redis.from_url(url) as client:
        return [decode_frame(fields[b"f"]).event for _, fields in client.xrange(KEYS.log(run_id))]


async def test_a_start_whose_listen_port_is_taken_leaves_no_lease_in_redis(
    redis_server: RedisServer, taken_port: int
) -> None:
    sidecar = Sidecar(_config(redis_server.url, "refused", f"127.0.0.1:{taken_port}"))
    with pytest.raises(ConfigError, match="cannot listen on"):
        await sidecar.start()
    with redis.Redis.from_url(redis_server.url) as client:
        lease = client.exists(KEYS.lease("refused"))
        members = client.smembers(KEYS.sidecars)
    assert lease == 0
    assert b"refused" not in members
    await sidecar.stop()  # what its construction holds goes too; nothing else is left to undo


async def test_the_runs_a_failed_start_took_back_are_left_live_for_the_next_start(
    redis_server: RedisServer, serve_sidecar: ServeSidecar, taken_port: int
) -> None:
    crashed = serve_sidecar(
        event_store=redis_server.url, sidecar_id="again", event_store_lease_s=1.0
    )
    await start_napping(crashed.address, "nap", NAPS)
    crashed.process.kill()
    crashed.process.wait(10)
    failed = Sidecar(_config(redis_server.url, "again", f"127.0.0.1:{taken_port}"))
    with pytest.raises(ConfigError, match="cannot listen on"):
        await failed.start()  # it took the run back, then could not listen
    with redis.Redis.from_url(redis_server.url) as client:
        lease = client.exists(KEYS.lease("again"))
    after_failure = _logged(redis_server.url, "nap")
    await failed.stop()
    restarted = Sidecar(_config(redis_server.url, "again", "127.0.0.1:0"))
    await restarted.start()
    try:
        async with AsyncSidecarClient(restarted.address) as client:
            log = [streamed.event async for streamed in client.watch("nap")]
    finally:
        await restarted.stop(1.0)
    assert lease == 0
    assert not any(isinstance(event, TERMINAL) for event in after_failure)
    assert [type(e) for e in log if isinstance(e, TERMINAL)] == [RunCompleted]
    assert [e.reason for e in log if isinstance(e, RunResumed)] == [RESTART_REASON] * 2
