"""A Session client that never answers frees its run slot: LLM and tool invocations time out."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from cleveragents.sidecar import ConfigError, SidecarConfig, load_config
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost, ClientLLMCaller
from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, session_pb2, types_pb2
from cleveragents.wire import LlmAnswer, ToolAnswer

from .conftest import (
    SidecarFactory,
    drain_session,
    next_response,
    rpc_code,
    run_spec,
    session_start,
    stream_code,
)


async def next_invocation(session: Any) -> session_pb2.SessionResponse:
    """Read a raw session until an LLM or tool invocation arrives."""
    while True:
        response = await next_response(session)
        if response.HasField("llm_invocation") or response.HasField("tool_invocation"):
            return response


async def test_a_client_llm_that_never_answers_fails_the_run_and_frees_its_slot(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_concurrent_runs=1, client_llm_timeout_s=0.3)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        session = stub.Session()
        await session.write(session_start(run_spec(), client_llm=True))
        invocation = (await next_invocation(session)).llm_invocation
        received = time.time()
        assert invocation.request_id == "llm_1"
        # The client is told when the sidecar stops waiting.
        assert received - 1 < invocation.deadline.ToNanoseconds() / 1e9 <= received + 0.3
        events = await drain_session(session)  # never answered

        failed = events[-1]
        assert failed.HasField("run_failed")
        assert failed.run_failed.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
        assert "did not answer LLM invocation 'llm_1' within 0.3s" in failed.run_failed.message
        # The one slot is free again: a new run fits under max_concurrent_runs=1.
        spec = run_spec([{"content": "done"}])
        response = await stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec), timeout=5)
        assert response.result.content == "done"


async def test_a_client_tool_that_never_answers_becomes_a_timeout_record_the_model_sees(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_concurrent_runs=1, default_tool_timeout_s=0.3)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        session = stub.Session()
        await session.write(
            session_start(run_spec(), types_pb2.ToolSpec(name="stuck"), client_llm=True)
        )
        first = (await next_invocation(session)).llm_invocation
        stuck = types_pb2.ToolCall(id="s1", name="stuck", arguments="{}")
        await session.write(
            session_pb2.SessionRequest(
                llm_result=session_pb2.LlmResult(request_id=first.request_id, tool_calls=[stuck])
            )
        )
        assert (await next_invocation(session)).tool_invocation.call_id == "s1"
        second = (await next_invocation(session)).llm_invocation  # the tool was never answered

        assert second.messages[-1].tool_call_id == "s1"
        assert second.messages[-1].is_error is True
        assert "timed out after 0.3s" in second.messages[-1].content
        await session.write(
            session_pb2.SessionRequest(
                llm_result=session_pb2.LlmResult(request_id=second.request_id, content="end")
            )
        )
        events = await drain_session(session)
        [record] = events[-1].run_completed.result.tool_call_history
        assert record.error_kind == types_pb2.ERROR_KIND_TIMEOUT


async def test_a_client_tool_timeout_past_the_sidecars_cap_is_refused(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_client_tool_timeout_s=120)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        session = stub.Session()
        slow = types_pb2.ToolSpec(name="build")
        slow.timeout.FromSeconds(10**9)
        await session.write(session_start(run_spec([{"content": "done"}]), slow))
        code, details = await stream_code(session)

    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "tools[build].timeout of 1e+09s" in details
    assert "max_client_tool_timeout_s of 120s" in details


async def test_a_late_llm_answer_after_the_timeout_is_ignored_once() -> None:
    host = ClientHost(60.0, llm_timeout_s=0.05)
    caller = ClientLLMCaller(host)
    with pytest.raises(SidecarError) as timed_out:
        await caller.call(LLMRequest([Message(Role.USER, "go")], [], 1))
    assert timed_out.value.code == grpc.StatusCode.DEADLINE_EXCEEDED

    host.resolve_llm(LlmAnswer("llm_1", LLMResponse("too late")))  # ignored, not a violation
    with pytest.raises(SidecarError) as twice:
        host.resolve_llm(LlmAnswer("llm_1", LLMResponse("again")))
    assert twice.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert not host.has_pending


async def test_a_silent_client_is_no_reason_for_unary_calls_to_wait(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_concurrent_runs=1, client_llm_timeout_s=60)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        session = stub.Session()
        await session.write(session_start(run_spec(), client_llm=True))
        await next_invocation(session)
        spec = run_spec([{"content": "done"}])
        code, details = await rpc_code(stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec)))
        session.cancel()

    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_concurrent_runs" in details


@pytest.mark.parametrize(
    "settings",
    [
        {"client_llm_timeout_s": 0},
        {"client_llm_timeout_s": float("inf")},
        {"max_client_tool_timeout_s": -1},
        {"default_tool_timeout_s": 120, "max_client_tool_timeout_s": 60},
    ],
)
def test_client_timeouts_must_be_positive_and_consistent(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SidecarConfig(**settings)


def test_the_client_llm_timeout_comes_from_the_environment() -> None:
    config = load_config(env={"CLEVERAGENTS_SIDECAR_CLIENT_LLM_TIMEOUT_S": "12.5"})
    assert config.limits.client_llm_timeout_s == 12.5


async def test_a_late_llm_answer_after_a_cancelled_call_is_ignored_once() -> None:
    # A budget or CancelRun may end the run while the client's LLM still answers.
    host = ClientHost(60.0, llm_timeout_s=60.0)
    caller = ClientLLMCaller(host)
    call = asyncio.create_task(caller.call(LLMRequest([Message(Role.USER, "go")], [], 1)))
    assert await host.outbox.get_many(1 << 20)  # the invocation went out
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    host.resolve_llm(LlmAnswer("llm_1", LLMResponse("too late")))  # ignored, not a violation
    with pytest.raises(SidecarError) as twice:
        host.resolve_llm(LlmAnswer("llm_1", LLMResponse("again")))
    assert twice.value.code == grpc.StatusCode.FAILED_PRECONDITION


async def test_an_invocation_too_large_to_send_leaves_no_call_waiting() -> None:
    # Its call fails, and the model may use the id again: the next call is sent.
    host = ClientHost(60.0, max_message_bytes=2000)
    spec = ToolSpec("mine", "A client tool.")
    registry = ToolRegistry()
    host.register_tools(registry, [spec])
    runner = ToolRunner(registry)
    too_large = await runner.run(ToolCall("c1", "mine", {"text": "x" * 5000}), iteration=1)
    assert not too_large.success
    assert "it was not sent" in (too_large.error or "")
    assert not host.has_pending

    again = asyncio.create_task(runner.run(ToolCall("c1", "mine", {"text": "x"}), iteration=2))
    assert await host.outbox.get_many(1 << 20)  # sent, not refused as a reused id
    host.resolve_tool(ToolAnswer("c1", output='{"ok": true}'))
    record = await again
    assert record.success, record.error
