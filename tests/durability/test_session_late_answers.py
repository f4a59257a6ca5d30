"""Answers that come late across a re-attach: a client whose LLM call was in flight when its
sidecar died may still send that answer after it re-attaches, besides its answer to the
invocation the restarted sidecar sends again under the same request id. The first answer to
arrive once the sidecar asks again is taken; the one other answer is ignored, not a
violation that ends the session."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.tool import LLMResponded, LLMResponse, RunCompleted
from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, types_pb2
from cleveragents.wire import LlmAnswer

from .conftest import Spawn
from .test_session_resume import asked_of, check_resumed, llm_answer, llm_session_start

LONG_S = 60


@pytest.mark.parametrize("event_store", ["sqlite"], indirect=True)
async def test_a_late_llm_answer_and_the_answer_to_its_reasking_after_a_restart_end_ok(
    spawn: Spawn,
) -> None:
    first = spawn()
    echo = types_pb2.ToolCall(id="e1", name="echo", arguments='{"text": "hi"}')
    again_echo = types_pb2.ToolCall(id="e2", name="echo", arguments='{"text": "late"}')
    before: list[events_pb2.RunEvent] = []
    async with asyncio.timeout(LONG_S):
        async with grpc.aio.insecure_channel(first.address) as channel:
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(llm_session_start("m"))
            asked = await asked_of(call, before)
            await call.write(llm_answer(asked.request_id, "echo first", echo))
            await asked_of(call, before)  # llm_2, in flight when the sidecar dies
            first.kill()
        second = spawn(session_reattach_s="60")
        async with (
            grpc.aio.insecure_channel(second.address) as channel,
            AsyncSidecarClient(second.address) as client,
        ):
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(llm_session_start("m", before[-1].sequence))
            after: list[events_pb2.RunEvent] = []
            again = await asked_of(call, after)  # llm_2 asked again
            # The old job's answer arrives first, then the answer to the re-sent invocation.
            await call.write(llm_answer(again.request_id, "late", again_echo))
            await call.write(llm_answer(again.request_id, "cached"))
            last = await asked_of(call, after)  # the run went on with the first answer
            await call.write(llm_answer(last.request_id, "done"))
            while await call.read() is not grpc.aio.EOF:
                pass
            assert await call.code() is grpc.StatusCode.OK
            log = [e async for e in client.watch("m")]

    assert (again.request_id, last.request_id) == ("llm_2", "llm_3")
    check_resumed(log, before)
    responses = [e.event for e in log if isinstance(e.event, LLMResponded)]
    assert [r.content for r in responses] == ["echo first", "late", "done"]
    assert isinstance(log[-1].event, RunCompleted)


def test_a_forgotten_llm_request_ignores_one_answer_before_it_is_asked_again() -> None:
    host = ClientHost(default_tool_timeout_s=10)
    host.forget("llm", "llm_2")  # what a re-attach does for the request it asks again
    host.resolve_llm(LlmAnswer("llm_2", LLMResponse("late"), None))  # before it is asked
    with pytest.raises(SidecarError, match="not awaiting a result"):
        host.resolve_llm(LlmAnswer("llm_2", LLMResponse("again"), None))
