"""The Python clients' ``wait_ready``: a runtime that has just started its sidecar waits for
it instead of racing its start-up."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarClient, SidecarRpcError

from .conftest import WAIT_S, SidecarFactory


@pytest.fixture
def socket_path() -> Iterator[Path]:
    """A unix socket path nobody listens on yet (short: socket paths are limited)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        yield Path(directory) / "s.sock"


async def refused(channel: grpc.aio.Channel) -> None:
    """Wait until ``channel`` has tried to connect and found nothing listening."""
    state = channel.get_state(try_to_connect=True)
    async with asyncio.timeout(WAIT_S):
        while state != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            await channel.wait_for_state_change(state)
            state = channel.get_state()


async def test_wait_ready_returns_once_a_sidecar_started_after_it_serves(
    make_sidecar: SidecarFactory, socket_path: Path
) -> None:
    target = f"unix:{socket_path}"
    async with grpc.aio.insecure_channel(target) as channel:
        client = AsyncSidecarClient(channel=channel)
        waiting = asyncio.create_task(client.wait_ready(timeout=WAIT_S * 4))
        await refused(channel)  # it is waiting, and nothing listens yet
        assert not waiting.done()
        await make_sidecar(listen=target)
        async with asyncio.timeout(WAIT_S * 4):
            await waiting
        assert "echo" in [tool.name for tool in await client.list_tools()]


async def test_wait_ready_without_a_sidecar_raises_deadline_exceeded_naming_the_address(
    socket_path: Path,
) -> None:
    target = f"unix:{socket_path}"
    async with AsyncSidecarClient(target) as client:
        with pytest.raises(SidecarRpcError) as caught:
            await client.wait_ready(timeout=0.5)
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert target in caught.value.details
    assert "not ready within 0.5 s" in caught.value.details


async def test_wait_ready_refuses_a_timeout_that_is_not_positive(socket_path: Path) -> None:
    async with AsyncSidecarClient(f"unix:{socket_path}") as client:
        with pytest.raises(ValueError, match="timeout must be positive"):
            await client.wait_ready(timeout=0)


async def test_blocking_wait_ready_returns_once_a_sidecar_started_after_it_serves(
    make_sidecar: SidecarFactory, socket_path: Path
) -> None:
    target = f"unix:{socket_path}"
    client = SidecarClient(target)
    try:
        waiting = asyncio.ensure_future(asyncio.to_thread(client.wait_ready, WAIT_S * 4))
        probe = grpc.aio.insecure_channel(target)
        try:
            await refused(probe)  # nothing listens yet
        finally:
            await probe.close()
        assert not waiting.done()
        await make_sidecar(listen=target)
        async with asyncio.timeout(WAIT_S * 4):
            await waiting
        tools = await asyncio.to_thread(client.list_tools)
        assert "echo" in [tool.name for tool in tools]
    finally:
        client.close()


async def test_blocking_wait_ready_without_a_sidecar_raises_deadline_exceeded(
    socket_path: Path,
) -> None:
    with SidecarClient(f"unix:{socket_path}") as client, pytest.raises(SidecarRpcError) as caught:
        await asyncio.to_thread(client.wait_ready, 0.5)
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert str(socket_path) in caught.value.details
