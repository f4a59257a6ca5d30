"""Every status code of the API's table, and how failed runs surface."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.client import AsyncSidecarClient, RunFailedError, SidecarRpcError
from cleveragents.sidecar import Sidecar
from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    RunCancelled,
    RunFailed,
    StopReason,
    ToolActorContext,
    ToolCall,
    ToolCallStarted,
)
from cleveragents.toolruntime.v1 import (
    events_pb2,
    service_pb2,
    service_pb2_grpc,
    session_pb2,
    types_pb2,
)

from .conftest import (
    WAIT_S,
    FailingProvider,
    ServerTools,
    SidecarFactory,
    assert_well_formed,
    call,
    collect,
    echo_script,
    read_to_status,
    read_until_invocation,
    rpc_code,
    run_spec,
    session_start,
    stream_code,
    tool_result,
    turn,
    watch_to_end,
)

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


async def unary(stub: Stub, spec: types_pb2.RunSpec) -> tuple[grpc.StatusCode, str]:
    return await rpc_code(stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec)))


# -- INVALID_ARGUMENT ----------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["", "   \n\t"])
async def test_empty_prompt_is_invalid(stub: Stub, prompt: str) -> None:
    code, details = await unary(stub, run_spec(echo_script(1), prompt=prompt))

    assert code == INVALID
    assert "prompt" in details


async def test_empty_prompt_is_invalid_on_stream(stub: Stub) -> None:
    request = service_pb2.StreamToolLoopRequest(spec=run_spec(echo_script(1), prompt=""))

    assert (await stream_code(stub.StreamToolLoop(request)))[0] == INVALID


async def test_empty_prompt_is_invalid_on_session(stub: Stub) -> None:
    session = stub.Session()
    await session.write(session_start(run_spec(echo_script(1), prompt="")))

    assert (await stream_code(session))[0] == INVALID


async def test_negative_max_iterations_is_invalid(stub: Stub) -> None:
    code, details = await unary(stub, run_spec(echo_script(1), max_iterations=-1))

    assert code == INVALID
    assert "max_iterations" in details


async def test_max_iterations_above_the_cap_is_invalid(make_sidecar: SidecarFactory) -> None:
    sidecar = await make_sidecar(max_iterations_cap=5)
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(SidecarRpcError) as failure:
            await client.run_tool_loop("go", script=echo_script(1), max_iterations=6)
        at_cap = await client.run_tool_loop("go", script=echo_script(1), max_iterations=5)

    assert failure.value.code == INVALID
    assert "cap of 5" in failure.value.details
    assert at_cap.content == "done"


async def test_default_max_iterations_respects_a_lower_cap(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_iterations_cap=3)
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=echo_script(5))

    assert (result.iterations, result.stop_reason) == (3, StopReason.MAX_ITERATIONS)


@pytest.mark.parametrize(
    ("script", "fragment"),
    [
        ("[{", "not valid JSON"),
        ('{"content": "x"}', "JSON array"),
        ('[{"content": 5}]', "llm.script[0]"),
        ('[{"tool_calls": [{"id": "a"}]}]', "llm.script[0]"),
        ('[{"unknown": 1}]', "unknown key"),
    ],
)
async def test_malformed_inline_script_is_invalid(stub: Stub, script: str, fragment: str) -> None:
    spec = run_spec(prompt="go")
    spec.llm.script = script
    code, details = await unary(stub, spec)

    assert code == INVALID
    assert fragment in details


@pytest.mark.parametrize(
    ("bindings", "fragment"),
    [("{oops", "not valid JSON"), ("[1, 2]", "must be a JSON object"), ('"text"', "JSON object")],
)
async def test_bad_resource_bindings_are_invalid(stub: Stub, bindings: str, fragment: str) -> None:
    spec = run_spec(echo_script(1), context=types_pb2.ToolActorContext(resource_bindings=bindings))
    code, details = await unary(stub, spec)

    assert code == INVALID
    assert "context.resource_bindings" in details
    assert fragment in details


async def test_context_history_with_bad_json_is_invalid(stub: Stub) -> None:
    record = types_pb2.ToolCallRecord(tool_name="echo", inputs="{broken", output="{}")
    spec = run_spec(echo_script(1), context=types_pb2.ToolActorContext(tool_call_history=[record]))
    code, details = await unary(stub, spec)

    assert code == INVALID
    assert "record.inputs" in details


async def test_bad_project_resources_are_invalid(stub: Stub) -> None:
    spec = run_spec(echo_script(1), context=types_pb2.ToolActorContext(project_resources="[]"))

    assert (await unary(stub, spec))[0] == INVALID


@pytest.mark.parametrize(
    "tool",
    [
        types_pb2.ToolSpec(name="remote", input_schema="{not json"),
        types_pb2.ToolSpec(name="remote", input_schema="[]"),
        types_pb2.ToolSpec(name="remote", input_schema='{"type": "string"}'),
        types_pb2.ToolSpec(name="bad name!"),
    ],
    ids=["schema-not-json", "schema-not-object", "schema-not-object-type", "bad-name"],
)
async def test_bad_client_tool_spec_is_invalid(stub: Stub, tool: types_pb2.ToolSpec) -> None:
    session = stub.Session()
    await session.write(session_start(run_spec(echo_script(1)), tool))
    code, details = await stream_code(session)

    assert code == INVALID
    assert "start.tools" in details


async def test_client_tool_declared_twice_is_invalid(stub: Stub) -> None:
    session = stub.Session()
    tool = types_pb2.ToolSpec(name="remote")
    await session.write(session_start(run_spec(echo_script(1)), tool, tool))

    assert await stream_code(session) == (INVALID, "start.tools: tool 'remote' is declared twice")


async def test_client_profile_outside_a_session_is_invalid(stub: Stub) -> None:
    spec = run_spec(echo_script(1))
    spec.llm.profile = "client"
    code, details = await unary(stub, spec)

    assert code == INVALID
    assert "client_llm=true" in details


async def test_client_llm_with_a_scripted_profile_is_invalid(stub: Stub) -> None:
    spec = run_spec(echo_script(1))
    spec.llm.profile = "scripted"
    session = stub.Session()
    await session.write(session_start(spec, client_llm=True))

    assert (await stream_code(session))[0] == INVALID


async def test_overlong_run_id_is_invalid(stub: Stub) -> None:
    code, details = await unary(stub, run_spec(echo_script(1), run_id="r" * 129))

    assert code == INVALID
    assert "run_id" in details


async def test_empty_session_message_is_invalid(stub: Stub) -> None:
    session = stub.Session()
    await session.write(
        session_start(
            run_spec([turn("", call("r1", "remote")), turn("x")]), types_pb2.ToolSpec(name="remote")
        )
    )
    await read_until_invocation(session)
    await session.write(session_pb2.SessionRequest())

    assert (await stream_code(session))[0] == INVALID


def _raw(data: bytes) -> bytes:
    return data


def _parsed(frame: object) -> session_pb2.SessionResponse:
    assert isinstance(frame, bytes)
    return session_pb2.SessionResponse.FromString(frame)


RUN_TOOL_LOOP = "/cleveragents.toolruntime.v1.ToolRuntimeService/RunToolLoop"
SESSION = "/cleveragents.toolruntime.v1.ToolRuntimeService/Session"
#: Field 1 (length-delimited) announcing 255 bytes that never come: does not parse.
GARBAGE = b"\x0a\xff\x01"


async def test_unparseable_unary_request_is_invalid(channel: grpc.aio.Channel) -> None:
    method = channel.unary_unary(RUN_TOOL_LOOP, request_serializer=_raw, response_deserializer=_raw)
    code, details = await rpc_code(method(GARBAGE))

    assert code == INVALID
    assert "RunToolLoopRequest" in details


@pytest.mark.parametrize("rpc", ["StreamToolLoop", "WatchRun"])
async def test_unparseable_streaming_request_is_invalid(
    channel: grpc.aio.Channel, rpc: str
) -> None:
    path = f"/cleveragents.toolruntime.v1.ToolRuntimeService/{rpc}"
    method = channel.unary_stream(path, request_serializer=_raw, response_deserializer=_raw)
    code, details = await stream_code(method(GARBAGE))

    assert code == INVALID
    assert f"{rpc}Request" in details


async def test_unparseable_first_session_message_is_invalid(channel: grpc.aio.Channel) -> None:
    session = channel.stream_stream(SESSION, request_serializer=_raw, response_deserializer=_raw)()
    await session.write(GARBAGE)

    assert (await stream_code(session))[0] == INVALID


async def test_unparseable_later_session_message_is_invalid(
    channel: grpc.aio.Channel, client: AsyncSidecarClient
) -> None:
    session = channel.stream_stream(SESSION, request_serializer=_raw, response_deserializer=_raw)()
    script = [turn("", call("r1", "remote")), turn("done")]
    start = session_start(run_spec(script, run_id="m1"), types_pb2.ToolSpec(name="remote"))
    await session.write(start.SerializeToString())
    async with asyncio.timeout(WAIT_S):
        while not _parsed(await session.read()).HasField("tool_invocation"):
            pass
    await session.write(GARBAGE)
    code = (await stream_code(session))[0]

    assert code == INVALID
    assert (await client.get_run("m1")).state == "cancelled"


# -- NOT_FOUND ---------------------------------------------------------------------------------


async def test_get_run_of_an_unknown_id_is_not_found(stub: Stub) -> None:
    code, details = await rpc_code(stub.GetRun(service_pb2.GetRunRequest(run_id="ghost")))

    assert code == NOT_FOUND
    assert "'ghost'" in details


async def test_cancel_run_of_an_unknown_id_is_not_found(stub: Stub) -> None:
    request = service_pb2.CancelRunRequest(run_id="ghost")

    assert (await rpc_code(stub.CancelRun(request)))[0] == NOT_FOUND


async def test_watch_run_of_an_unknown_id_is_not_found(stub: Stub) -> None:
    request = service_pb2.WatchRunRequest(run_id="ghost")

    assert (await stream_code(stub.WatchRun(request)))[0] == NOT_FOUND


async def test_unknown_profile_is_not_found(stub: Stub) -> None:
    spec = run_spec(echo_script(1))
    spec.llm.profile = "gpt-nonexistent"
    code, details = await unary(stub, spec)

    assert code == NOT_FOUND
    assert "gpt-nonexistent" in details


async def test_unknown_tool_name_is_not_found(stub: Stub) -> None:
    code, details = await unary(stub, run_spec(echo_script(1), tool_names=["echo", "nope"]))

    assert code == NOT_FOUND
    assert "nope" in details


async def test_a_misspelt_tool_name_gets_the_closest_and_the_known_ones(stub: Stub) -> None:
    code, details = await unary(stub, run_spec(echo_script(1), tool_names=["ecko"]))

    assert code == NOT_FOUND
    assert details == (
        "spec.tool_names: unknown tool(s): ecko; did you mean 'echo'?; known: echo, fail, gate, "
        "hang"
    )


async def test_client_maps_not_found_to_sidecar_rpc_error(client: AsyncSidecarClient) -> None:
    with pytest.raises(SidecarRpcError) as failure:
        await client.get_run("ghost")

    assert failure.value.code == NOT_FOUND
    assert not isinstance(failure.value, RunFailedError)


# -- UNAUTHENTICATED ----------------------------------------------------------------------------


@pytest.fixture
async def guarded(make_sidecar: SidecarFactory, tmp_path: Path) -> Sidecar:
    """A sidecar that wants the shared token ``s3cret``."""
    token = tmp_path / "token"
    token.write_text("s3cret\n", encoding="utf-8")
    return await make_sidecar(auth_token_file=str(token))


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_missing_or_wrong_token_is_unauthenticated(
    guarded: Sidecar, token: str | None
) -> None:
    async with AsyncSidecarClient(guarded.address, token=token) as client:
        with pytest.raises(SidecarRpcError) as failure:
            await client.run_tool_loop("go", script=echo_script(1))

    assert failure.value.code == grpc.StatusCode.UNAUTHENTICATED


async def test_streams_without_token_are_unauthenticated(guarded: Sidecar) -> None:
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        request = service_pb2.StreamToolLoopRequest(spec=run_spec(echo_script(1)))
        stream = await stream_code(stub.StreamToolLoop(request))
        session = await stream_code(stub.Session())  # refused before any message

    assert (stream[0], session[0]) == (grpc.StatusCode.UNAUTHENTICATED,) * 2


async def test_right_token_is_accepted(guarded: Sidecar) -> None:
    async with AsyncSidecarClient(guarded.address, token="s3cret") as client:
        result = await client.run_tool_loop("go", script=echo_script(1))

    assert result.content == "done"


async def test_health_needs_no_token(guarded: Sidecar) -> None:
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)

    assert response.status == health_pb2.HealthCheckResponse.SERVING


# -- ALREADY_EXISTS ------------------------------------------------------------------------------


async def test_reusing_a_live_run_id_already_exists(
    client: AsyncSidecarClient, server_tools: ServerTools
) -> None:
    stream = client.stream_tool_loop("go", script=[turn("", call("g1", "gate"))], run_id="dup")
    await anext(aiter(stream))
    with pytest.raises(SidecarRpcError) as failure:
        await client.run_tool_loop("again", script=echo_script(1), run_id="dup")
    server_tools.release.set()
    await client.cancel_run("dup")

    assert failure.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert "'dup'" in failure.value.details


async def test_evicted_finished_run_is_not_found(make_sidecar: SidecarFactory) -> None:
    sidecar = await make_sidecar(max_finished_runs=1)
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("go", script=[turn("old")], run_id="old")
        await client.run_tool_loop("go", script=[turn("new")], run_id="new")
        with pytest.raises(SidecarRpcError) as failure:
            await client.get_run("old")
        kept = await client.get_run("new")

    assert failure.value.code == NOT_FOUND
    assert kept.state == "completed"


async def test_reusing_a_finished_run_id_is_allowed(client: AsyncSidecarClient) -> None:
    first = await client.run_tool_loop("one", script=[turn("first")], run_id="again")
    second = await client.run_tool_loop("two", script=[turn("second")], run_id="again")
    info = await client.get_run("again")

    assert (first.content, second.content) == ("first", "second")
    assert info.result is not None
    assert info.result.content == "second"


# -- RESOURCE_EXHAUSTED ------------------------------------------------------------------------


async def test_too_many_concurrent_runs_is_resource_exhausted(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_concurrent_runs=1)
    async with AsyncSidecarClient(sidecar.address) as client:
        stream = client.stream_tool_loop("go", script=[turn("", call("h1", "hang"))], run_id="a")
        await anext(aiter(stream))
        with pytest.raises(SidecarRpcError) as failure:
            await client.run_tool_loop("go", script=echo_script(1))
        await client.cancel_run("a")
        after = await client.run_tool_loop("go", script=echo_script(1))

    assert failure.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert after.content == "done"


async def test_message_over_the_size_limit_is_resource_exhausted(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_message_bytes=4096)
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(SidecarRpcError) as failure:
            await client.run_tool_loop("x" * 8000, script=echo_script(1))
        small = await client.run_tool_loop("x" * 100, script=echo_script(1))

    assert failure.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert small.content == "done"


async def test_a_request_over_the_sidecars_limit_names_the_setting_to_raise(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_message_bytes=4096)
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(SidecarRpcError) as failure:
            await client.run_tool_loop("x" * 8000, script=echo_script(1))

    details = failure.value.details
    assert details.startswith("the request is ")
    assert "more than the sidecar's max_message_bytes (4096): send less" in details
    assert "have the sidecar's operator raise max_message_bytes" in details
    assert "SERVER: Received message larger than max" in details  # gRPC's own words kept


async def test_a_response_over_the_clients_limit_names_the_clients_setting(
    sidecar: Sidecar,
) -> None:
    async with AsyncSidecarClient(sidecar.address, max_message_bytes=64) as client:
        with pytest.raises(SidecarRpcError) as failure:
            await client.list_tools()

    assert failure.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = failure.value.details
    assert details.startswith("a message from the sidecar is ")
    assert "more than this client's max_message_bytes (64): raise it" in details
    assert "SidecarClient(..., max_message_bytes=N)" in details


# -- FAILED_PRECONDITION (sessions) ------------------------------------------------------------


def remote_start(run_id: str, turns: list[dict[str, Any]] | None = None) -> Any:
    script = turns or [turn("", call("r1", "remote")), turn("done")]
    return session_start(run_spec(script, run_id=run_id), types_pb2.ToolSpec(name="remote"))


async def test_first_session_message_must_be_start(stub: Stub) -> None:
    session = stub.Session()
    await session.write(tool_result("r1", output="{}"))
    code, details = await stream_code(session)

    assert code == PRECONDITION
    assert "'start'" in details


async def assert_cancelled_cleanly(client: AsyncSidecarClient, run_id: str) -> RunCancelled:
    """The run's log is whole and ends with ``run_cancelled``; returns that event."""
    log = await watch_to_end(client, run_id)
    assert_well_formed(log)
    last = log[-1].event
    assert isinstance(last, RunCancelled)
    assert (await client.get_run(run_id)).state == "cancelled"
    return last


