"""A watcher that reconnects after an LLM call has ended: what it gets of that call's deltas,
and that ``llm_responded`` (which always has the whole answer) supersedes them.

The rule the proto and README state: a rejoining stream gets the call's deltas the sidecar
still keeps, from index 0 as one catch-up delta (so a UI replaces its streamed text rather
than appends), or none once they are gone (or were never made: an answer that comes whole,
a scripted one, is split into deltas only while a stream reads them); either way
``llm_responded`` carries the whole text and a UI replaces what it streamed with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cleveragents.toolruntime.v1 import events_pb2, service_pb2

from .conftest import WAIT_S, ServerTools, call, run_spec, turn

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

TEXT = "Let me wait a moment before I answer you."


def _events(responses: Sequence[Any]) -> list[events_pb2.RunEvent]:
    out: list[events_pb2.RunEvent] = []
    for response in responses:
        out += [*response.events, *([response.event] if response.HasField("event") else [])]
    return out


async def _watch_until(
    stub: Stub, run_id: str, after: int, payload: str
) -> list[events_pb2.RunEvent]:
    """A delta-reading watch from ``after`` up to the first event with ``payload``."""
    request = service_pb2.WatchRunRequest(run_id=run_id, after_sequence=after, stream_deltas=True)
    seen: list[events_pb2.RunEvent] = []
    call = stub.WatchRun(request)
    async for response in call:
        seen += _events([response])
        if any(e.WhichOneof("payload") == payload for e in seen):
            call.cancel()
            return seen
    raise AssertionError(f"run {run_id} ended before {payload}")


async def test_a_watcher_rejoining_after_a_call_ended_gets_its_kept_deltas_from_index_0(
    stub: Stub, server_tools: ServerTools
) -> None:
    # The answer is split into deltas only if a stream reads deltas as it is made: a watcher
    # that does joins while ``gate`` holds the run, before the answer.
    script = [turn("", call("g1", "gate")), turn(TEXT, call("h1", "hang")), turn("done")]
    spec = run_spec(script, run_id="d-after", detach=True)
    async with asyncio.timeout(WAIT_S):
        async for _ in stub.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=spec)):
            break  # detached: the run goes on
        await server_tools.gate_started.wait()
        watch = service_pb2.WatchRunRequest(run_id="d-after", stream_deltas=True)
        watcher: Any = stub.WatchRun(watch)
        first = _events([await watcher.read()])  # it has joined: it reads deltas
        server_tools.release.set()
        # The LLM call has ended once its tool call (which hangs) has started.
        while sum(e.HasField("tool_call_started") for e in first) < 2:
            first += _events([await watcher.read()])
        watcher.cancel()
        started = [e.sequence for e in first if e.HasField("iteration_started")][1]
        rejoined = await _watch_until(stub, "d-after", started, "llm_responded")
        await stub.CancelRun(service_pb2.CancelRunRequest(run_id="d-after"))

    deltas = [e.llm_delta for e in rejoined if e.HasField("llm_delta")]
    assert [(d.iteration, d.index) for d in deltas][:1] == [(2, 0)]  # a catch-up, from 0
    assert "".join(d.text for d in deltas) == TEXT
    responded = rejoined[-1].llm_responded
    assert responded.content == TEXT  # the whole text, whatever the deltas were


async def test_a_watcher_rejoining_after_the_run_ended_gets_no_deltas_only_llm_responded(
    stub: Stub,
) -> None:
    # The run streams its answer; no stream reads the deltas, so they go when it ends.
    spec = run_spec([turn(TEXT)], run_id="d-ended")
    request = service_pb2.StreamToolLoopRequest(spec=spec)
    async with asyncio.timeout(WAIT_S):
        live = _events([r async for r in stub.StreamToolLoop(request)])
        (started,) = [e.sequence for e in live if e.HasField("iteration_started")]
        watch = service_pb2.WatchRunRequest(
            run_id="d-ended", after_sequence=started, stream_deltas=True
        )
        rejoined = _events([r async for r in stub.WatchRun(watch)])

    assert not any(e.HasField("llm_delta") for e in rejoined)
    assert rejoined[0].llm_responded.content == TEXT
    assert rejoined[-1].HasField("run_completed")
