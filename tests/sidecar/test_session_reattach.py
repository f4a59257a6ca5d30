"""A Session run whose client went away waits ``session_reattach_s`` for it to re-attach.

Raw streams on real sockets: the first client's channel is closed mid-call (the connection
drops), a second channel re-attaches with the last sequence it saw, and gets the events after
it and the invocation still owed, with its original call id and idempotency key.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarClient, StreamedEvent
from cleveragents.client.session_logic import SessionLogic
from cleveragents.sidecar import ClientConfig, ConfigError, Sidecar, SidecarConfig
from cleveragents.tool import RunCancelled, RunCompleted, ToolCallCompleted, ToolCallStarted
from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, session_pb2, types_pb2
from cleveragents.wire import Conversation

from .conftest import (
    WAIT_S,
    LaggingProxy,
    SidecarFactory,
    assert_well_formed,
    call,
    drain_session,
    read_until_invocation,
    run_spec,
    session_start,
    stream_code,
    tool_result,
    turn,
    watch_to_end,
)

REMOTE = types_pb2.ToolSpec(name="remote")
SCRIPT = [turn("", call("r1", "remote")), turn("done")]


def reattach(run_id: str, after: int, *tools: types_pb2.ToolSpec) -> session_pb2.SessionRequest:
    """A ``SessionStart`` re-attaching to ``run_id`` after sequence ``after``."""
    start = session_start(run_spec(SCRIPT), *tools)
    start.start.reattach_run_id = run_id
    start.start.after_sequence = after
    return start


async def parked(sidecar: Sidecar, run_id: str) -> None:
    """Until the sidecar has noticed the dropped stream and lets ``run_id`` wait."""
    parked_runs = sidecar.manager.parked
    async with asyncio.timeout(WAIT_S):
        while parked_runs.get(run_id) is None:
            parked_runs.parked_one.clear()
            await parked_runs.parked_one.wait()


async def dropped_mid_call(
    sidecar: Sidecar, run_id: str, metadata: tuple[tuple[str, str], ...] = ()
) -> tuple[list[events_pb2.RunEvent], session_pb2.ToolInvocation]:
    """Start a session run, read to its invocation, then close the client's channel."""
    events: list[events_pb2.RunEvent] = []
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        session = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session(metadata=metadata)
        await session.write(session_start(run_spec(SCRIPT, run_id=run_id), REMOTE))
        invocation = await read_until_invocation(session, events)
    await parked(sidecar, run_id)
    return events, invocation


@pytest.fixture
async def reattaching(make_sidecar: SidecarFactory) -> Sidecar:
    return await make_sidecar(session_reattach_s=60)


async def test_a_new_client_reattaching_after_a_drop_gets_the_owed_call_and_the_run_completes(
    reattaching: Sidecar,
) -> None:
    before, invocation = await dropped_mid_call(reattaching, "r")
    seen = before[-1].sequence
    async with (
        grpc.aio.insecure_channel(reattaching.address) as channel,
        AsyncSidecarClient(reattaching.address) as client,
    ):
        session = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
        await session.write(reattach("r", seen - 1, REMOTE))  # it missed its last event
        missed: list[events_pb2.RunEvent] = []
        again = await read_until_invocation(session, missed)
        await session.write(tool_result(again.call_id, '{"ok": true}'))
        missed += await drain_session(session)
        log = await watch_to_end(client, "r")

    assert (again.call_id, again.idempotency_key) == (
        invocation.call_id,
        invocation.idempotency_key,
    )
    assert again.call_id == "r1"
    assert [e.sequence for e in missed] == list(range(seen, log[-1].sequence + 1))
    assert_well_formed(log)
    assert isinstance(log[-1].event, RunCompleted)
    (record,) = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert record.success
    assert record.output == {"ok": True}


