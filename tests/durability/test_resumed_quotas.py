"""Runs taken back from the store count against their owner's run quotas, as runs started
there do: a run resumed at a restart, and a Session run waiting for its client, each hold
one of ``max_concurrent_runs = 1``, so the next run is refused until it ends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.tool import RunCompleted, RunFailed, ToolCallStarted

from .conftest import Spawn
from .test_resume import TOOLS

LONG_S = 60
ECHO = [{"content": "next"}]
REFUSED = "principal 'default' already has 1 live run(s), as many as policy.max_concurrent_runs = 1"


def _config(tmp_path: Path) -> tuple[Path, Path]:
    gate = tmp_path / "gate"
    gate.mkdir()
    (tmp_path / "resume_tools.py").write_text(TOOLS.format(gate=str(gate)), encoding="utf-8")
    config = tmp_path / "sidecar.toml"
    config.write_text(
        f'tool_modules = ["resume_tools"]\npython_path = ["{tmp_path}"]\n'
        "[policy]\nmax_concurrent_runs = 1\n",
        encoding="utf-8",
    )
    return config, gate


async def _refusal(client: AsyncSidecarClient) -> SidecarRpcError:
    with pytest.raises(SidecarRpcError) as refused:
        await client.run_tool_loop("go", script=ECHO)
    return refused.value


@pytest.mark.parametrize("event_store", ["sqlite"], indirect=True)
async def test_a_run_resumed_at_a_restart_counts_against_its_owners_concurrency_quota(
    spawn: Spawn, tmp_path: Path
) -> None:
    config, gate = _config(tmp_path)
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w1", "name": "wait_idem", "arguments": {"tag": "q"}}]},
        {"content": "q done"},
    ]
    first = spawn(config=str(config))
    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        stream = client.stream_tool_loop("go", script=script, run_id="held", detach=True)
        async for streamed in stream:
            if isinstance(streamed.event, ToolCallStarted):
                break  # the call waits for the release file
    first.kill()
    second = spawn(config=str(config))
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        refused = await _refusal(client)  # "held" resumed, waiting in its call again
        (gate / "release").touch()
        log = [e async for e in client.watch("held")]
        after = await client.run_tool_loop("go", script=ECHO)
    assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert REFUSED in refused.details
    assert isinstance(log[-1].event, RunCompleted)
    assert after.content == "next"  # the resumed run's end freed its place


@pytest.mark.parametrize("event_store", ["sqlite"], indirect=True)
async def test_a_session_run_waiting_for_its_client_after_a_restart_counts_against_the_quota(
    spawn: Spawn, tmp_path: Path
) -> None:
    config, _ = _config(tmp_path)
    first = spawn(config=str(config))
    running = asyncio.Event()

    async def remote() -> dict[str, str]:
        """Wait until the sidecar is killed."""
        running.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    script = [{"tool_calls": [{"id": "r1", "name": "remote", "arguments": {}}]}]

    async def hold() -> None:
        async for _ in client.session("go", tools=[remote], script=script, run_id="s"):
            pass

    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        session = asyncio.create_task(hold())
        await running.wait()  # the call is in flight
        first.kill()
        await asyncio.gather(session, return_exceptions=True)
    second = spawn(config=str(config), session_reattach_s="60")
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        refused = await _refusal(client)  # "s" waits for its client
        await client.cancel_run("s", reason="nobody comes back")
        after = await client.run_tool_loop("go", script=ECHO)
        log = [e async for e in client.watch("s")]
    assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert REFUSED in refused.details
    assert isinstance(log[-1].event, RunFailed)
    assert after.content == "next"
