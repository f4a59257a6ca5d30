"""A Session with large schemas opens on the sidecar's own threads: sync tools that hold every
thread of the event loop's default pool cannot keep new sessions from starting."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import AsyncIterator

import grpc
import pytest

from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.tool import ToolRegistry
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

from .conftest import WAIT_S, call, next_response, run_spec, session_start, turn

#: The loop's default pool in this test: every thread of it is held by a stuck sync tool.
POOL_THREADS = 2


@pytest.fixture
async def stuck_pool() -> AsyncIterator[tuple[ToolRegistry, threading.Event, asyncio.Queue[str]]]:
    """A registry whose sync ``stuck`` tool blocks until released, on a default pool of
    ``POOL_THREADS`` threads; each call reports when it holds its thread."""
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="test-pool")
    loop.set_default_executor(pool)
    release = threading.Event()
    holding: asyncio.Queue[str] = asyncio.Queue()
    registry = ToolRegistry()

    @registry.tool
    def stuck(label: str) -> str:
        """Hold a thread until the test lets go."""
        loop.call_soon_threadsafe(holding.put_nowait, label)
        release.wait(WAIT_S)
        return label

    yield registry, release, holding
    release.set()
    pool.shutdown(wait=True)


async def test_a_session_opens_while_sync_tools_hold_every_default_thread(
    stuck_pool: tuple[ToolRegistry, threading.Event, asyncio.Queue[str]],
) -> None:
    registry, release, holding = stuck_pool
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", log_format="console"), registry=registry)
    await sidecar.start()
    try:
        async with grpc.aio.insecure_channel(sidecar.address) as channel:
            stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
            blockers = [
                stub.StreamToolLoop(
                    service_pb2.StreamToolLoopRequest(
                        spec=run_spec([turn("", call(f"s{i}", "stuck", label=str(i))), turn("ok")])
                    )
                )
                for i in range(POOL_THREADS)
            ]
            async with asyncio.timeout(WAIT_S):
                for _ in range(POOL_THREADS):
                    await holding.get()
            # Over 8 KiB of schema: opened on a thread, not inline on the loop.
            schema = {"type": "object", "properties": {"x": {"description": "d" * 9000}}}
            tool = types_pb2.ToolSpec(name="mine", input_schema=json.dumps(schema))
            session = stub.Session()
            await session.write(session_start(run_spec([turn("done")]), tool))
            async with asyncio.timeout(5):  # the opening used to queue behind the stuck tools
                first = await next_response(session)
            assert first.event.HasField("run_started"), first
            release.set()
            for blocker in blockers:
                async for _ in blocker:
                    pass
            await session.done_writing()
            while await session.read() is not grpc.aio.EOF:
                pass
            assert await session.code() == grpc.StatusCode.OK
    finally:
        release.set()
        await sidecar.stop(0.2)