async def test_nobody_reattaching_within_the_window_cancels_the_run_once_saying_why(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(session_reattach_s=0.2)
    await dropped_mid_call(sidecar, "w")
    async with AsyncSidecarClient(sidecar.address) as client:
        log = await watch_to_end(client, "w")

    assert_well_formed(log)
    end = log[-1].event
    assert isinstance(end, RunCancelled)
    assert "no client re-attached within session_reattach_s (0.2 s)" in end.reason


async def test_a_second_stream_cannot_attach_to_a_run_another_stream_holds(
    reattaching: Sidecar,
) -> None:
    async with grpc.aio.insecure_channel(reattaching.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        holder = stub.Session()
        await holder.write(session_start(run_spec(SCRIPT, run_id="h"), REMOTE))
        await read_until_invocation(holder)
        intruder = stub.Session()
        await intruder.write(reattach("h", 0, REMOTE))
        code, details = await stream_code(intruder)
        holder.cancel()

    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert "is not waiting for a client" in details


async def test_reattaching_with_other_tools_is_refused_and_the_run_still_waits(
    reattaching: Sidecar,
) -> None:
    await dropped_mid_call(reattaching, "t")
    async with grpc.aio.insecure_channel(reattaching.address) as channel:
        session = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
        await session.write(reattach("t", 0, types_pb2.ToolSpec(name="other")))
        code, details = await stream_code(session)

    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "re-declare" in details
    assert reattaching.manager.parked.get("t") is not None


TOKENS = {"alice": "alice-reattach-token-1", "bob": "bob-reattach-token-2"}


@pytest.fixture
async def with_identities(make_sidecar: SidecarFactory, monkeypatch: pytest.MonkeyPatch) -> Sidecar:
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"REATTACH_TOKEN_{name.upper()}", token)
    clients = {
        name: ClientConfig(name, token_env=f"REATTACH_TOKEN_{name.upper()}") for name in TOKENS
    }
    return await make_sidecar(session_reattach_s=60, clients=clients)


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


async def test_another_identity_cannot_reattach_and_is_told_not_found(
    with_identities: Sidecar,
) -> None:
    await dropped_mid_call(with_identities, "a", bearer("alice"))
    async with grpc.aio.insecure_channel(with_identities.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        intruder = stub.Session(metadata=bearer("bob"))
        await intruder.write(reattach("a", 0, REMOTE))
        code, details = await stream_code(intruder)
        owner = stub.Session(metadata=bearer("alice"))
        await owner.write(reattach("a", 0, REMOTE))
        again = await read_until_invocation(owner)
        await owner.write(tool_result(again.call_id))
        events = await drain_session(owner)

    assert code is grpc.StatusCode.NOT_FOUND
    assert "no run with id 'a'" in details
    assert events[-1].HasField("run_completed")


async def test_reattaching_to_a_run_that_ended_meanwhile_sends_the_rest_of_its_log(
    reattaching: Sidecar,
) -> None:
    before, _ = await dropped_mid_call(reattaching, "e")
    async with AsyncSidecarClient(reattaching.address) as client:
        await client.cancel_run("e", reason="from outside")
        async with grpc.aio.insecure_channel(reattaching.address) as channel:
            session = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            await session.write(reattach("e", before[-1].sequence, REMOTE))
            rest = await drain_session(session)
            code = await session.code()

    assert code is grpc.StatusCode.OK
    assert rest[0].sequence == before[-1].sequence + 1
    assert rest[-1].run_cancelled.reason == "from outside"


# -- the Python client re-attaching on its own ---------------------------------------------------


async def test_the_async_client_reattaches_after_its_connection_drops_mid_call(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(session_reattach_s=60)
    proxy = LaggingProxy(sidecar.address)
    await proxy.start()
    running, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def remote() -> dict[str, str]:
        """Wait for the test's release.

        Returns:
            A fixed answer.
        """
        calls.append("remote")
        running.set()
        await release.wait()
        return {"answer": "late"}

    seen: list[StreamedEvent] = []
    try:
        async with (
            AsyncSidecarClient(proxy.address) as client,
            AsyncSidecarClient(sidecar.address) as direct,
        ):
            session = client.session("go", tools=[remote], script=SCRIPT, run_id="c", reattach=True)
            async with asyncio.timeout(WAIT_S * 4):
                async for streamed in session:
                    seen.append(streamed)
                    if isinstance(streamed.event, ToolCallStarted):
                        await running.wait()
                        proxy.cut()  # the connection drops with the call in flight
                        await parked(sidecar, "c")
                        release.set()
            log = await watch_to_end(direct, "c")
    finally:
        await proxy.close()

    assert calls == ["remote"]  # run once, answered on the re-attached stream
    assert [e.sequence for e in seen] == [e.sequence for e in log]
    assert_well_formed(log)
    assert isinstance(log[-1].event, RunCompleted)
    (record,) = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert record.output == {"answer": "late"}


async def test_the_sync_client_reattaches_and_answers_the_owed_call_without_running_it_twice(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(session_reattach_s=60)
    proxy = LaggingProxy(sidecar.address)
    await proxy.start()
    loop = asyncio.get_running_loop()
    calls: list[str] = []

    def remote() -> dict[str, str]:
        """Drop the connection while this call runs, and answer once the run waits.

        Returns:
            A fixed answer.
        """
        calls.append("remote")
        loop.call_soon_threadsafe(proxy.cut)
        asyncio.run_coroutine_threadsafe(parked(sidecar, "y"), loop).result(WAIT_S)
        return {"answer": "after the drop"}  # sent on the dead stream: lost

    try:
        with SidecarClient(proxy.address) as client:
            session = client.session("go", tools=[remote], script=SCRIPT, run_id="y", reattach=True)
            async with asyncio.timeout(WAIT_S * 4):
                seen = await asyncio.to_thread(lambda: list(session))
    finally:
        await proxy.close()

    assert calls == ["remote"]  # the answer is sent again, the tool not run again
    assert_well_formed(seen)
    assert isinstance(seen[-1].event, RunCompleted)
    (record,) = [e.event.record for e in seen if isinstance(e.event, ToolCallCompleted)]
    assert record.output == {"answer": "after the drop"}


REATTACH_S = 2.0  # a client's re-attach window, shorter than the sessions below last


def outlive(seconds: float) -> None:
    """Return once ``seconds`` have passed on the monotonic clock: a tool's long work (polled
    inside the tool, never to synchronise the test)."""
    began = time.monotonic()
    while time.monotonic() - began <= seconds:
        time.sleep(0.05)


async def test_an_async_session_older_than_its_reattach_timeout_reattaches_counting_from_the_break(
    reattaching: Sidecar,
) -> None:
    proxy = LaggingProxy(reattaching.address)
    await proxy.start()
    aged, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def remote() -> dict[str, str]:
        """Outlive the session's re-attach timeout, then wait for the test's release.

        Returns:
            A fixed answer.
        """
        calls.append("remote")
        await asyncio.to_thread(outlive, REATTACH_S)
        aged.set()
        await release.wait()
        return {"answer": "late"}

    try:
        async with (
            AsyncSidecarClient(proxy.address) as client,
            AsyncSidecarClient(reattaching.address) as direct,
        ):
            session = client.session(
                "go", tools=[remote], script=SCRIPT, run_id="oa",
                reattach=True, reattach_timeout=REATTACH_S,
            )  # fmt: skip
            async with asyncio.timeout(WAIT_S * 4):
                async for streamed in session:
                    if isinstance(streamed.event, ToolCallStarted):
                        await aged.wait()  # the session is older than its timeout now
                        proxy.cut()
                        await parked(reattaching, "oa")
                        release.set()
            log = await watch_to_end(direct, "oa")
    finally:
        await proxy.close()

    assert calls == ["remote"]
    assert_well_formed(log)
    assert isinstance(log[-1].event, RunCompleted)
    (record,) = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
    assert record.output == {"answer": "late"}


async def test_a_sync_session_older_than_its_reattach_timeout_reattaches_counting_from_the_break(
    reattaching: Sidecar,
) -> None:
    proxy = LaggingProxy(reattaching.address)
    await proxy.start()
    loop = asyncio.get_running_loop()
    calls: list[str] = []

    def remote() -> dict[str, str]:
        """Outlive the session's re-attach timeout, then drop the connection and answer once
        the run waits.

        Returns:
            A fixed answer.
        """
        calls.append("remote")
        outlive(REATTACH_S)
        loop.call_soon_threadsafe(proxy.cut)
        asyncio.run_coroutine_threadsafe(parked(reattaching, "os"), loop).result(WAIT_S)
        return {"answer": "after the drop"}

    try:
        with SidecarClient(proxy.address) as client:
            session = client.session(
                "go", tools=[remote], script=SCRIPT, run_id="os",
                reattach=True, reattach_timeout=REATTACH_S,
            )  # fmt: skip
            async with asyncio.timeout(WAIT_S * 4):
                seen = await asyncio.to_thread(lambda: list(session))
    finally:
        await proxy.close()

    assert calls == ["remote"]
    assert_well_formed(seen)
    assert isinstance(seen[-1].event, RunCompleted)
    (record,) = [e.event.record for e in seen if isinstance(e.event, ToolCallCompleted)]
    assert record.output == {"answer": "after the drop"}


async def test_leaving_a_sync_session_early_cancels_the_run_at_once_despite_the_window(
    reattaching: Sidecar,
) -> None:
    def remote() -> dict[str, str]:
        """Never called: the client leaves first.

        Returns:
            Nothing useful.
        """
        return {}

    def leave_at_the_first_event() -> None:
        with SidecarClient(reattaching.address) as client:
            for _ in client.session("go", tools=[remote], script=SCRIPT, run_id="l"):
                break

    async with asyncio.timeout(WAIT_S * 4):
        await asyncio.to_thread(leave_at_the_first_event)
    async with AsyncSidecarClient(reattaching.address) as client:
        log = await watch_to_end(client, "l")

    end = log[-1].event
    assert isinstance(end, RunCancelled)
    assert end.reason == "the client went away"


@pytest.mark.parametrize("value", [-1.0, float("inf"), float("nan")])
def test_session_reattach_s_must_be_zero_or_a_finite_number_of_seconds(value: float) -> None:
    with pytest.raises(ConfigError, match="session_reattach_s must be 0"):
        SidecarConfig(session_reattach_s=value)


@pytest.mark.parametrize(
    ("code", "details", "retried"),
    [
        # gRPC's own status for a call whose answer was written as its connection dropped
        (grpc.StatusCode.INTERNAL, "INTERNAL: Internal error from Core", True),
        (grpc.StatusCode.INTERNAL, "INTERNAL: the sidecar failed", False),
        (grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE: run 'r' runs on sidecar 'a'", True),
        (grpc.StatusCode.NOT_FOUND, "NOT_FOUND: no run with id 'r'", False),
    ],
)
def test_a_client_reattaches_after_a_write_broken_by_the_drop_but_not_after_a_sidecar_error(
    code: grpc.StatusCode, details: str, retried: bool
) -> None:
    logic = SessionLogic("go", tools=(), llm=None, approver=None, options={})
    logic.run_id = "r"  # an event was seen: the run exists
    assert (logic.retry_after(code, details, 0) is not None) is retried


def test_a_reattached_clients_conversation_restarts_from_an_invocation_carrying_all_of_it() -> None:
    # A sidecar that restarted (or adopted the run) has no record of what the client holds:
    # its first LLM invocation carries the whole conversation again, at offset 0.
    conversation = Conversation()
    hello = types_pb2.Message(content="hi")
    conversation.request(session_pb2.LlmInvocation(iteration=1, messages=[hello]))
    whole = [hello, types_pb2.Message(content="a"), types_pb2.Message(content="b")]
    request = conversation.request(session_pb2.LlmInvocation(iteration=2, messages=whole))
    assert [m.content for m in request.messages] == ["hi", "a", "b"]
    more = session_pb2.LlmInvocation(iteration=3, message_offset=3, messages=[hello])
    assert len(conversation.request(more).messages) == 4  # and goes on from there
