"""The blocking ``SidecarClient``: unit tests on ``grpc_testing`` and runs on a real server.

The blocking calls run in worker threads, since the server (or the test driving the fake
channel) lives on the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import grpc
import grpc_testing
import pytest

from cleveragents import wire as convert
from cleveragents.client import RunFailedError, SidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.sidecar import Sidecar
from cleveragents.tool import (
    ErrorKind,
    IterationStarted,
    LLMRequest,
    LLMResponse,
    Role,
    RunCompleted,
    RunStarted,
    StopReason,
    ToolCall,
    ToolCallRecord,
    ToolCallRunResult,
    ToolRegistry,
    ToolSpec,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, types_pb2

from .conftest import (
    WAIT_S,
    FailingProvider,
    ServerTools,
    SidecarFactory,
    assert_well_formed,
    call,
    echo_script,
    turn,
)

T = TypeVar("T")
SERVICE = service_pb2.DESCRIPTOR.services_by_name["ToolRuntimeService"]


async def in_thread(fn: Callable[[], T]) -> T:
    """Run a blocking call in a worker thread, bounded in time."""
    async with asyncio.timeout(WAIT_S):
        return await asyncio.to_thread(fn)


# -- grpc_testing ------------------------------------------------------------------------------


class FakeChannel:
    """A ``grpc_testing`` channel and the client on it."""

    def __init__(self) -> None:
        self.channel: Any = grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())
        self.client = SidecarClient(channel=self.channel)

    async def take_unary(self, method: str) -> tuple[Any, Any, Any]:
        return await in_thread(
            lambda: self.channel.take_unary_unary(SERVICE.methods_by_name[method])
        )

    async def take_stream(self, method: str) -> tuple[Any, Any, Any]:
        return await in_thread(
            lambda: self.channel.take_unary_stream(SERVICE.methods_by_name[method])
        )


@pytest.fixture
def fake() -> FakeChannel:
    return FakeChannel()


def partial_result() -> types_pb2.ToolCallRunResult:
    record = convert.record_to_pb(
        ToolCallRecord("echo", {"text": "a"}, {"text": "a"}, 1.5, True, None, 1, "c1")
    )
    return types_pb2.ToolCallRunResult(
        run_id="r-9",
        content="so far",
        tool_call_history=[record],
        iterations=1,
        stop_reason=types_pb2.STOP_REASON_ERROR,
    )


async def test_run_tool_loop_sends_the_run_spec(fake: FakeChannel) -> None:
    script = [turn("", call("c1", "echo", text="x")), turn("done")]
    pending = asyncio.create_task(
        in_thread(
            lambda: fake.client.run_tool_loop(
                "the prompt", max_iterations=7, script=script, tool_names=["echo", "sleep"]
            )
        )
    )
    _, request, rpc = await fake.take_unary("RunToolLoop")
    rpc.terminate(service_pb2.RunToolLoopResponse(), (), grpc.StatusCode.OK, "")
    await pending

    spec = request.spec
    assert spec.prompt == "the prompt"
    assert spec.max_iterations == 7
    assert list(spec.tool_names) == ["echo", "sleep"]
    assert json.loads(spec.llm.script) == script
    assert (spec.run_id, spec.detach, spec.llm.profile) == ("", False, "")


async def test_run_tool_loop_returns_the_result(fake: FakeChannel) -> None:
    pending = asyncio.create_task(in_thread(lambda: fake.client.run_tool_loop("go")))
    _, _, rpc = await fake.take_unary("RunToolLoop")
    result = partial_result()
    result.stop_reason = types_pb2.STOP_REASON_FINAL_ANSWER
    rpc.terminate(service_pb2.RunToolLoopResponse(result=result), (), grpc.StatusCode.OK, "")
    got = await pending

    assert isinstance(got, ToolCallRunResult)
    assert (got.run_id, got.content, got.stop_reason) == ("r-9", "so far", StopReason.FINAL_ANSWER)
    assert [(r.call_id, dict(r.output)) for r in got.tool_call_history] == [("c1", {"text": "a"})]


async def test_not_found_status_becomes_sidecar_rpc_error(fake: FakeChannel) -> None:
    pending = asyncio.create_task(in_thread(lambda: fake.client.get_run("ghost")))
    _, request, rpc = await fake.take_unary("GetRun")
    rpc.terminate(service_pb2.GetRunResponse(), (), grpc.StatusCode.NOT_FOUND, "no run 'ghost'")
    with pytest.raises(SidecarRpcError) as failure:
        await pending

    assert request.run_id == "ghost"
    assert failure.value.code == grpc.StatusCode.NOT_FOUND
    assert failure.value.details == "no run 'ghost'"
    assert not isinstance(failure.value, RunFailedError)


async def test_result_trailer_becomes_run_failed_error(fake: FakeChannel) -> None:
    pending = asyncio.create_task(in_thread(lambda: fake.client.run_tool_loop("go")))
    _, _, rpc = await fake.take_unary("RunToolLoop")
    trailer = (("cleveragents-result-bin", partial_result().SerializeToString()),)
    rpc.terminate(
        service_pb2.RunToolLoopResponse(), trailer, grpc.StatusCode.UNAVAILABLE, "LLM down"
    )
    with pytest.raises(RunFailedError) as failure:
        await pending

    error = failure.value
    assert (error.code, error.details) == (grpc.StatusCode.UNAVAILABLE, "LLM down")
    assert error.result.run_id == "r-9"
    assert error.result.stop_reason is StopReason.ERROR
    assert [r.call_id for r in error.result.tool_call_history] == ["c1"]


async def test_status_without_trailer_is_a_plain_rpc_error(fake: FakeChannel) -> None:
    pending = asyncio.create_task(in_thread(lambda: fake.client.run_tool_loop("go")))
    _, _, rpc = await fake.take_unary("RunToolLoop")
    rpc.terminate(service_pb2.RunToolLoopResponse(), (), grpc.StatusCode.UNAVAILABLE, "down")
    with pytest.raises(SidecarRpcError) as failure:
        await pending

    assert failure.value.code == grpc.StatusCode.UNAVAILABLE
    assert not isinstance(failure.value, RunFailedError)


def event(sequence: int, **payload: Any) -> service_pb2.StreamToolLoopResponse:
    pb = events_pb2.RunEvent(
        run_id="r-1", sequence=sequence, time=convert.timestamp(1000.0 + sequence)
    )
    for name, value in payload.items():
        getattr(pb, name).CopyFrom(value)
    return service_pb2.StreamToolLoopResponse(event=pb)


async def test_stream_tool_loop_yields_events_in_order(fake: FakeChannel) -> None:
    events = fake.client.stream_tool_loop("go", script=[turn("done")])
    _, request, rpc = await fake.take_stream("StreamToolLoop")
    spec = types_pb2.RunSpec(run_id="r-1", prompt="go", max_iterations=25, tool_names=["echo"])
    done = types_pb2.ToolCallRunResult(
        run_id="r-1", content="done", iterations=1, stop_reason=types_pb2.STOP_REASON_FINAL_ANSWER
    )
    rpc.send_response(event(1, run_started=events_pb2.RunStarted(spec=spec)))
    rpc.send_response(event(2, iteration_started=events_pb2.IterationStarted(iteration=1)))
    rpc.send_response(event(3, run_completed=events_pb2.RunCompleted(result=done)))
    rpc.terminate((), grpc.StatusCode.OK, "")
    received: list[StreamedEvent] = await in_thread(lambda: list(events))

    assert request.spec.prompt == "go"
    assert [(e.run_id, e.sequence, e.time) for e in received] == [
        ("r-1", 1, 1001.0),
        ("r-1", 2, 1002.0),
        ("r-1", 3, 1003.0),
    ]
    assert received[0].event == RunStarted("r-1", "go", ("echo",), 25)
    assert received[1].event == IterationStarted(1)
    last = received[2].event
    assert isinstance(last, RunCompleted)
    assert (last.result.content, last.result.stop_reason) == ("done", StopReason.FINAL_ANSWER)


async def test_stream_error_status_becomes_sidecar_rpc_error(fake: FakeChannel) -> None:
    events = fake.client.stream_tool_loop("go")
    _, _, rpc = await fake.take_stream("StreamToolLoop")
    rpc.terminate((), grpc.StatusCode.RESOURCE_EXHAUSTED, "too many runs")

    with pytest.raises(SidecarRpcError) as failure:
        await in_thread(lambda: list(events))
    assert failure.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_cancel_run_sends_the_reason_and_maps_the_state(fake: FakeChannel) -> None:
    pending = asyncio.create_task(in_thread(lambda: fake.client.cancel_run("r-2", reason="why")))
    _, request, rpc = await fake.take_unary("CancelRun")
    response = service_pb2.CancelRunResponse(state=types_pb2.RUN_STATE_CANCELLED)
    rpc.terminate(response, (), grpc.StatusCode.OK, "")

    assert await pending == "cancelled"
    assert (request.run_id, request.reason) == ("r-2", "why")


# -- against a real server -----------------------------------------------------------------------


@pytest.fixture
def sync_client(sidecar: Sidecar) -> Iterator[SidecarClient]:
    with SidecarClient(sidecar.address) as client:
        yield client


async def test_sync_run_tool_loop(sync_client: SidecarClient) -> None:
    result = await in_thread(lambda: sync_client.run_tool_loop("go", script=echo_script(2)))

    assert result.content == "done"
    assert [r.call_id for r in result.tool_call_history] == ["c1", "c2"]
    assert result.stop_reason is StopReason.FINAL_ANSWER


async def test_sync_stream_tool_loop(sync_client: SidecarClient) -> None:
    events = await in_thread(
        lambda: list(sync_client.stream_tool_loop("go", script=echo_script(1)))
    )

    assert_well_formed(events)
    assert len(events) == 8
    assert isinstance(events[-1].event, RunCompleted)


async def test_sync_failed_run_raises_run_failed(
    failing_sidecar: Sidecar, failing_provider: FailingProvider
) -> None:
    failing_provider.completions.append([("c1", "echo", {"text": "x"})])  # then 503

    def run() -> None:
        with SidecarClient(failing_sidecar.address) as client:
            client.run_tool_loop("go", max_iterations=3)

    with pytest.raises(RunFailedError) as failure:
        await in_thread(run)

    assert failure.value.code == grpc.StatusCode.UNAVAILABLE
    assert [r.call_id for r in failure.value.result.tool_call_history] == ["c1"]


async def test_sync_watch_get_and_list(sync_client: SidecarClient) -> None:
    def scenario() -> tuple[list[StreamedEvent], str, list[str]]:
        sync_client.run_tool_loop("go", script=echo_script(1), run_id="sync-1")
        watched = list(sync_client.watch("sync-1"))
        return (
            watched,
            sync_client.get_run("sync-1").state,
            [t.name for t in sync_client.list_tools()],
        )

    watched, state, tools = await in_thread(scenario)

    assert [e.sequence for e in watched] == list(range(1, 9))
    assert state == "completed"
    assert tools == ["echo", "hang", "gate", "fail"]


async def test_sync_session_with_a_sync_tool(sync_client: SidecarClient) -> None:
    threads: list[int] = []

    def reverse(text: str) -> str:
        """Reverse a text."""
        threads.append(threading.get_ident())
        return text[::-1]

    script = [turn("", call("v1", "reverse", text="abc")), turn("done")]
    events = await in_thread(
        lambda: list(sync_client.session("go", tools=[reverse], script=script))
    )

    assert_well_formed(events)
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    [record] = last.result.tool_call_history
    assert (record.call_id, record.success, dict(record.output)) == ("v1", True, {"result": "cba"})
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_sync_session_tool_error_is_a_failed_record(sync_client: SidecarClient) -> None:
    def explode() -> str:
        """Always fails."""
        raise KeyError("missing")

    script = [turn("", call("x1", "explode")), turn("done")]
    events = await in_thread(
        lambda: list(sync_client.session("go", tools=[explode], script=script))
    )

    last = events[-1].event
    assert isinstance(last, RunCompleted)
    [record] = last.result.tool_call_history
    assert (record.success, record.error_kind, record.error) == (
        False,
        ErrorKind.EXCEPTION,
        "KeyError: 'missing'",
    )


class SyncLLM:
    """A blocking client-hosted LLM: calls ``echo`` once, then answers."""

    def __init__(self) -> None:
        self.roles: list[list[Role]] = []

    def call(self, request: LLMRequest) -> LLMResponse:
        self.roles.append([m.role for m in request.messages])
        if request.iteration == 1:
            return LLMResponse("", [ToolCall("e1", "echo", {"text": "sync"})])
        return LLMResponse("sync done")


async def test_sync_session_with_a_client_llm(
    sync_client: SidecarClient, server_tools: ServerTools
) -> None:
    llm = SyncLLM()
    events = await in_thread(lambda: list(sync_client.session("go", llm=llm)))

    last = events[-1].event
    assert isinstance(last, RunCompleted)
    assert last.result.content == "sync done"
    assert llm.roles == [[Role.USER], [Role.USER, Role.ASSISTANT, Role.TOOL]]
    assert server_tools.echo_texts == ["sync"]


async def test_sync_client_receives_a_result_larger_than_4_mib(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    async def blob(inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {"data": "z" * 1_500_000}

    server_tools.registry.register(ToolSpec("blob"), blob)
    sidecar = await make_sidecar()
    script = [turn("", call(f"b{i}", "blob")) for i in range(3)] + [turn("done")]

    def run() -> ToolCallRunResult:
        with SidecarClient(sidecar.address) as client:
            return client.run_tool_loop("go", script=script)

    assert len((await in_thread(run)).tool_call_history) == 3


async def test_sync_session_goes_on_when_a_client_tool_outlives_its_deadline(
    sync_client: SidecarClient,
) -> None:
    async def stuck(inputs: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.Event().wait()  # never answers
        return {}

    registry = ToolRegistry()
    registry.register(ToolSpec("stuck", timeout_s=0.2), stuck)
    script = [turn("", call("s1", "stuck")), turn("", call("v1", "reverse", text="ab")), turn("ok")]

    def reverse(inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {"result": str(inputs["text"])[::-1]}

    registry.register(ToolSpec("reverse"), reverse)
    # Before, the session waited on the stuck tool for good and never read on.
    events = await asyncio.wait_for(
        in_thread(lambda: list(sync_client.session("go", tools=registry, script=script))), WAIT_S
    )

    last = events[-1].event
    assert isinstance(last, RunCompleted)
    stuck_record, reversed_record = last.result.tool_call_history
    assert (stuck_record.success, stuck_record.error_kind) == (False, ErrorKind.TIMEOUT)
    assert (reversed_record.success, dict(reversed_record.output)) == (True, {"result": "ba"})
