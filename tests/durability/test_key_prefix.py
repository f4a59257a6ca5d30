"""Two deployments on one Redis, each with its own ``event_store_key_prefix``, see nothing of
each other: not each other's runs (a run id may be taken in both), leases, nor control
streams, even with the same sidecar ids; every key each writes starts with its prefix."""

from __future__ import annotations

import grpc
import pytest
import redis

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ConfigError, SidecarConfig
from tests.conftest import ServeSidecar
from tests.durability.test_damaged_logs import ECHO_THEN_ANSWER
from tests.durability.test_redis_fleet import start_napping
from tests.redis_server import RedisServer


async def test_two_prefixes_on_one_redis_do_not_see_each_others_runs(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    team_a, team_b = [
        serve_sidecar(
            event_store=redis_server.url, sidecar_id="same", event_store_key_prefix=prefix
        )
        for prefix in ("team-a", "team-b")
    ]
    await start_napping(team_a.address, "shared-id")
    async with AsyncSidecarClient(team_b.address) as client:
        with pytest.raises(SidecarRpcError) as unseen:
            await client.get_run("shared-id")
        with pytest.raises(SidecarRpcError) as uncancelled:
            await client.cancel_run("shared-id")
        listed = await client.list_runs()
        own = await client.run_tool_loop("go", script=[{"content": "b's"}], run_id="shared-id")
    async with AsyncSidecarClient(team_a.address) as client:
        on_a = await client.get_run("shared-id")
        a_lists = [summary.run_id for summary in await client.list_runs()]
    with redis.Redis.from_url(redis_server.url) as other:
        keys = sorted(key.decode() for key in other.keys("*"))
    assert unseen.value.code is grpc.StatusCode.NOT_FOUND
    assert uncancelled.value.code is grpc.StatusCode.NOT_FOUND
    assert listed == []
    assert own.content == "b's"
    assert on_a.state == "running"  # team-b's run of the same id changed nothing of team-a's
    assert a_lists == ["shared-id"]
    assert keys
    assert all(key.startswith(("team-a:", "team-b:")) for key in keys), keys
    assert "team-a:sidecar:{same}:lease" in keys
    assert "team-b:sidecar:{same}:lease" in keys


@pytest.mark.parametrize("prefix", ["", "a{b}", "with space", "x" * 65])
def test_a_key_prefix_redis_cluster_or_a_person_would_misread_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError, match="event_store_key_prefix"):
        SidecarConfig(event_store="redis://127.0.0.1:6379/0", event_store_key_prefix=prefix)


async def test_a_redis_user_held_to_its_prefix_serves_its_fleet_and_reaches_no_other(
    serve_sidecar: ServeSidecar, redis_server: RedisServer
) -> None:
    with redis.Redis.from_url(redis_server.url) as admin:  # the operator's own connection
        admin.acl_setuser(
            "team-a", enabled=True, passwords=["+secret-a"], keys=["team-a:*"],
            commands=["+@all", "-@dangerous"],
        )  # fmt: skip
        admin.set("team-b:runs", "theirs")
    url = f"redis://team-a:secret-a@127.0.0.1:{redis_server.port}/0"
    sidecar = serve_sidecar(event_store=url, event_store_key_prefix="team-a", sidecar_id="a")
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="held")
        info = await client.get_run("held")
    with redis.Redis.from_url(url) as limited:
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.get("team-b:runs")
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.xadd("team-b:sidecar:{b}:control", {"op": "cancel", "run": "theirs"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.flushall()
    assert result.content == "done"
    assert info.state == "completed"
