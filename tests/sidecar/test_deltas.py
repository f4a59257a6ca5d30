"""Live LLM deltas over the wire: opt-in per stream, live only (sequence 0, never logged),
coalesced for a stream that joins or lags, and from a client-hosted LLM over a Session."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from cleveragents.sidecar import ProfileConfig, Sidecar
from cleveragents.sidecar.runs.deltas import LiveDeltas
from cleveragents.tool import LLMDelta
from cleveragents.toolruntime.v1 import (
    events_pb2,
    service_pb2,
    service_pb2_grpc,
    session_pb2,
    types_pb2,
)

from .conftest import WAIT_S, SidecarFactory, call, echo_script, run_spec, session_start, turn

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub
    from tests.conftest import ServeSidecar
#: Forty words streamed 20 ms apart: a call long enough for a watcher to join in the middle.
LONG = " ".join(f"word{i}" for i in range(40))


@pytest.fixture
async def slow(make_sidecar: SidecarFactory) -> Sidecar:
    """A sidecar whose ``slow`` profile streams deltas 20 ms apart and whose ``whole``
    profile does not stream at all."""
    return await make_sidecar(
        profiles={
            "slow": ProfileConfig("slow", "scripted", stream_delay_s=0.02),
            "whole": ProfileConfig("whole", "scripted"),
        }
    )


@pytest.fixture
async def slow_stub(slow: Sidecar) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(slow.address) as channel:
        yield service_pb2_grpc.ToolRuntimeServiceStub(channel)


def events_of(responses: Sequence[Any]) -> list[events_pb2.RunEvent]:
    events: list[events_pb2.RunEvent] = []
    for response in responses:
        events += [*response.events, *([response.event] if response.HasField("event") else [])]
    return events


def deltas_of(events: Sequence[events_pb2.RunEvent]) -> list[events_pb2.LlmDelta]:
    return [e.llm_delta for e in events if e.HasField("llm_delta")]


def assert_calls_assemble(events: Sequence[events_pb2.RunEvent]) -> None:
    """Each LLM call's deltas sit between its iteration_started and its llm_responded, are
    numbered without gap and spell the response exactly."""
    text: dict[int, str] = {}
    arguments: dict[tuple[int, int], str] = {}
    expect: dict[int, int] = {}
    last_sequence = 0
    for event in events:
        if event.HasField("llm_delta"):
            delta = event.llm_delta
            assert event.sequence == 0
            assert delta.after_sequence == last_sequence
            assert delta.index == expect.get(delta.iteration, 0)
            expect[delta.iteration] = delta.index + delta.count
            if delta.HasField("tool_call_index"):
                key = (delta.iteration, delta.tool_call_index)
                arguments[key] = arguments.get(key, "") + delta.arguments
            else:
                text[delta.iteration] = text.get(delta.iteration, "") + delta.text
            continue
        assert event.sequence == last_sequence + 1
        last_sequence = event.sequence
        if event.HasField("llm_responded"):
            responded = event.llm_responded
            assert text.get(responded.iteration, "") == responded.content
            for index, tool_call in enumerate(responded.tool_calls):
                got = arguments[(responded.iteration, index)]
                assert json.loads(got) == json.loads(tool_call.arguments)


async def test_a_stream_that_asks_gets_deltas_that_spell_each_answer(stub: Stub) -> None:
    script = [turn("let me echo this", call("c1", "echo", text="hello there")), turn("done")]
    request = service_pb2.StreamToolLoopRequest(spec=run_spec(script), stream_deltas=True)
    async with asyncio.timeout(WAIT_S):
        events = events_of([r async for r in stub.StreamToolLoop(request)])

    deltas = deltas_of(events)
    assert sum(d.count for d in deltas) >= 6  # four words, two argument pieces, "done"
    assert {d.iteration for d in deltas} == {1, 2}
    assert any(d.HasField("tool_call_index") and d.tool_name == "echo" for d in deltas)
    assert_calls_assemble(events)


def _timeless(responses: Sequence[Any]) -> list[bytes]:
    out = []
    for response in responses:
        copy = type(response)()
        copy.CopyFrom(response)
        for event in [*copy.events, *([copy.event] if copy.HasField("event") else [])]:
            event.ClearField("time")
            event.run_id = ""
            if event.HasField("run_started"):
                event.run_started.spec.run_id = ""
                event.run_started.spec.llm.profile = ""
            records = []
            for field in ("run_completed", "run_failed", "run_cancelled"):
                if event.HasField(field):
                    getattr(event, field).result.run_id = ""
                    records += getattr(event, field).result.tool_call_history
            if event.HasField("tool_call_completed"):
                records.append(event.tool_call_completed.record)
            for record in records:  # timings differ from run to run
                record.duration_ms = 0
                record.ClearField("started_at")
        out.append(copy.SerializeToString())
    return out


@pytest.mark.parametrize("batch_events", [False, True])
async def test_without_stream_deltas_a_streaming_run_sends_what_a_whole_answer_run_sends(
    slow_stub: Stub, batch_events: bool
) -> None:
    script = echo_script(2)

    async def responses(profile: str) -> list[Any]:
        spec = run_spec(script, max_iterations=5)
        spec.llm.profile = profile
        request = service_pb2.StreamToolLoopRequest(spec=spec, batch_events=batch_events)
        async with asyncio.timeout(WAIT_S * 2):
            return [r async for r in slow_stub.StreamToolLoop(request)]

    streamed, whole = await responses("slow"), await responses("whole")

    assert not deltas_of(events_of(streamed))
    if batch_events:  # how events share messages depends on timing: compare the events
        streamed = [service_pb2.StreamToolLoopResponse(event=e) for e in events_of(streamed)]
        whole = [service_pb2.StreamToolLoopResponse(event=e) for e in events_of(whole)]
    assert _timeless(streamed) == _timeless(whole)


async def test_deltas_are_never_logged_nor_replayed(stub: Stub) -> None:
    spec = run_spec([turn(LONG)], run_id="d-history")
    request = service_pb2.StreamToolLoopRequest(spec=spec, stream_deltas=True)
    async with asyncio.timeout(WAIT_S):
        live = events_of([r async for r in stub.StreamToolLoop(request)])
    history = await stub.GetRunHistory(service_pb2.GetRunHistoryRequest(run_id="d-history"))
    watch = service_pb2.WatchRunRequest(run_id="d-history", stream_deltas=True)
    async with asyncio.timeout(WAIT_S):
        replayed = events_of([r async for r in stub.WatchRun(watch)])

    assert deltas_of(live)
    logged = [e for e in live if not e.HasField("llm_delta")]
    assert list(history.events) == logged
    assert replayed == logged  # the call is over: its text is in llm_responded


async def test_a_watcher_joining_mid_call_first_gets_everything_so_far_as_one_delta(
    slow_stub: Stub,
) -> None:
    spec = run_spec([turn(LONG)], run_id="d-join")
    spec.llm.profile = "slow"
    starter = slow_stub.StreamToolLoop(
        service_pb2.StreamToolLoopRequest(spec=spec, stream_deltas=True)
    )
    seen = 0
    async with asyncio.timeout(WAIT_S * 2):
        async for response in starter:  # until a few deltas have gone out
            seen += response.event.HasField("llm_delta")
            if seen == 5:
                break
        watch = service_pb2.WatchRunRequest(run_id="d-join", stream_deltas=True)
        watched = events_of([r async for r in slow_stub.WatchRun(watch)])
        rest = events_of([r async for r in starter])

    deltas = deltas_of(watched)
    assert deltas[0].index == 0
    assert deltas[0].count >= 5
    assert deltas[0].text.startswith("word0 word1 word2 word3 word4")
    assert len(deltas) > 1  # then live ones
    assert_calls_assemble(watched)
    assert rest[-1].HasField("run_completed")


async def _watched_around_a_client_tool(stub: Stub, run_id: str) -> list[events_pb2.RunEvent]:
    """A Session that reads no deltas, on the scripted profile (answers split all at once):
    its first answer calls the client's ``hold``, which answers only once a watcher asking
    for deltas has joined; the second answer is the final one. The watcher's events."""
    script = [turn("first answer", call("c1", "hold")), turn("the second answer")]
    call_: Any = stub.Session()
    await call_.write(
        session_start(run_spec(script, run_id=run_id), types_pb2.ToolSpec(name="hold"))
    )
    watch = service_pb2.WatchRunRequest(run_id=run_id, stream_deltas=True)
    watched: list[events_pb2.RunEvent] = []
    async with asyncio.timeout(WAIT_S):
        while (response := await call_.read()) is not grpc.aio.EOF:
            if response.HasField("tool_invocation"):
                watcher: Any = stub.WatchRun(watch)
                watched += events_of([await watcher.read()])  # it has joined: it reads deltas
                result = session_pb2.ToolResult(call_id="c1", output="{}")
                await call_.write(session_pb2.SessionRequest(tool_result=result))
            if events_of([response]) and events_of([response])[-1].HasField("run_completed"):
                await call_.done_writing()
        while (more := await watcher.read()) is not grpc.aio.EOF:
            watched += events_of([more])
    return watched