async def test_second_start_is_failed_precondition(stub: Stub, client: AsyncSidecarClient) -> None:
    session = stub.Session()
    await session.write(remote_start("p1"))
    await read_until_invocation(session)
    await session.write(remote_start("p1-bis"))
    code, details = await stream_code(session)
    cancelled = await assert_cancelled_cleanly(client, "p1")

    assert code == PRECONDITION
    assert "already started" in details
    assert cancelled.reason == "session protocol error: the session has already started"


async def test_tool_result_for_unknown_call_is_failed_precondition(
    stub: Stub, client: AsyncSidecarClient
) -> None:
    session = stub.Session()
    await session.write(remote_start("p2"))
    await read_until_invocation(session)
    await session.write(tool_result("bogus", output="{}"))
    code, details = await stream_code(session)
    cancelled = await assert_cancelled_cleanly(client, "p2")

    assert code == PRECONDITION
    assert "'bogus'" in details
    [record] = cancelled.result.tool_call_history
    assert (record.call_id, record.success) == ("r1", False)


async def test_answering_a_call_twice_is_failed_precondition(
    stub: Stub, client: AsyncSidecarClient
) -> None:
    turns = [turn("", call("r1", "remote")), turn("", call("r2", "remote")), turn("done")]
    session = stub.Session()
    await session.write(remote_start("p3", turns))
    await read_until_invocation(session)
    await session.write(tool_result("r1", output='{"n": 1}'))
    assert (await read_until_invocation(session)).call_id == "r2"
    await session.write(tool_result("r1", output='{"n": 2}'))
    code, _ = await stream_code(session)
    cancelled = await assert_cancelled_cleanly(client, "p3")

    assert code == PRECONDITION
    history = cancelled.result.tool_call_history
    assert [(r.call_id, r.success, dict(r.output)) for r in history] == [
        ("r1", True, {"n": 1}),
        ("r2", False, {}),
    ]


