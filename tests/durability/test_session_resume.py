"""Session runs across a sidecar killed with SIGKILL: the run waits for its client to
re-attach to the restarted sidecar, then resumes from the SQLite log around the tools the
client re-declares (an idempotent call in flight is invoked again with its call id; another
gets the interrupted record)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, StreamedEvent
from cleveragents.tool import (
    LLMRequest,
    LLMResponded,
    LLMResponse,
    RunCompleted,
    RunResumed,
    ToolCall,
    ToolCallCompleted,
    ToolCallStarted,
    ToolRegistry,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, session_pb2, types_pb2

from .conftest import SidecarProcess, Spawn

LONG_S = 60


def _start(
    tool: types_pb2.ToolSpec, run_id: str, after: int = 0, **spec_fields: Any
) -> session_pb2.SessionRequest:
    script = [
        {"tool_calls": [{"id": "r1", "name": tool.name, "arguments": {}}]},
        {"content": "done"},
    ]
    spec = types_pb2.RunSpec(prompt="go", run_id=run_id, **spec_fields)
    spec.llm.script = json.dumps(script)
    start = session_pb2.SessionStart(spec=spec, tools=[tool])
    if after:
        start.reattach_run_id, start.after_sequence = run_id, after
    return session_pb2.SessionRequest(start=start)


async def _read(
    call: grpc.aio.StreamStreamCall[session_pb2.SessionRequest, session_pb2.SessionResponse],
    events: list[events_pb2.RunEvent],
) -> session_pb2.ToolInvocation | None:
    """Events into ``events`` until an invocation (returned) or the end (``None``)."""
    while (response := await call.read()) is not grpc.aio.EOF:
        assert isinstance(response, session_pb2.SessionResponse)
        if response.HasField("event"):
            events.append(response.event)
        if response.HasField("tool_invocation"):
            return response.tool_invocation
    return None


async def _killed_mid_call(
    first: SidecarProcess, tool: types_pb2.ToolSpec, run_id: str, **spec_fields: Any
) -> tuple[list[events_pb2.RunEvent], session_pb2.ToolInvocation]:
    events: list[events_pb2.RunEvent] = []
    async with grpc.aio.insecure_channel(first.address) as channel:
        call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
        await call.write(_start(tool, run_id, **spec_fields))
        invocation = await _read(call, events)
        assert invocation is not None
        first.kill()  # the call is in flight: sent, not answered
    return events, invocation


def check_resumed(log: list[StreamedEvent], before: list[events_pb2.RunEvent]) -> RunResumed:
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert [e.sequence for e in log[: len(before)]] == [e.sequence for e in before]
    assert isinstance(log[-1].event, RunCompleted)
    assert sum(isinstance(e.event, RunCompleted) for e in log) == 1
    (resumed,) = [e.event for e in log if isinstance(e.event, RunResumed)]
    assert isinstance(resumed, RunResumed)
    return resumed


async def test_an_idempotent_call_owed_at_a_kill_is_invoked_again_once_after_the_client_reattaches(
    spawn: Spawn,
) -> None:
    tool = types_pb2.ToolSpec(name="remote", idempotent=True)
    first = spawn()
    async with asyncio.timeout(LONG_S):
        before, invocation = await _killed_mid_call(first, tool, "i")
        second = spawn(session_reattach_s="60")
        async with (
            grpc.aio.insecure_channel(second.address) as channel,
            AsyncSidecarClient(second.address) as client,
        ):
            assert (await client.get_run("i")).state == "running"  # waiting for its client
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(_start(tool, "i", before[-1].sequence))
            after: list[events_pb2.RunEvent] = []
            again = await _read(call, after)
            assert again is not None
            await call.write(
                session_pb2.SessionRequest(
                    tool_result=session_pb2.ToolResult(call_id=again.call_id, output='{"n": 1}')
                )
            )
            assert await _read(call, after) is None
            assert await call.code() is grpc.StatusCode.OK
            log = [e async for e in client.watch("i")]

    assert (again.call_id, again.idempotency_key) == ("r1", invocation.idempotency_key)
    assert [e.sequence for e in after] == list(range(len(before) + 1, len(log) + 1))
    resumed = check_resumed(log, before)
    assert resumed.rerun_call_ids == ("r1",)
    records = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert [(r.call_id, r.success, r.output) for r in records] == [("r1", True, {"n": 1})]
    assert sum(isinstance(e.event, ToolCallStarted) for e in log) == 1


@pytest.mark.parametrize("event_store", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("spec_fields", "offered"),
    [
        # The client's `echo` beside the server's `sleep`: the server's echo is not offered.
        ({"tool_names": ["sleep"]}, ["echo", "sleep"]),
        ({"no_server_tools": True}, ["echo"]),
    ],
    ids=["named-server-tools", "no-server-tools"],
)
async def test_a_session_run_whose_own_tool_is_named_like_a_server_tool_resumes_after_a_kill(
    spawn: Spawn, spec_fields: dict[str, Any], offered: list[str]
) -> None:
    # Its run_started lists the client's echo among the tools offered: read back at the
    # restart, that name is the client's tool again, not a server tool it shadows.
    tool = types_pb2.ToolSpec(name="echo", idempotent=True)
    first = spawn()
    async with asyncio.timeout(LONG_S):
        before, _ = await _killed_mid_call(first, tool, "own", **spec_fields)
        second = spawn(session_reattach_s="60")
        async with (
            grpc.aio.insecure_channel(second.address) as channel,
            AsyncSidecarClient(second.address) as client,
        ):
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(_start(tool, "own", before[-1].sequence, **spec_fields))
            again = await _read(call, [])
            assert again is not None, await call.details()
            answer = session_pb2.ToolResult(call_id=again.call_id, output='{"mine": true}')
            await call.write(session_pb2.SessionRequest(tool_result=answer))
            assert await _read(call, []) is None
            log = [e async for e in client.watch("own")]

    assert sorted(before[0].run_started.spec.tool_names) == offered
    check_resumed(log, before)
    records = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert [(r.tool_name, r.output) for r in records] == [("echo", {"mine": True})]


async def test_a_call_owed_at_a_kill_of_a_tool_not_idempotent_gets_the_interrupted_record(
    spawn: Spawn,
) -> None:
    tool = types_pb2.ToolSpec(name="remote")
    first = spawn()
    async with asyncio.timeout(LONG_S):
        before, _ = await _killed_mid_call(first, tool, "p")
        second = spawn(session_reattach_s="60")
        async with (
            grpc.aio.insecure_channel(second.address) as channel,
            AsyncSidecarClient(second.address) as client,
        ):
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(_start(tool, "p", before[-1].sequence))
            assert await _read(call, []) is None  # nothing more is asked of the client
            log = [e async for e in client.watch("p")]

    resumed = check_resumed(log, before)
    assert resumed.interrupted_call_ids == ("r1",)
    (record,) = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert not record.success
    assert "interrupted by a sidecar restart" in (record.error or "")


def llm_session_start(run_id: str, after: int = 0) -> session_pb2.SessionRequest:
    start = session_pb2.SessionStart(
        spec=types_pb2.RunSpec(prompt="go", run_id=run_id), client_llm=True
    )
    if after:
        start.reattach_run_id, start.after_sequence = run_id, after
    return session_pb2.SessionRequest(start=start)


async def asked_of(
    call: grpc.aio.StreamStreamCall[session_pb2.SessionRequest, session_pb2.SessionResponse],
    events: list[events_pb2.RunEvent],
) -> session_pb2.LlmInvocation:
    """Events into ``events`` until the sidecar asks the client's LLM (returned)."""
    while (response := await call.read()) is not grpc.aio.EOF:
        assert isinstance(response, session_pb2.SessionResponse)
        events.extend([response.event] if response.HasField("event") else response.events)
        if response.HasField("llm_invocation"):
            return response.llm_invocation
    raise AssertionError("the session ended before its LLM was asked")