async def test_a_watcher_asking_for_deltas_gets_them_though_the_run_own_stream_does_not(
    stub: Stub,
) -> None:
    watched = await _watched_around_a_client_tool(stub, "d-unread-then-read")

    deltas = deltas_of(watched)
    assert {d.iteration for d in deltas} == {2}
    assert "".join(d.text for d in deltas) == "the second answer"
    kinds = [e.WhichOneof("payload") for e in watched]
    second = kinds.index("llm_responded", kinds.index("llm_responded") + 1)
    assert set(kinds[second - len(deltas) : second]) == {"llm_delta"}  # right before it


async def test_an_answer_made_while_no_stream_reads_deltas_is_not_split_into_deltas(
    stub: Stub,
) -> None:
    watched = await _watched_around_a_client_tool(stub, "d-unread")

    assert 1 not in {d.iteration for d in deltas_of(watched)}
    responded = [e.llm_responded for e in watched if e.HasField("llm_responded")]
    assert responded[0].content == "first answer"  # whole, in its llm_responded


async def test_a_follower_that_acks_gets_deltas_within_its_window(slow_stub: Stub) -> None:
    spec = run_spec([turn(LONG)], run_id="d-follow")
    spec.llm.profile = "slow"
    await slow_stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec), wait_for_ready=True)
    # Finished: a follower gets the log only. A live one follows next.
    spec = run_spec([turn(LONG)], run_id="d-follow2", detach=True)
    spec.llm.profile = "slow"
    starter = slow_stub.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=spec))
    await starter.read()  # run_started: the run exists
    start = service_pb2.FollowRunStart(run_id="d-follow2", stream_deltas=True, window_bytes=600)
    follow = slow_stub.FollowRun()
    await follow.write(service_pb2.FollowRunRequest(start=start))
    events: list[events_pb2.RunEvent] = []
    handled = 0
    async with asyncio.timeout(WAIT_S * 2):
        async for response in follow:
            events += response.events
            handled = max([handled, *(e.sequence for e in response.events)])
            if response.ack_requested:
                ack = service_pb2.FollowRunAck(sequence=handled)
                await follow.write(service_pb2.FollowRunRequest(ack=ack))
            if events and events[-1].HasField("run_completed"):
                await follow.done_writing()
    starter.cancel()

    assert len(deltas_of(events)) > 1
    assert_calls_assemble(events)