async def test_session_stream_delivers_run_cancelled_before_the_error(stub: Stub) -> None:
    session = stub.Session()
    await session.write(remote_start("p4"))
    received: list[events_pb2.RunEvent] = []
    await read_until_invocation(session, received)
    await session.write(tool_result("bogus", output="{}"))
    rest, code, _ = await read_to_status(session)
    received += [r.event for r in rest]

    assert code == PRECONDITION
    assert [e.sequence for e in received] == list(range(1, len(received) + 1))
    assert received[-1].HasField("run_cancelled")
    assert received[-1].run_cancelled.result.tool_call_history[0].error_kind == (
        types_pb2.ERROR_KIND_CANCELLED
    )


async def test_llm_result_for_unknown_request_is_failed_precondition(stub: Stub) -> None:
    session = stub.Session()
    await session.write(session_start(run_spec(), client_llm=True))
    await session.write(
        session_pb2.SessionRequest(llm_result=session_pb2.LlmResult(request_id="llm_99"))
    )

    assert (await stream_code(session))[0] == PRECONDITION


# -- failed runs ---------------------------------------------------------------------------------

#: Tool calls only, and fewer turns than max_iterations: the script runs out at iteration 3.
EXHAUSTED = [turn("a", call("c1", "echo", text="1")), turn("b", call("c2", "echo", text="2"))]