def llm_answer(
    request_id: str, content: str = "", *calls: types_pb2.ToolCall
) -> session_pb2.SessionRequest:
    result = session_pb2.LlmResult(request_id=request_id, content=content, tool_calls=calls)
    return session_pb2.SessionRequest(llm_result=result)


@pytest.mark.parametrize("event_store", ["sqlite"], indirect=True)
async def test_a_client_llm_call_in_flight_at_a_kill_is_asked_again_after_the_client_reattaches(
    spawn: Spawn,
) -> None:
    first = spawn()
    echo = types_pb2.ToolCall(id="e1", name="echo", arguments='{"text": "hi"}')
    before: list[events_pb2.RunEvent] = []
    async with asyncio.timeout(LONG_S):
        async with grpc.aio.insecure_channel(first.address) as channel:
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(llm_session_start("m"))
            asked = await asked_of(call, before)
            await call.write(llm_answer(asked.request_id, "echo first", echo))
            in_flight = await asked_of(call, before)  # after the echo: never answered
            first.kill()
        second = spawn(session_reattach_s="60")
        async with (
            grpc.aio.insecure_channel(second.address) as channel,
            AsyncSidecarClient(second.address) as client,
        ):
            call = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await call.write(llm_session_start("m", before[-1].sequence))
            after: list[events_pb2.RunEvent] = []
            again = await asked_of(call, after)
            await call.write(llm_answer(again.request_id, "done"))
            while await call.read() is not grpc.aio.EOF:
                pass
            assert await call.code() is grpc.StatusCode.OK
            log = [e async for e in client.watch("m")]

    assert (asked.request_id, in_flight.request_id, again.request_id) == ("llm_1", "llm_2", "llm_2")
    assert list(again.messages) == list(in_flight.messages)  # the conversation rebuilt
    assert in_flight.messages[-1].tool_call_id == "e1"
    resumed = check_resumed(log, before)
    assert (resumed.rerun_call_ids, resumed.interrupted_call_ids) == ((), ())
    responses = [e.event for e in log if isinstance(e.event, LLMResponded)]
    assert [r.content for r in responses] == ["echo first", "done"]
    assert sum(isinstance(e.event, ToolCallStarted) for e in log) == 1  # echo ran once
    assert isinstance(log[-1].event, RunCompleted)
    assert log[-1].event.result.content == "done"


