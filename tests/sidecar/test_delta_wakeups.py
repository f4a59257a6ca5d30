"""A delta wakes only the streams that asked for deltas: a watcher of the numbered events
alone sleeps through an LLM call's deltas and is woken by its events only."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from cleveragents.sidecar import Sidecar
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, session_pb2

from .conftest import WAIT_S, next_response, run_spec, session_start

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

#: The deltas the client-hosted LLM streams before it answers.
DELTAS = 200


async def _until(stream: Any, payload: str) -> list[events_pb2.RunEvent]:
    """Read a WatchRun stream until an event of ``payload`` arrives; the events read."""
    events: list[events_pb2.RunEvent] = []
    async for response in stream:
        events.append(response.event)
        if response.event.WhichOneof("payload") == payload:
            return events
    raise AssertionError(f"the watch ended before {payload}")


async def test_a_watcher_without_stream_deltas_is_not_woken_by_a_calls_deltas(
    sidecar: Sidecar, stub: Stub
) -> None:
    session = stub.Session()
    start = session_start(run_spec(run_id="wakes"), client_llm=True)
    start.start.stream_deltas = True
    await session.write(start)
    async with asyncio.timeout(WAIT_S):
        while not (response := await next_response(session)).HasField("llm_invocation"):
            pass
        request_id = response.llm_invocation.request_id
        run = sidecar.manager.require("wakes")
        plain = stub.WatchRun(service_pb2.WatchRunRequest(run_id="wakes"))
        live = stub.WatchRun(service_pb2.WatchRunRequest(run_id="wakes", stream_deltas=True))
        await _until(plain, "iteration_started")
        await _until(live, "iteration_started")
        # Both watchers have read the log so far; until both sleep on a release (the server
        # has no event to wait on for that), look at its state.
        while len(run.log.sleeping()) < 2:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        asleep = run.log.sleeping()

        for index in range(DELTAS):
            delta = session_pb2.LlmResultDelta(request_id=request_id, index=index, text="x")
            await session.write(session_pb2.SessionRequest(llm_delta=delta))
        got = 0
        async for watched in live:  # the delta watcher gets them all
            got += watched.event.llm_delta.count
            if got == DELTAS:
                break

        # The watcher of events alone still sleeps where it went to sleep; the other woke.
        assert sum(not w.done() for w in asleep) == 1

        result = session_pb2.LlmResult(request_id=request_id, content="x" * DELTAS)
        await session.write(session_pb2.SessionRequest(llm_result=result))
        events = await _until(plain, "run_completed")
        await session.done_writing()

    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds == ["llm_responded", "run_completed"]
    assert events[0].llm_responded.content == "x" * DELTAS