async def _client_llm_session(
    stub: Stub,
    deltas: Sequence[session_pb2.LlmResultDelta],
    *,
    stream: bool = True,
    answer: session_pb2.LlmResult | None = None,
) -> tuple[list[events_pb2.RunEvent], grpc.StatusCode | None, str]:
    """A Session whose client LLM streams ``deltas`` then answers ``answer`` (by default the
    text the deltas spell)."""
    call_ = stub.Session()
    start = session_start(run_spec(), client_llm=True)
    start.start.stream_deltas = stream
    await call_.write(start)
    events: list[events_pb2.RunEvent] = []
    code, details = None, ""
    try:
        async with asyncio.timeout(WAIT_S):
            async for response in call_:
                events += [
                    *response.events,
                    *([response.event] if response.HasField("event") else []),
                ]
                if response.HasField("llm_invocation"):
                    request_id = response.llm_invocation.request_id
                    for delta in deltas:
                        piece = session_pb2.LlmResultDelta()
                        piece.CopyFrom(delta)
                        piece.request_id = piece.request_id or request_id
                        await call_.write(session_pb2.SessionRequest(llm_delta=piece))
                    text = "".join(d.text for d in deltas)
                    result = session_pb2.LlmResult(content=text)
                    if answer is not None:
                        result.CopyFrom(answer)
                    result.request_id = request_id
                    await call_.write(session_pb2.SessionRequest(llm_result=result))
                if events and events[-1].WhichOneof("payload") in (
                    "run_completed", "run_failed", "run_cancelled",
                ):  # fmt: skip
                    await call_.done_writing()
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code(), exc.details() or ""
    return events, code, details


