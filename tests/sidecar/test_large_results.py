"""Runs whose history outgrows one message are still read back, whole, by every RPC.

A result too large for one message leaves out its records (every tool_call_completed event
carried them already) and GetRunHistory pages the log; the clients put the records back. A
single tool output too large is cut, flagged; a spec too large is refused where it enters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, RunFailedError, SidecarClient, StreamedEvent
from cleveragents.sandbox import file_tools
from cleveragents.tool import (
    RunCompleted,
    ToolActorContext,
    ToolCallCompleted,
    ToolCallRunResult,
    ToolSpec,
)
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, session_pb2, types_pb2

from .conftest import (
    ServerTools,
    SidecarFactory,
    assert_well_formed,
    call,
    collect,
    next_response,
    read_to_status,
    read_until_invocation,
    rpc_code,
    run_spec,
    session_start,
    tool_result,
    turn,
)

MIB = 1024 * 1024
LIMIT = 16 * MIB  # the sidecar's (and the client's) default max_message_bytes
#: A long run takes seconds on a loaded machine: generous, and never waited for in full.
LONG_S = 120.0


@contextlib.asynccontextmanager
async def _raw_stub(address: str) -> AsyncIterator[Any]:
    """The generated stub on a channel that receives what the sidecar may send."""
    options = [("grpc.max_receive_message_length", LIMIT)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        yield service_pb2_grpc.ToolRuntimeServiceStub(channel)


def _reads_script(n: int) -> list[dict[str, Any]]:
    turns = [turn("", call(f"r{i}", "read_file", path="big.txt")) for i in range(1, n + 1)]
    return [*turns, turn("read them all")]


def _echo_script(n: int, size: int) -> list[dict[str, Any]]:
    text = "e" * size
    turns = [turn("", call(f"e{i}", "echo", text=text)) for i in range(1, n + 1)]
    return [*turns, turn("echoed")]


def _result_of(events: list[StreamedEvent]) -> ToolCallRunResult:
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    return terminal.result


async def _read_back_everywhere(
    client: AsyncSidecarClient,
    stub: Any,
    run_id: str,
    result: ToolCallRunResult,
    expected_calls: list[str],
) -> None:
    """The run's result, complete and in order, from GetRun, WatchRun and GetRunHistory; and
    the raw GetRun answer bounded (history omitted, counted)."""
    assert [r.call_id for r in result.tool_call_history] == expected_calls
    info = await client.get_run(run_id)
    assert info.result is not None
    assert info.result.tool_call_history == result.tool_call_history
    watched = await collect(client.watch(run_id), LONG_S)
    assert_well_formed(watched)
    assert _result_of(watched).tool_call_history == result.tool_call_history
    paged = [e async for e in client.run_history(run_id)]
    assert [(e.sequence, e.event) for e in paged] == [(e.sequence, e.event) for e in watched]
    raw = await stub.GetRun(service_pb2.GetRunRequest(run_id=run_id))
    assert raw.ByteSize() < LIMIT
    assert raw.result.history_omitted
    assert raw.result.tool_call_count == len(expected_calls)
    assert not raw.result.tool_call_history


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A sandbox holding ``big.txt``, of exactly the read cap: 1 MiB."""
    (tmp_path / "big.txt").write_bytes(b"a" * MIB)
    return tmp_path


async def test_seventeen_reads_of_a_mebibyte_come_back_by_every_rpc(
    make_sidecar: SidecarFactory, server_tools: ServerTools, sandbox: Path
) -> None:
    server_tools.registry.include(file_tools())
    sidecar = await make_sidecar()
    calls = [f"r{i}" for i in range(1, 18)]
    options: dict[str, Any] = {
        "script": _reads_script(17),
        "context": ToolActorContext(sandbox_root=str(sandbox)),
    }
    async with AsyncSidecarClient(sidecar.address) as client, _raw_stub(sidecar.address) as stub:
        result = await client.run_tool_loop("read", run_id="reads", timeout=LONG_S, **options)
        assert all(len(str(r.output["content"])) == MIB for r in result.tool_call_history)
        await _read_back_everywhere(client, stub, "reads", result, calls)
        streamed = await collect(client.stream_tool_loop("read", **options), LONG_S)
        assert_well_formed(streamed)
        assert [r.call_id for r in _result_of(streamed).tool_call_history] == calls


