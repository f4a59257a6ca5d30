"""A run's owner is stored with its log: ownership survives a restart, and a store written
before owners were recorded still opens, its runs owned by the shared token's identity."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ClientConfig

from .conftest import StartInProcess

TOKENS = {"alice": "alice-durable-token", "bob": "bob-durable-token", "ada": "ada-durable-tok"}


@pytest.fixture
def identities(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"TEST_{name.upper()}", token)
    roles = {"ada": frozenset({"admin"})}
    clients = {
        name: ClientConfig(
            name, token_env=f"TEST_{name.upper()}", roles=roles.get(name, frozenset())
        )
        for name in TOKENS
    }
    return {"clients": clients}


async def test_ownership_survives_a_restart(
    start_in_process: StartInProcess, identities: dict[str, object]
) -> None:
    first = await start_in_process(**identities)
    async with AsyncSidecarClient(first.address, token=TOKENS["alice"]) as alice:
        await alice.run_tool_loop("alice's", script=[{"content": "kept"}], run_id="a1")
    await first.stop(1.0)
    second = await start_in_process(**identities)
    async with AsyncSidecarClient(second.address, token=TOKENS["bob"]) as bob:
        with pytest.raises(SidecarRpcError) as hidden:
            await bob.get_run("a1")
        with pytest.raises(SidecarRpcError) as reuse:
            await bob.run_tool_loop("bob's", script=[{"content": "x"}], run_id="a1")
        bobs = await bob.list_runs()
    async with AsyncSidecarClient(second.address, token=TOKENS["alice"]) as alice:
        info = await alice.get_run("a1")
    assert hidden.value.code is grpc.StatusCode.NOT_FOUND
    assert reuse.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert bobs == []
    assert info.result is not None
    assert info.result.content == "kept"


async def test_a_store_from_before_owners_opens_with_its_runs_owned_by_default(
    start_on_sqlite: StartInProcess, identities: dict[str, object], db: Path
) -> None:
    first = await start_on_sqlite()
    async with AsyncSidecarClient(first.address) as anyone:
        await anyone.run_tool_loop("old", script=[{"content": "old run"}], run_id="old")
    await first.stop(1.0)
    with sqlite3.connect(db) as connection:  # as a sidecar without owners left it
        connection.execute("DROP TABLE owners")
    second = await start_on_sqlite(**identities)
    async with AsyncSidecarClient(second.address, token=TOKENS["alice"]) as alice:
        with pytest.raises(SidecarRpcError) as hidden:
            await alice.get_run("old")
    async with AsyncSidecarClient(second.address, token=TOKENS["ada"]) as ada:
        info = await ada.get_run("old")
    assert hidden.value.code is grpc.StatusCode.NOT_FOUND
    assert info.result is not None
    assert info.result.content == "old run"