async def test_a_client_hosted_llm_streams_its_answer_to_the_session(stub: Stub) -> None:
    pieces = [session_pb2.LlmResultDelta(index=i, text=t) for i, t in enumerate(["Hel", "lo", "!"])]

    events, code, _ = await _client_llm_session(stub, pieces)

    assert code is None
    assert [d.text for d in deltas_of(events)] in (["Hel", "lo", "!"], ["Hello!"], ["Hel", "lo!"])
    assert_calls_assemble(events)
    assert events[-1].run_completed.result.content == "Hello!"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (session_pb2.LlmResultDelta(index=1, text="x"), "llm_delta index 1"),
        (session_pb2.LlmResultDelta(request_id="llm_9", text="x"), "'llm_9', which is not"),
        (session_pb2.LlmResultDelta(tool_call_index=-1), "tool_call_index -1"),
    ],
)
async def test_a_bad_client_llm_delta_is_refused_with_invalid_argument(
    stub: Stub, bad: session_pb2.LlmResultDelta, says: str
) -> None:
    _, code, details = await _client_llm_session(stub, [bad])

    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert says in details


@pytest.mark.parametrize(
    ("pieces", "answer", "says"),
    [
        (
            [session_pb2.LlmResultDelta(index=0, text="Hello")],
            session_pb2.LlmResult(content="Goodbye"),
            "llm_delta text does not match llm_result content",
        ),
        (
            [
                session_pb2.LlmResultDelta(
                    index=0, tool_call_index=0, tool_call_id="c1", tool_name="echo",
                    arguments='{"text":"a"}',
                )
            ],
            session_pb2.LlmResult(
                tool_calls=[types_pb2.ToolCall(id="c1", name="echo", arguments='{"text":"b"}')]
            ),
            "arguments of tool call 0 do not match",
        ),
        (
            [session_pb2.LlmResultDelta(index=0, text="Hi")],
            session_pb2.LlmResult(
                content="Hi", tool_calls=[types_pb2.ToolCall(id="c1", name="echo")]
            ),
            "arguments of tool call 0 were not streamed",
        ),
    ],
)  # fmt: skip
async def test_client_llm_deltas_that_do_not_spell_its_result_are_refused(
    stub: Stub,
    pieces: list[session_pb2.LlmResultDelta],
    answer: session_pb2.LlmResult,
    says: str,
) -> None:
    events, code, details = await _client_llm_session(stub, pieces, answer=answer)

    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert says in details
    assert "request_id 'llm_1'" in details
    assert not any(e.HasField("llm_responded") for e in events)


async def _stream_until_failed(
    address: str, deltas: Callable[[str], Iterator[session_pb2.LlmResultDelta]]
) -> events_pb2.RunFailed:
    """A Session whose client-hosted LLM streams ``deltas(request_id)`` to its invocation and
    then answers with an error (reached only if all were taken); the run's ``run_failed``."""
    events: list[events_pb2.RunEvent] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call_ = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
        start = session_start(run_spec(), client_llm=True)
        start.start.stream_deltas = True
        await call_.write(start)

        async def stream(request_id: str) -> None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                for delta in deltas(request_id):
                    await call_.write(session_pb2.SessionRequest(llm_delta=delta))
                answer = session_pb2.LlmResult(request_id=request_id, error="all sent")
                await call_.write(session_pb2.SessionRequest(llm_result=answer))

        with contextlib.suppress(grpc.aio.AioRpcError):
            async with asyncio.timeout(WAIT_S * 12), asyncio.TaskGroup() as group:
                async for response in call_:
                    events += events_of([response])
                    if response.HasField("llm_invocation"):
                        group.create_task(stream(response.llm_invocation.request_id))
                    if events and events[-1].HasField("run_failed"):
                        break
    return events[-1].run_failed