async def test_a_thousand_echoes_of_ten_kilobytes_come_back_by_every_rpc(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar()
    calls = [f"e{i}" for i in range(1, 1000)]
    options: dict[str, Any] = {"script": _echo_script(999, 10_000), "max_iterations": 1000}
    async with AsyncSidecarClient(sidecar.address) as client, _raw_stub(sidecar.address) as stub:
        result = await client.run_tool_loop("echo", run_id="echoes", timeout=LONG_S, **options)
        assert result.iterations == 1000
        await _read_back_everywhere(client, stub, "echoes", result, calls)
        streamed = await collect(client.stream_tool_loop("echo", **options), LONG_S)
        assert [r.call_id for r in _result_of(streamed).tool_call_history] == calls


async def test_a_result_that_fits_is_sent_as_before(client: AsyncSidecarClient, stub: Any) -> None:
    result = await client.run_tool_loop("echo", run_id="small", script=_echo_script(3, 10))
    raw = await stub.GetRun(service_pb2.GetRunRequest(run_id="small"))
    assert not raw.result.history_omitted
    assert raw.result.tool_call_count == 0
    assert [r.call_id for r in raw.result.tool_call_history] == ["e1", "e2", "e3"]
    assert len(result.tool_call_history) == 3


async def test_history_pages_stay_under_max_bytes_and_cover_the_log(
    client: AsyncSidecarClient, stub: Any
) -> None:
    await client.run_tool_loop("echo", run_id="paged", script=_echo_script(20, 1000))
    after, sequences = 0, []
    while True:
        page = await stub.GetRunHistory(
            service_pb2.GetRunHistoryRequest(run_id="paged", after_sequence=after, max_bytes=4096)
        )
        assert page.ByteSize() <= 4096 + 16 or len(page.events) == 1
        sequences += [e.sequence for e in page.events]
        after = page.events[-1].sequence
        if page.finished and after == page.last_sequence:
            break
    assert sequences == list(range(1, page.last_sequence + 1))
    assert len(sequences) > 20


async def test_history_refuses_a_negative_page_size_and_an_unknown_run(stub: Any) -> None:
    code, details = await rpc_code(
        stub.GetRunHistory(service_pb2.GetRunHistoryRequest(run_id="nope"))
    )
    assert code is grpc.StatusCode.NOT_FOUND, details
    await stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=run_spec([turn("hi")], run_id="r1")))
    code, details = await rpc_code(
        stub.GetRunHistory(service_pb2.GetRunHistoryRequest(run_id="r1", max_bytes=-1))
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_bytes" in details


async def test_a_prompt_too_large_for_run_started_is_refused_naming_the_limit(
    stub: Any,
) -> None:
    spec = run_spec([turn("hi")], prompt="p" * (LIMIT - 60))
    code, details = await rpc_code(stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert "max_message_bytes" in details
    assert "run_started" in details
    _, code, details = await read_to_status(
        stub.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=spec))
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details


async def test_a_tool_output_over_the_limit_is_cut_and_flagged(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    size = 17 * MIB

    async def huge(inputs: Any) -> dict[str, Any]:
        return {"blob": "x" * size}

    server_tools.registry.register(ToolSpec("huge", "A very large output."), huge)
    sidecar = await make_sidecar()
    spec = run_spec([turn("", call("h1", "huge")), turn("done")], run_id="huge")
    async with _raw_stub(sidecar.address) as raw:
        messages, code, details = await read_to_status(
            raw.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=spec))
        )
    assert code is grpc.StatusCode.OK, details
    events = [m.event for m in messages]
    record = next(
        e.tool_call_completed.record
        for e in events
        if e.WhichOneof("payload") == "tool_call_completed"
    )
    assert record.success
    assert record.output_truncated
    assert record.output_bytes == len(json.dumps({"blob": "x" * size}, separators=(",", ":")))
    kept = json.loads(record.output)["truncated_output"]
    assert kept.startswith('{"blob":"xxx')
    assert LIMIT - 2 * MIB < len(kept) < LIMIT
    assert events[-1].run_completed.result.history_omitted
    assert events[-1].run_completed.result.content == "done"


async def test_the_blocking_client_reads_a_large_run_back_whole(
    make_sidecar: SidecarFactory, server_tools: ServerTools, sandbox: Path
) -> None:
    server_tools.registry.include(file_tools())
    sidecar = await make_sidecar()
    calls = [f"r{i}" for i in range(1, 18)]
    context = ToolActorContext(sandbox_root=str(sandbox))

    def blocking() -> tuple[list[str], list[str], list[str], list[int]]:
        with SidecarClient(sidecar.address) as client:
            result = client.run_tool_loop(
                "read", run_id="sync", script=_reads_script(17), context=context
            )
            info = client.get_run("sync")
            assert info.result is not None
            watched = list(client.watch("sync"))
            paged = [e.sequence for e in client.run_history("sync", max_bytes=64 * 1024)]
        return (
            [r.call_id for r in result.tool_call_history],
            [r.call_id for r in info.result.tool_call_history],
            [r.call_id for r in _result_of(watched).tool_call_history],
            paged,
        )

    async with asyncio.timeout(LONG_S):
        ran, got, watched, paged = await asyncio.to_thread(blocking)
    assert ran == got == watched == calls
    assert paged == list(range(1, len(paged) + 1))


