"""StreamToolLoop and RunToolLoop: event order, sequences, the accepted spec, results."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar
from cleveragents.tool import (
    ErrorKind,
    IterationStarted,
    LLMResponded,
    RunCompleted,
    RunStarted,
    StopReason,
    ToolActorContext,
    ToolCallCompleted,
    ToolCallStarted,
    ToolSpec,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2

from .conftest import (
    ServerTools,
    SidecarFactory,
    assert_well_formed,
    call,
    collect,
    comparable,
    echo_script,
    kinds,
    run_spec,
    turn,
)

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

PARALLEL_SCRIPT = [
    turn("two at once", call("a1", "echo", text="one"), call("a2", "echo", text="two")),
    turn("then a failure", call("f1", "fail")),
    turn("finished"),
]


async def test_stream_sequences_are_gap_free_from_one(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=echo_script(3)))

    assert [e.sequence for e in events] == list(range(1, 17))
    assert len({e.run_id for e in events}) == 1


async def test_stream_events_come_in_loop_order(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=echo_script(1)))

    assert kinds(events) == [
        "RunStarted",
        "IterationStarted",
        "LLMResponded",
        "ToolCallStarted",
        "ToolCallCompleted",
        "IterationStarted",
        "LLMResponded",
        "RunCompleted",
    ]
    assert [e.event.iteration for e in events if isinstance(e.event, IterationStarted)] == [1, 2]


async def test_stream_ends_with_exactly_one_terminal_event(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=PARALLEL_SCRIPT))

    assert_well_formed(events)
    assert isinstance(events[-1].event, RunCompleted)
    assert events[-1].event.result.content == "finished"


async def test_every_tool_call_has_one_started_and_one_completed(
    client: AsyncSidecarClient,
) -> None:
    events = await collect(client.stream_tool_loop("go", script=PARALLEL_SCRIPT))

    started = [e.event.call_id for e in events if isinstance(e.event, ToolCallStarted)]
    completed = [e.event.record for e in events if isinstance(e.event, ToolCallCompleted)]
    assert sorted(started) == ["a1", "a2", "f1"]
    assert sorted(r.call_id for r in completed) == ["a1", "a2", "f1"]
    failed = next(r for r in completed if r.call_id == "f1")
    assert (failed.success, failed.error, failed.error_kind) == (False, "boom", ErrorKind.EXCEPTION)


async def test_each_call_starts_before_it_completes(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=PARALLEL_SCRIPT))

    for call_id in ("a1", "a2", "f1"):
        start = next(
            e.sequence
            for e in events
            if isinstance(e.event, ToolCallStarted) and e.event.call_id == call_id
        )
        end = next(
            e.sequence
            for e in events
            if isinstance(e.event, ToolCallCompleted) and e.event.record.call_id == call_id
        )
        assert start < end


async def test_run_started_carries_the_spec_as_accepted(stub: Stub) -> None:
    request = service_pb2.StreamToolLoopRequest(spec=run_spec(echo_script(1), prompt="hello"))
    first = await anext(aiter(stub.StreamToolLoop(request)))

    spec = first.event.run_started.spec
    assert first.event.sequence == 1
    assert spec.run_id == first.event.run_id
    assert len(spec.run_id) > 0
    assert spec.prompt == "hello"
    assert spec.max_iterations == 25
    assert spec.llm.profile == "scripted"
    assert list(spec.tool_names) == ["echo", "hang", "gate", "fail"]


async def test_run_started_lists_only_the_selected_tools(client: AsyncSidecarClient) -> None:
    events = await collect(
        client.stream_tool_loop("go", script=echo_script(1), tool_names=["echo", "fail"])
    )

    started = events[0].event
    assert isinstance(started, RunStarted)
    assert started.tool_names == ("echo", "fail")


async def test_client_chosen_run_id_is_used(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=echo_script(1), run_id="mine-1"))

    assert {e.run_id for e in events} == {"mine-1"}
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    assert last.result.run_id == "mine-1"


async def test_streamed_result_equals_unary_result(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=PARALLEL_SCRIPT))
    unary = await client.run_tool_loop("go", script=PARALLEL_SCRIPT)

    streamed = events[-1].event
    assert isinstance(streamed, RunCompleted)
    assert comparable(streamed.result) == comparable(unary)
    assert unary.iterations == 3
    assert [r.call_id for r in unary.tool_call_history] == ["a1", "a2", "f1"]


async def test_unary_result_of_a_final_answer(client: AsyncSidecarClient) -> None:
    result = await client.run_tool_loop("go", script=echo_script(2))

    assert result.content == "done"
    assert result.iterations == 3
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.terminated_by_limit is False
    assert [r.output for r in result.tool_call_history] == [{"text": "t1"}, {"text": "t2"}]
    assert len(result.run_id) > 0


async def test_llm_responded_carries_text_and_calls(client: AsyncSidecarClient) -> None:
    events = await collect(client.stream_tool_loop("go", script=echo_script(1)))

    responded = [e.event for e in events if isinstance(e.event, LLMResponded)]
    assert [r.content for r in responded] == ["step 1", "done"]
    assert [(c.id, c.name, dict(c.arguments)) for c in responded[0].tool_calls] == [
        ("c1", "echo", {"text": "t1"})
    ]


async def test_script_usage_is_summed_into_the_result(client: AsyncSidecarClient) -> None:
    script = [
        {
            **turn("a", call("c1", "echo", text="x")),
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
        {**turn("b"), "usage": {"input_tokens": 5, "output_tokens": 2}},
    ]
    result = await client.run_tool_loop("go", script=script)

    assert (result.usage.input_tokens, result.usage.output_tokens) == (8, 3)


async def test_max_iterations_limit_ends_the_run(client: AsyncSidecarClient) -> None:
    result = await client.run_tool_loop("go", script=echo_script(5), max_iterations=2)

    assert result.iterations == 2
    assert result.terminated_by_limit is True
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.content == "step 1\nstep 2"
    assert [r.call_id for r in result.tool_call_history] == ["c1", "c2"]


async def test_context_keys_are_threaded_into_tool_inputs(
    client: AsyncSidecarClient, server_tools: ServerTools, tmp_path: Path
) -> None:
    context = ToolActorContext(
        plan_id="p1", sandbox_root=str(tmp_path), resource_bindings={"repo": "r1"}
    )
    result = await client.run_tool_loop("go", script=echo_script(1), context=context)

    assert dict(result.tool_call_history[0].inputs) == {
        "text": "t1",
        "sandbox_root": str(tmp_path),  # pytest resolves it
        "resource_bindings": {"repo": "r1"},
    }
    assert server_tools.echo_texts == ["t1"]


async def test_list_tools_returns_the_server_tools(client: AsyncSidecarClient) -> None:
    tools = await client.list_tools()

    assert [t.name for t in tools] == ["echo", "hang", "gate", "fail"]
    echo = tools[0]
    assert echo.description == "Return the text."
    assert dict(echo.input_schema) == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
    }


async def test_stream_frames_decode_as_stream_responses(stub: Stub) -> None:
    request = service_pb2.StreamToolLoopRequest(spec=run_spec(echo_script(1)))
    responses = [r async for r in stub.StreamToolLoop(request)]

    payloads = [r.event.WhichOneof("payload") for r in responses]
    assert payloads[0] == "run_started"
    assert payloads[-1] == "run_completed"
    started = next(
        r.event.tool_call_started for r in responses if r.event.HasField("tool_call_started")
    )
    assert json.loads(started.inputs) == {"text": "t1"}
    assert isinstance(responses[0].event, events_pb2.RunEvent)


async def test_stream_call_succeeds_with_status_ok(stub: Stub) -> None:
    call_ = stub.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=run_spec(echo_script(1))))
    count = len([r async for r in call_])

    assert count == 8
    assert await call_.code() == grpc.StatusCode.OK


async def test_unknown_tool_called_by_the_model_is_a_failed_record(
    client: AsyncSidecarClient,
) -> None:
    script = [turn("", call("u1", "no_such_tool")), turn("done")]
    result = await client.run_tool_loop("go", script=script)

    [record] = result.tool_call_history
    assert (record.call_id, record.success, record.error_kind) == (
        "u1",
        False,
        ErrorKind.UNKNOWN_TOOL,
    )
    assert record.error is not None
    assert "no_such_tool" in record.error
    assert result.stop_reason is StopReason.FINAL_ANSWER


async def test_concurrent_runs_keep_separate_logs(client: AsyncSidecarClient) -> None:
    logs = await asyncio.gather(
        *(
            collect(client.stream_tool_loop("go", script=echo_script(2), run_id=f"par-{i}"))
            for i in range(20)
        )
    )

    for i, log in enumerate(logs):
        assert_well_formed(log)
        assert {e.run_id for e in log} == {f"par-{i}"}
        assert len(log) == 12


# -- results larger than gRPC's default 4 MiB receive limit -------------------------------------


async def blob_sidecar(make_sidecar: SidecarFactory, server_tools: ServerTools) -> Sidecar:
    """A sidecar (default 16 MiB message limit) with a tool returning 1.5 MB of text."""

    async def blob(inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {"data": "z" * 1_500_000}

    server_tools.registry.register(ToolSpec("blob"), blob)
    return await make_sidecar()


BLOB_SCRIPT = [turn("", call(f"b{i}", "blob")) for i in range(3)] + [turn("done")]


async def test_client_receives_a_result_larger_than_4_mib(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await blob_sidecar(make_sidecar, server_tools)
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=BLOB_SCRIPT)

    assert [r.call_id for r in result.tool_call_history] == ["b0", "b1", "b2"]


async def test_client_streams_a_terminal_event_larger_than_4_mib(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await blob_sidecar(make_sidecar, server_tools)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await collect(client.stream_tool_loop("go", script=BLOB_SCRIPT))

    assert isinstance(events[-1].event, RunCompleted)


async def test_raw_channel_with_a_larger_limit_receives_the_big_result(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await blob_sidecar(make_sidecar, server_tools)
    options = [("grpc.max_receive_message_length", 32 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(sidecar.address, options=options) as channel:
        client = AsyncSidecarClient(channel=channel)
        result = await client.run_tool_loop("go", script=BLOB_SCRIPT)

    assert [len(r.output["data"]) for r in result.tool_call_history] == [1_500_000] * 3