def two_echo_calls(provider: FailingProvider, text: str = "x") -> None:
    """Two completions with an echo call each; the third LLM call gets the provider's 503."""
    provider.completions += [[("c1", "echo", {"text": text})], [("c2", "echo", {"text": text})]]


@pytest.fixture
async def failing_stub(failing_sidecar: Sidecar) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(failing_sidecar.address) as channel:
        yield service_pb2_grpc.ToolRuntimeServiceStub(channel)


@pytest.fixture
async def failing_client(failing_sidecar: Sidecar) -> AsyncIterator[AsyncSidecarClient]:
    async with AsyncSidecarClient(failing_sidecar.address) as client:
        yield client


async def test_a_unary_run_whose_llm_fails_is_unavailable_naming_the_cause(
    failing_stub: Stub, failing_provider: FailingProvider
) -> None:
    two_echo_calls(failing_provider)
    code, details = await unary(failing_stub, run_spec(max_iterations=5))

    assert code == grpc.StatusCode.UNAVAILABLE
    assert "the model is overloaded" in details
    assert "iteration 3" in details


async def test_an_exhausted_script_is_failed_precondition_not_worth_a_retry(stub: Stub) -> None:
    code, details = await unary(stub, run_spec(EXHAUSTED, max_iterations=5))

    assert code == PRECONDITION
    assert "ScriptExhaustedError" in details
    assert "the script has 2 response(s) and iteration 3 asked for one more" in details