async def test_a_session_whose_result_outgrows_a_message_ends_with_every_record(
    client: AsyncSidecarClient,
) -> None:
    def blob(n: int) -> dict[str, str]:
        """Return a mebibyte of text."""
        return {"blob": str(n) * MIB}

    script = [turn("", call(f"b{i}", "blob", n=i % 10)) for i in range(1, 18)] + [turn("done")]
    events = await collect(client.session("blobs", tools=[blob], script=script), LONG_S)
    assert_well_formed(events)
    history = _result_of(events).tool_call_history
    assert [r.call_id for r in history] == [f"b{i}" for i in range(1, 18)]
    assert all(len(str(r.output["blob"])) == MIB for r in history)


async def test_an_event_that_cannot_fit_fails_the_run_saying_which(
    make_sidecar: SidecarFactory,
) -> None:
    # A 64 KiB limit: the spec (40 kB of bindings) and the model's answer (a 40 kB argument)
    # each fit, but the call's inputs, which hold both, do not.
    sidecar = await make_sidecar(max_message_bytes=64 * 1024)
    spec = run_spec(prompt="sink", run_id="too-large")
    spec.context.resource_bindings = json.dumps({"big": "b" * 40_000})
    sink = types_pb2.ToolSpec(name="sink", description="Count the text.")
    answer = session_pb2.LlmResult(
        request_id="llm_1",
        tool_calls=[
            types_pb2.ToolCall(id="s1", name="sink", arguments=json.dumps({"text": "a" * 40_000}))
        ],
    )
    async with _raw_stub(sidecar.address) as stub:
        call = stub.Session()
        await call.write(session_start(spec, sink, client_llm=True))
        response = await next_response(call)
        while not response.HasField("llm_invocation"):
            response = await next_response(call)
        await call.write(session_pb2.SessionRequest(llm_result=answer))
        await call.done_writing()
        messages, code, details = await read_to_status(call)
        info = await stub.GetRun(service_pb2.GetRunRequest(run_id="too-large"))
    assert response.llm_invocation.request_id == "llm_1"
    events = [e for m in messages for e in ([m.event] if m.HasField("event") else m.events)]
    assert code is grpc.StatusCode.OK, details
    assert [e.WhichOneof("payload") for e in events] == ["llm_responded", "run_failed"]
    failed = events[-1].run_failed
    assert failed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "event 4 (tool_call_started)" in failed.message
    assert "max_message_bytes" in failed.message
    assert failed.result.stop_reason == types_pb2.STOP_REASON_ERROR
    assert info.state == types_pb2.RUN_STATE_FAILED


async def test_an_llm_invocation_too_large_to_send_fails_the_run_saying_why(
    make_sidecar: SidecarFactory,
) -> None:
    # Without incremental messages every LLM invocation repeats the conversation: two tool
    # outputs of 35 kB fit one by one, but the third invocation, holding both, does not.
    sidecar = await make_sidecar(max_message_bytes=64 * 1024)
    sink = types_pb2.ToolSpec(name="sink", description="Return a lot.")
    async with _raw_stub(sidecar.address) as stub:
        call = stub.Session()
        await call.write(
            session_start(run_spec(prompt="fill", run_id="conv"), sink, client_llm=True)
        )
        for n in (1, 2):
            response = await next_response(call)
            while not response.HasField("llm_invocation"):
                response = await next_response(call)
            tool_call = types_pb2.ToolCall(id=f"s{n}", name="sink", arguments="{}")
            answer = session_pb2.LlmResult(request_id=f"llm_{n}", tool_calls=[tool_call])
            await call.write(session_pb2.SessionRequest(llm_result=answer))
            invocation = await read_until_invocation(call)
            await call.write(tool_result(invocation.call_id, json.dumps({"x": "y" * 35_000})))
        await call.done_writing()
        messages, code, details = await read_to_status(call)
    events = [e for m in messages for e in ([m.event] if m.HasField("event") else m.events)]
    assert not any(m.HasField("llm_invocation") for m in messages)
    assert code is grpc.StatusCode.OK, details
    assert events[-1].WhichOneof("payload") == "run_failed"
    failed = events[-1].run_failed
    assert failed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "LLM invocation of iteration 3" in failed.message
    assert "max_message_bytes" in failed.message


