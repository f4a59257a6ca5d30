"""A sidecar's control stream, where the others send it cancels and approval decisions for its
runs: an entry it cannot read (written there by anything with access to Redis) is logged and
skipped, and the entries after it are obeyed."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.fleet.layout import Keys
from tests.conftest import ServeSidecar
from tests.durability.test_redis_fleet import start_napping
from tests.redis_server import RedisServer

#: The key names of the default prefix (the tests' sidecars set none).
KEYS = Keys()

#: Entries no sidecar writes: a field that is not UTF-8, an unknown request, no run named.
MALFORMED = [
    {"op": b"\xff\xfe", "run": "napping"},
    {"op": "reboot", "run": "napping"},
    {"op": "cancel"},
]


async def test_a_malformed_control_entry_is_skipped_and_the_next_cancel_is_obeyed(
    serve_sidecar: ServeSidecar, redis_server: RedisServer, tmp_path: Path
) -> None:
    log_path = tmp_path / "alpha.log"
    with log_path.open("w") as alpha_log:
        alpha = serve_sidecar(event_store=redis_server.url, sidecar_id="alpha", stderr=alpha_log)
    beta = serve_sidecar(event_store=redis_server.url, sidecar_id="beta")
    await start_napping(alpha.address, "napping")
    with redis.Redis.from_url(redis_server.url) as other:
        ids = [other.xadd(KEYS.control("alpha"), entry).decode() for entry in MALFORMED]
    async with AsyncSidecarClient(beta.address) as client:
        state = await client.cancel_run("napping", reason="after the bad entries")
        after = await client.get_run("napping")
    assert state == "cancelled"
    assert after.state == "cancelled"
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    skipped = [line for line in lines if line["event"] == "control entry skipped"]
    assert [line["entry"] for line in skipped] == ids
    assert "not UTF-8" in skipped[0]["error"]
    assert "'reboot'" in skipped[1]["error"]
    assert "names no run" in skipped[2]["error"]
