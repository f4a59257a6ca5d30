"""A client-hosted LLM's deltas several to a message (llm_deltas): each taken as if it came
alone, the same numbering, checks and bounds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc
import pytest

from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, session_pb2

from .conftest import WAIT_S, run_spec, session_start
from .test_deltas import assert_calls_assemble, deltas_of, events_of

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub
    from tests.conftest import ServeSidecar


async def _session(
    stub: Stub, batches: Sequence[Sequence[session_pb2.LlmResultDelta]], answer: str
) -> tuple[list[events_pb2.RunEvent], list[session_pb2.LlmInvocation], grpc.StatusCode | None, str]:
    """A Session whose client LLM sends ``batches`` (each one ``llm_deltas`` message), then
    answers ``answer``: the events, the invocations, and the status it ended with."""
    call = stub.Session()
    start = session_start(run_spec(), client_llm=True)
    start.start.stream_deltas = True
    await call.write(start)
    events: list[events_pb2.RunEvent] = []
    invocations: list[session_pb2.LlmInvocation] = []
    code, details = None, ""
    try:
        async with asyncio.timeout(WAIT_S):
            async for response in call:
                events += events_of([response])
                if response.HasField("llm_invocation"):
                    invocation = response.llm_invocation
                    invocations.append(invocation)
                    for batch in batches:
                        message = session_pb2.SessionRequest()
                        for delta in batch:
                            piece = message.llm_deltas.deltas.add()
                            piece.CopyFrom(delta)
                            piece.request_id = piece.request_id or invocation.request_id
                        await call.write(message)
                    result = session_pb2.LlmResult(request_id=invocation.request_id, content=answer)
                    await call.write(session_pb2.SessionRequest(llm_result=result))
                if events and events[-1].WhichOneof("payload") in (
                    "run_completed", "run_failed", "run_cancelled",
                ):  # fmt: skip
                    await call.done_writing()
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code(), exc.details() or ""
    return events, invocations, code, details


def _texts(*texts: str, first: int = 0) -> list[session_pb2.LlmResultDelta]:
    return [session_pb2.LlmResultDelta(index=i, text=t) for i, t in enumerate(texts, first)]


async def test_an_invocation_says_the_sidecar_takes_deltas_several_to_a_message(
    stub: Stub,
) -> None:
    _, invocations, code, _ = await _session(stub, [], "done")

    assert code is None
    assert [i.accepts_delta_batches for i in invocations] == [True]


async def test_deltas_sent_several_to_a_message_stream_the_answer_in_order(stub: Stub) -> None:
    batches = [_texts("Hel", "lo"), _texts(", ", "wor", first=2), _texts("ld!", first=4)]

    events, _, code, _ = await _session(stub, batches, "Hello, world!")

    assert code is None
    assert "".join(d.text for d in deltas_of(events)) == "Hello, world!"
    assert_calls_assemble(events)
    assert events[-1].run_completed.result.content == "Hello, world!"


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        (_texts("a", "b", first=0)[:1] + _texts("c", first=2), "llm_delta index 2"),
        ([*_texts("a"), session_pb2.LlmResultDelta(request_id="llm_9", index=1, text="x")],
         "'llm_9', which is not"),
        ([*_texts("a"), session_pb2.LlmResultDelta(index=1, tool_call_index=-1)],
         "tool_call_index -1"),
    ],
    ids=["gap", "unknown-request", "negative-call"],
)  # fmt: skip
async def test_a_bad_delta_inside_a_message_refuses_it_as_alone(
    stub: Stub, batch: list[session_pb2.LlmResultDelta], says: str
) -> None:
    _, _, code, details = await _session(stub, [batch], "ab")

    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert says in details


async def test_batched_deltas_with_long_ids_fail_the_run_at_the_bound_and_are_not_kept(
    serve_sidecar: ServeSidecar,
) -> None:
    """Messages of three deltas, each with a 0.9 MiB ``tool_call_id``, against
    ``max_message_bytes`` of 4 MiB: the fifth delta passes what the answer may carry, in the
    middle of a message, and the run fails RESOURCE_EXHAUSTED; the rest are dropped."""
    sidecar = serve_sidecar(max_message_bytes=4 * 1024 * 1024)
    before = sidecar.status_kib("VmRSS")
    events: list[events_pb2.RunEvent] = []
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
        start = session_start(run_spec(), client_llm=True)
        start.start.stream_deltas = True
        await call.write(start)

        async def stream(request_id: str) -> None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                for first in range(0, 120, 3):
                    message = session_pb2.SessionRequest()
                    for index in range(first, first + 3):
                        message.llm_deltas.deltas.add(
                            request_id=request_id, index=index, tool_call_index=index,
                            tool_call_id=chr(97 + index % 26) * (900 * 1024),
                        )  # fmt: skip
                    await call.write(message)
                answer = session_pb2.LlmResult(request_id=request_id, error="all sent")
                await call.write(session_pb2.SessionRequest(llm_result=answer))

        with contextlib.suppress(grpc.aio.AioRpcError):
            async with asyncio.timeout(WAIT_S * 12), asyncio.TaskGroup() as group:
                async for response in call:
                    events += events_of([response])
                    if response.HasField("llm_invocation"):
                        group.create_task(stream(response.llm_invocation.request_id))
                    if events and events[-1].HasField("run_failed"):
                        break

    failed = events[-1].run_failed
    assert failed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "llm_delta 4 for request_id 'llm_1'" in failed.message
    assert "max_message_bytes" in failed.message
    assert sidecar.status_kib("VmHWM") - before < 100 * 1024