async def test_a_result_whose_text_alone_outgrows_a_message_has_its_content_cut_and_flagged(
    make_sidecar: SidecarFactory,
) -> None:
    # Three answers of 30 kB each fit, one by one; the partial result's text joins them all,
    # which a 64 KiB limit cannot carry even without the records.
    sidecar = await make_sidecar(max_message_bytes=64 * 1024)
    noop = types_pb2.ToolSpec(name="noop", description="Do nothing.")
    start = session_start(run_spec(prompt="talk", max_iterations=3), noop, client_llm=True)
    start.start.incremental_messages = True
    texts = [str(n) * 30_000 for n in (1, 2, 3)]
    async with _raw_stub(sidecar.address) as stub:
        call = stub.Session()
        await call.write(start)
        for n, text in enumerate(texts, 1):
            response = await next_response(call)
            while not response.HasField("llm_invocation"):
                response = await next_response(call)
            tool_call = types_pb2.ToolCall(id=f"n{n}", name="noop", arguments="{}")
            answer = session_pb2.LlmResult(
                request_id=f"llm_{n}", content=text, tool_calls=[tool_call]
            )
            await call.write(session_pb2.SessionRequest(llm_result=answer))
            invocation = await read_until_invocation(call)
            await call.write(tool_result(invocation.call_id, "{}"))
        await call.done_writing()
        messages, code, details = await read_to_status(call)
    assert code is grpc.StatusCode.OK, details
    terminal = [e for m in messages for e in ([m.event] if m.HasField("event") else m.events)][-1]
    result = terminal.run_completed.result
    assert result.stop_reason == types_pb2.STOP_REASON_MAX_ITERATIONS
    assert result.history_omitted
    assert result.tool_call_count == 3
    assert result.content_truncated
    assert "\n".join(texts).startswith(result.content)
    assert 30_000 < len(result.content) < 64 * 1024


async def test_a_failed_run_raises_with_every_record_of_its_partial_result(
    make_sidecar: SidecarFactory, server_tools: ServerTools, sandbox: Path
) -> None:
    # The script runs out after 17 reads: the run fails, and its partial result (17 MiB of
    # records) comes in the failed call's trailer without them.
    server_tools.registry.include(file_tools())
    sidecar = await make_sidecar()
    script = _reads_script(17)[:-1]
    context = ToolActorContext(sandbox_root=str(sandbox))
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(RunFailedError) as raised:
            await client.run_tool_loop("read", script=script, context=context, timeout=LONG_S)
    assert raised.value.history_omitted
    history = raised.value.result.tool_call_history
    assert [r.call_id for r in history] == [f"r{i}" for i in range(1, 18)]


async def test_a_failed_run_whose_partial_result_outgrows_the_trailer_still_raises_with_it(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar()
    # Ten 2 kB echoes: far from a message's limit, but over the 6 KiB that gRPC's metadata
    # allows the result trailer, which used to be left out (a bare SidecarRpcError).
    text = "e" * 2000
    script = [turn("", call(f"e{i}", "echo", text=text)) for i in range(10)]
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(RunFailedError) as raised:
            await client.run_tool_loop("echo", script=script, timeout=LONG_S)
    assert raised.value.history_omitted
    history = raised.value.result.tool_call_history
    assert [r.call_id for r in history] == [f"e{i}" for i in range(10)]
    assert all(r.output == {"text": text} for r in history)


async def test_records_put_back_keep_the_order_the_model_asked_not_the_order_they_finished(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    # Each turn asks for a slow call, then a fast one: they finish fast first. Over a 64 KiB
    # limit the result leaves its records out, and the clients put them back.
    async def nap(inputs: Any) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {}

    server_tools.registry.register(ToolSpec("nap", "Takes a moment."), nap)
    sidecar = await make_sidecar(max_message_bytes=64 * 1024)
    text = "e" * 8000
    script = [turn("", call(f"s{i}", "nap"), call(f"e{i}", "echo", text=text)) for i in range(5)]
    asked = [call_id for i in range(5) for call_id in (f"s{i}", f"e{i}")]
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop("go", script=script, max_iterations=5, timeout=LONG_S)
        assert [r.call_id for r in result.tool_call_history] == asked  # read by paging
        events = [e async for e in client.stream_tool_loop("go", script=script, max_iterations=5)]
    finished = [e.event.record.call_id for e in events if isinstance(e.event, ToolCallCompleted)]
    assert finished[:2] == ["e0", "s0"]
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    assert [r.call_id for r in terminal.result.tool_call_history] == asked  # from the stream