async def test_client_raises_run_failed_with_the_partial_result(
    failing_client: AsyncSidecarClient, failing_provider: FailingProvider
) -> None:
    two_echo_calls(failing_provider)
    with pytest.raises(RunFailedError) as failure:
        await failing_client.run_tool_loop("go", max_iterations=5, run_id="f1")

    error = failure.value
    assert error.code == grpc.StatusCode.UNAVAILABLE
    assert [r.call_id for r in error.result.tool_call_history] == ["c1", "c2"]
    assert error.result.stop_reason is StopReason.ERROR
    assert error.result.iterations == 2
    assert error.result.run_id == "f1"


async def test_failed_unary_run_with_a_large_history_still_reports_the_cause(
    failing_client: AsyncSidecarClient, failing_provider: FailingProvider
) -> None:
    two_echo_calls(failing_provider, text="x" * 8000)
    with pytest.raises(SidecarRpcError) as failure:
        await failing_client.run_tool_loop("go", max_iterations=5)

    assert failure.value.code == grpc.StatusCode.UNAVAILABLE
    assert "the model is overloaded" in failure.value.details


async def test_failed_stream_ends_with_run_failed_and_status_ok(
    failing_stub: Stub, failing_provider: FailingProvider
) -> None:
    two_echo_calls(failing_provider)
    request = service_pb2.StreamToolLoopRequest(spec=run_spec(max_iterations=5))
    call_ = failing_stub.StreamToolLoop(request)
    events = [r.event async for r in call_]

    assert events[-1].HasField("run_failed")
    assert events[-1].run_failed.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "the model is overloaded" in events[-1].run_failed.message
    assert len(events[-1].run_failed.result.tool_call_history) == 2
    assert await call_.code() == grpc.StatusCode.OK


