"""The Python clients' opt-in LLM deltas: ``StreamedEvent``s of ``LLMDelta`` (sequence 0) from
stream, watch and session, and a client-hosted LLM that streams its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from cleveragents.client import AsyncSidecarClient, SidecarClient, StreamedEvent
from cleveragents.sidecar import ProfileConfig, Sidecar
from cleveragents.tool import LLMDelta, LLMResponded, RunCompleted, ScriptedLLMCaller

from .conftest import WAIT_S, SidecarFactory, call, turn

LONG = " ".join(f"w{i}" for i in range(30))


def assert_spelled(events: Sequence[StreamedEvent]) -> list[LLMDelta]:
    """The deltas among ``events``: sequence 0, numbered without gaps, spelling each answer."""
    deltas, text, expect = [], "", 0
    for streamed in events:
        event = streamed.event
        if isinstance(event, LLMDelta):
            assert streamed.sequence == 0
            assert event.index == expect
            expect = event.index + event.count
            deltas.append(event)
            text += event.text if event.tool_call_index is None else ""
        elif isinstance(event, LLMResponded):
            assert text == event.content
            text, expect = "", 0
    return deltas


async def test_the_async_client_streams_deltas_only_when_asked(client: AsyncSidecarClient) -> None:
    script = [turn("echo it", call("c1", "echo", text="hi")), turn(LONG)]
    async with asyncio.timeout(WAIT_S):
        plain = [e async for e in client.stream_tool_loop("go", script=script)]
        live = [e async for e in client.stream_tool_loop("go", script=script, stream_deltas=True)]

    assert not any(isinstance(e.event, LLMDelta) for e in plain)
    deltas = assert_spelled(live)
    assert any(d.tool_name == "echo" for d in deltas)
    logged = [e for e in live if not isinstance(e.event, LLMDelta)]
    assert [type(e.event) for e in logged] == [type(e.event) for e in plain]
    assert [e.sequence for e in logged] == [e.sequence for e in plain]


async def test_the_async_watch_joins_a_streaming_call_and_gets_the_rest(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(
        profiles={"slow": ProfileConfig("slow", "scripted", stream_delay_s=0.02)}
    )
    async with AsyncSidecarClient(sidecar.address) as client, asyncio.timeout(WAIT_S * 2):
        starter = client.stream_tool_loop(
            "go", script=[turn(LONG)], profile="slow", run_id="cw", stream_deltas=True
        )
        async for streamed in starter:
            if isinstance(streamed.event, LLMDelta) and streamed.event.index >= 3:
                break
        watched = [e async for e in client.watch("cw", stream_deltas=True)]
        await starter.aclose()

    deltas = assert_spelled(watched)
    assert deltas[0].index == 0
    assert deltas[0].count > 1  # everything so far, coalesced
    assert isinstance(watched[-1].event, RunCompleted)


async def test_a_client_hosted_llm_that_streams_reaches_the_session_as_deltas(
    client: AsyncSidecarClient,
) -> None:
    llm = ScriptedLLMCaller([{"content": LONG}], stream=True)
    async with asyncio.timeout(WAIT_S):
        events = [e async for e in client.session("go", llm=llm, stream_deltas=True)]

    deltas = assert_spelled(events)
    assert "".join(d.text for d in deltas) == LONG
    assert isinstance(events[-1].event, RunCompleted)


async def test_the_blocking_client_streams_and_hosts_a_streaming_llm(sidecar: Sidecar) -> None:
    address = sidecar.address
    llm = ScriptedLLMCaller([{"content": LONG}], stream=True)

    def run() -> tuple[list[StreamedEvent], list[StreamedEvent]]:
        with SidecarClient(address) as sync:
            streamed = list(sync.stream_tool_loop("go", script=[turn(LONG)], stream_deltas=True))
            hosted = list(sync.session("go", llm=llm, stream_deltas=True))
        return streamed, hosted

    async with asyncio.timeout(WAIT_S * 2):
        streamed, hosted = await asyncio.to_thread(run)

    for events in (streamed, hosted):
        assert "".join(d.text for d in assert_spelled(events)) == LONG


ESSAY = " ".join(f"word{i}" for i in range(2000))


async def _watch_from_the_middle(
    sidecar: Sidecar, watch: Callable[[str, int], Awaitable[list[StreamedEvent]]]
) -> list[StreamedEvent]:
    """Start a streaming run, and watch it with deltas from after its ``iteration_started``."""
    async with AsyncSidecarClient(sidecar.address) as client, asyncio.timeout(WAIT_S * 4):
        starter = client.stream_tool_loop(
            "go", script=[turn(ESSAY)], profile="slow", run_id="aw", detach=True
        )
        async for streamed in starter:
            if streamed.sequence == 2:  # iteration_started: the answer streams next
                break
        await starter.aclose()
        return await watch("aw", 2)


def _deltas_window_sidecar(make_sidecar: SidecarFactory) -> Awaitable[Sidecar]:
    return make_sidecar(
        profiles={"slow": ProfileConfig("slow", "scripted", stream_delay_s=0.02)},
        watch_window_bytes=4096,
        watcher_stall_s=1.0,
    )


async def test_an_async_watch_with_deltas_from_a_later_sequence_acks_and_reads_to_the_end(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await _deltas_window_sidecar(make_sidecar)

    async def watch(run_id: str, after: int) -> list[StreamedEvent]:
        async with AsyncSidecarClient(sidecar.address) as client:
            return [e async for e in client.watch(run_id, after_sequence=after, stream_deltas=True)]

    events = await _watch_from_the_middle(sidecar, watch)
    assert isinstance(events[-1].event, RunCompleted)
    text = "".join(e.event.text for e in events if isinstance(e.event, LLMDelta))
    assert text == ESSAY


async def test_a_sync_watch_with_deltas_from_a_later_sequence_acks_and_reads_to_the_end(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await _deltas_window_sidecar(make_sidecar)

    async def watch(run_id: str, after: int) -> list[StreamedEvent]:
        def read() -> list[StreamedEvent]:
            with SidecarClient(sidecar.address) as client:
                return list(client.watch(run_id, after_sequence=after, stream_deltas=True))

        return await asyncio.to_thread(read)

    events = await _watch_from_the_middle(sidecar, watch)
    assert isinstance(events[-1].event, RunCompleted)
    text = "".join(e.event.text for e in events if isinstance(e.event, LLMDelta))
    assert text == ESSAY
