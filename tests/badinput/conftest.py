"""A real sidecar on its own event loop thread, so hypothesis can drive it synchronously."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.toolruntime.v1 import service_pb2_grpc


@dataclass
class LiveSidecar:
    """The server, the loop it runs on, and a stub connected to it."""

    sidecar: Sidecar
    loop: asyncio.AbstractEventLoop
    channel: grpc.Channel
    stub: service_pb2_grpc.ToolRuntimeServiceStub

    def live_runs(self) -> int:
        return self.sidecar.manager.live_count

    def tasks(self) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks()) - 1

        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(5)


@pytest.fixture(scope="module")
def live() -> Iterator[LiveSidecar]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    config = SidecarConfig(
        listen="127.0.0.1:0", max_concurrent_runs=50, max_iterations_cap=50,
        default_tool_timeout_s=2.0, max_message_bytes=256 * 1024,
    )  # fmt: skip
    sidecar = Sidecar(config)
    address = asyncio.run_coroutine_threadsafe(sidecar.start(), loop).result(10)
    channel = grpc.insecure_channel(address)
    try:
        yield LiveSidecar(sidecar, loop, channel, service_pb2_grpc.ToolRuntimeServiceStub(channel))
    finally:
        channel.close()
        asyncio.run_coroutine_threadsafe(sidecar.stop(1.0), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