class _PlannedLLM:
    """The client's LLM: asks for ``remote`` first, then answers; counts what it was sent."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    async def call(self, request: LLMRequest) -> LLMResponse:
        self.sent.append(len(request.messages))
        if request.iteration == 1:
            return LLMResponse("", [ToolCall("r1", "remote", {})])
        return LLMResponse("done")


@pytest.mark.parametrize("event_store", ["sqlite"], indirect=True)
async def test_the_python_client_hosting_its_llm_reattaches_to_a_restarted_sidecar_and_finishes(
    spawn: Spawn, tmp_path: Path
) -> None:
    # The restarted sidecar takes the same address: a socket file no other test can take.
    address = f"unix:{tmp_path / 'sidecar.sock'}"
    tools, running, release, ran = ToolRegistry(), asyncio.Event(), asyncio.Event(), [0]

    @tools.tool(idempotent=True)
    async def remote() -> dict[str, int]:
        """Runs until released."""
        ran[0] += 1
        running.set()
        await release.wait()
        return {"n": 1}

    llm = _PlannedLLM()
    first = spawn(listen=address)
    async with asyncio.timeout(LONG_S), AsyncSidecarClient(address) as client:
        stream = client.session("go", tools=tools, llm=llm, run_id="py", reattach=True)
        session = asyncio.create_task(_collect(stream))
        await running.wait()
        first.kill()
        release.set()  # its answer is lost with the stream, and sent again after re-attaching
        spawn(listen=address, session_reattach_s="60")
        seen = await session
        log = [e async for e in client.watch("py")]

    assert [e.sequence for e in seen] == [e.sequence for e in log]
    resumed = check_resumed(log, [])
    assert resumed.rerun_call_ids == ("r1",)
    assert ran == [1]  # asked again, answered from what the client kept
    # The restarted sidecar sent the whole conversation again; the client took it whole.
    assert llm.sent == [1, 3]
    assert isinstance(log[-1].event, RunCompleted)
    assert log[-1].event.result.content == "done"


async def _collect(stream: AsyncIterator[StreamedEvent]) -> list[StreamedEvent]:
    return [streamed async for streamed in stream]