async def test_failed_run_state_is_failed(client: AsyncSidecarClient) -> None:
    events = await collect(
        client.stream_tool_loop("go", script=EXHAUSTED, max_iterations=5, run_id="f2")
    )
    info = await client.get_run("f2")

    assert info.state == "failed"
    assert info.last_sequence == len(events)
    assert info.result is not None
    assert info.result.stop_reason is StopReason.ERROR


async def test_context_json_is_parsed_for_the_tools(client: AsyncSidecarClient) -> None:
    context = ToolActorContext(resource_bindings={"big": 12345678901234567890})
    result = await client.run_tool_loop("go", script=echo_script(1), context=context)

    assert result.tool_call_history[0].inputs["resource_bindings"] == {"big": 12345678901234567890}
    assert json.loads(json.dumps(dict(result.tool_call_history[0].inputs)))["text"] == "t1"


async def test_an_error_quoting_a_huge_value_keeps_its_status_and_a_bounded_message(
    client: AsyncSidecarClient,
) -> None:
    huge = "p" * 10_000
    with pytest.raises(SidecarRpcError) as failure:
        await client.run_tool_loop(
            "go", script=echo_script(1), context=ToolActorContext(automation_profile=huge)
        )
    assert failure.value.code == grpc.StatusCode.NOT_FOUND  # not RESOURCE_EXHAUSTED
    details = failure.value.details
    assert len(details) <= 1024
    assert details.startswith("unknown automation profile 'ppp")
    assert "characters cut" in details
    assert details.endswith("configured: full_auto, read_only, supervised")