async def test_a_client_llm_streaming_past_max_message_bytes_fails_its_run_and_is_not_kept(
    serve_sidecar: ServeSidecar,
) -> None:
    """3,000 deltas of 60 KB (180 MB) from a client-hosted LLM: once they pass what its
    llm_result may carry the run fails RESOURCE_EXHAUSTED naming the request, and the rest
    are dropped, not held."""
    sidecar = serve_sidecar(max_message_bytes=4 * 1024 * 1024)
    before = sidecar.status_kib("VmRSS")
    piece = "x" * 60_000

    def deltas(request_id: str) -> Iterator[session_pb2.LlmResultDelta]:
        for index in range(3000):
            yield session_pb2.LlmResultDelta(request_id=request_id, index=index, text=piece)

    failed = await _stream_until_failed(sidecar.address, deltas)

    assert failed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "request_id 'llm_1'" in failed.message
    assert "max_message_bytes" in failed.message
    assert sidecar.status_kib("VmHWM") - before < 100 * 1024


@pytest.mark.parametrize("field", ["tool_call_id", "tool_name"])
async def test_a_client_llm_streaming_long_ids_or_names_fails_its_run_and_they_are_not_kept(
    serve_sidecar: ServeSidecar, field: str
) -> None:
    """160 deltas each carrying a 2 MiB ``tool_call_id`` (or ``tool_name``), 320 MiB in all,
    against ``max_message_bytes`` of 4 MiB: every character a delta carries counts toward the
    answer's bound, so the second fails the run RESOURCE_EXHAUSTED and the rest are dropped (the
    sidecar grew by 334 MiB when only text and arguments counted)."""
    sidecar = serve_sidecar(max_message_bytes=4 * 1024 * 1024)
    before = sidecar.status_kib("VmRSS")

    def deltas(request_id: str) -> Iterator[session_pb2.LlmResultDelta]:
        for index in range(160):
            delta = session_pb2.LlmResultDelta(
                request_id=request_id, index=index, tool_call_index=index
            )
            setattr(delta, field, chr(ord("a") + index % 26) * (2 * 1024 * 1024))
            yield delta

    failed = await _stream_until_failed(sidecar.address, deltas)

    assert failed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "llm_delta 1 for request_id 'llm_1'" in failed.message
    assert "tool call ids and names to 4194304 characters" in failed.message
    assert "max_message_bytes" in failed.message
    assert sidecar.status_kib("VmHWM") - before < 100 * 1024


def test_a_call_streaming_many_small_deltas_keeps_memory_of_its_answer_size() -> None:
    """200,000 one-character deltas, one reader part way through: what the run keeps is
    joined, so it costs about the answer's size, and the reader still gets every character."""
    live = LiveDeltas("r")
    reader = live.reader(lambda: None, 1)
    tracemalloc.start()
    try:
        for index in range(200_000):
            live.add(1, LLMDelta(1, index, "x"))
            if index == 1000:
                first = reader.take(1, 1 << 30)
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rest = reader.take(1, 1 << 30)

    assert kept < 2 * 1024 * 1024  # 200,000 kept deltas would be ~30 MB
    got = [_unframe(item).llm_delta for item in [*first, *rest]]
    assert "".join(d.text for d in got) == "x" * 200_000
    assert [d.index for d in got] == list(itertools.accumulate([0, *(d.count for d in got)]))[:-1]


def _unframe(item: bytes) -> events_pb2.RunEvent:
    """The event of one length-delimited frame."""
    size, shift, at = 0, 0, 0
    while True:
        byte = item[at]
        size, shift, at = size | (byte & 0x7F) << shift, shift + 7, at + 1
        if byte < 0x80:
            break
    assert len(item) == at + size
    return events_pb2.RunEvent.FromString(item[at:])
