"""The Python clients send a hosted LLM's deltas several to a message when it streams faster
than they are written, and only to a sidecar whose invocation takes them so."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarClient
from cleveragents.client.session_logic import MAX_DELTAS_A_MESSAGE, SessionLogic
from cleveragents.tool import LLMRequest, LLMResponse, ResponseDelta, RunCompleted
from cleveragents.toolruntime.v1 import events_pb2, session_pb2, types_pb2
from cleveragents.wire import llm_delta_request, llm_result_request

from .conftest import WAIT_S

PIECES = 500


class Burst:
    """A client-hosted LLM that streams ``PIECES`` deltas at once, faster than any write."""

    async def call(self, request: LLMRequest) -> LLMResponse:
        assert request.deltas is not None
        for i in range(PIECES):
            request.deltas(ResponseDelta(f"{i} "))
        return LLMResponse("".join(f"{i} " for i in range(PIECES)))


class OneTurn:
    """A sidecar of one LLM turn: it invokes the client's LLM once, keeps every message the
    client sends until the answer, and completes the run."""

    def __init__(self, accepts_delta_batches: bool) -> None:
        self.accepts = accepts_delta_batches
        self.received: list[session_pb2.SessionRequest] = []

    async def Session(
        self, request_iterator: AsyncIterator[session_pb2.SessionRequest], context: Any
    ) -> AsyncIterator[session_pb2.SessionResponse]:
        await anext(aiter(request_iterator))  # the start
        started = events_pb2.RunEvent(sequence=1, run_id="r1", run_started=events_pb2.RunStarted())
        yield session_pb2.SessionResponse(event=started)
        invocation = session_pb2.LlmInvocation(
            request_id="llm_1", iteration=1, accepts_delta_batches=self.accepts
        )
        yield session_pb2.SessionResponse(llm_invocation=invocation)
        async for message in request_iterator:
            self.received.append(message)
            if message.WhichOneof("kind") == "llm_result":
                break
        result = types_pb2.ToolCallRunResult(run_id="r1", content="done", iterations=1)
        done = events_pb2.RunEvent(
            sequence=2, run_id="r1", run_completed=events_pb2.RunCompleted(result=result)
        )
        yield session_pb2.SessionResponse(event=done)

    def deltas(self) -> list[session_pb2.LlmResultDelta]:
        """Every delta received, in order, however many a message carried."""
        out: list[session_pb2.LlmResultDelta] = []
        for message in self.received:
            if message.HasField("llm_delta"):
                out.append(message.llm_delta)
            elif message.HasField("llm_deltas"):
                out.extend(message.llm_deltas.deltas)
        return out


async def serve(servicer: OneTurn) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    session = grpc.stream_stream_rpc_method_handler(
        servicer.Session,
        request_deserializer=session_pb2.SessionRequest.FromString,
        response_serializer=session_pb2.SessionResponse.SerializeToString,
    )
    name = "cleveragents.toolruntime.v1.ToolRuntimeService"
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(name, {"Session": session})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def delta_messages(servicer: OneTurn) -> list[str]:
    return [
        m.WhichOneof("kind") or ""
        for m in servicer.received
        if m.WhichOneof("kind") != "llm_result"
    ]


@pytest.mark.parametrize("accepts", [True, False], ids=["batches", "one-by-one"])
async def test_the_async_client_sends_what_queued_during_a_write_in_one_message(
    accepts: bool,
) -> None:
    servicer = OneTurn(accepts)
    server, address = await serve(servicer)
    try:
        async with AsyncSidecarClient(address) as client, asyncio.timeout(WAIT_S):
            events = [e async for e in client.session("go", llm=Burst())]
    finally:
        await server.stop(None)

    assert isinstance(events[-1].event, RunCompleted)
    deltas = servicer.deltas()
    assert [d.index for d in deltas] == list(range(PIECES))
    assert "".join(d.text for d in deltas) == "".join(f"{i} " for i in range(PIECES))
    if accepts:  # all came before the first write: as many as a message may carry, twice
        assert delta_messages(servicer) == ["llm_deltas", "llm_deltas"]
        assert len(servicer.received[0].llm_deltas.deltas) == MAX_DELTAS_A_MESSAGE
    else:
        assert delta_messages(servicer) == ["llm_delta"] * PIECES


@pytest.mark.parametrize("accepts", [True, False], ids=["batches", "one-by-one"])
async def test_the_blocking_client_streams_every_delta_in_order(accepts: bool) -> None:
    servicer = OneTurn(accepts)
    server, address = await serve(servicer)

    def run() -> list[Any]:
        with SidecarClient(address) as client:
            return list(client.session("go", llm=Burst()))

    try:
        async with asyncio.timeout(WAIT_S):
            events = await asyncio.to_thread(run)
    finally:
        await server.stop(None)

    assert isinstance(events[-1].event, RunCompleted)
    assert [d.index for d in servicer.deltas()] == list(range(PIECES))
    if not accepts:
        assert set(delta_messages(servicer)) == {"llm_delta"}


def test_a_blocking_writer_takes_the_deltas_queued_behind_it_in_one_message() -> None:
    logic = SessionLogic("go", tools=[], llm=Burst(), approver=None, options={})
    logic.delta_batches.add("llm_1")
    outgoing: queue.SimpleQueue[session_pb2.SessionRequest | None] = queue.SimpleQueue()
    for index in range(300):
        outgoing.put(llm_delta_request("llm_1", index, ResponseDelta("x")))
    outgoing.put(llm_result_request("llm_1", LLMResponse("x" * 300), None))
    outgoing.put(llm_delta_request("llm_2", 0, ResponseDelta("y")))  # no batches for it
    outgoing.put(llm_delta_request("llm_2", 1, ResponseDelta("y")))
    outgoing.put(None)

    sent = list(logic.requests(outgoing))

    assert [m.WhichOneof("kind") for m in sent] == [
        "llm_deltas", "llm_deltas", "llm_result", "llm_delta", "llm_delta",
    ]  # fmt: skip
    assert [len(m.llm_deltas.deltas) for m in sent[:2]] == [MAX_DELTAS_A_MESSAGE, 44]
    assert [d.index for m in sent[:2] for d in m.llm_deltas.deltas] == list(range(300))