async def test_a_session_declaring_more_tools_than_the_cap_is_refused_naming_the_setting(
    stub: Stub,
) -> None:
    start = session_pb2.SessionRequest(
        start=session_pb2.SessionStart(
            spec=run_spec(echo_script(1)),
            tools=[types_pb2.ToolSpec(name=f"t{i}") for i in range(100_000)],
        )
    )
    call_ = stub.Session()
    await call_.write(start)
    _, code, details = await read_to_status(call_)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "declares 100000 tools, more than this sidecar's max_session_tools of 1024" in details


async def test_a_script_turn_asking_for_more_calls_than_the_cap_is_refused(stub: Stub) -> None:
    many = [call(f"c{i}", "echo", text="x") for i in range(300)]
    code, details = await unary(stub, run_spec([turn("", *many), turn("done")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "llm.script[0] asks for 300 tool calls" in details
    assert "max_calls_per_response of 256" in details


async def test_a_client_llm_asking_for_more_calls_than_the_cap_fails_the_run(
    client: AsyncSidecarClient,
) -> None:
    class Greedy:
        async def call(self, request: LLMRequest) -> LLMResponse:
            return LLMResponse(tool_calls=[ToolCall(f"c{i}", "echo", {}) for i in range(10_000)])

    events = [e async for e in client.session("go", llm=Greedy())]
    failed = events[-1].event
    assert isinstance(failed, RunFailed)
    assert "asked for 10000 tool calls in one response" in failed.message
    assert "max_calls_per_response of 256" in failed.message
    assert not any(isinstance(e.event, ToolCallStarted) for e in events)
