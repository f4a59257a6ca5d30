"""A client-hosted LLM's deltas reach the sidecar while it answers, not after: a blocking LLM
runs in a thread beside the session's loop, and one that streams from a worker thread wakes
the loop that sends its deltas. A watcher of the run sees the first delta before the LLM
returns (the LLM waits for it)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from cleveragents.client import AsyncSidecarClient, SidecarClient, StreamedEvent
from cleveragents.sidecar import Sidecar
from cleveragents.tool import LLMDelta, LLMRequest, LLMResponse, ResponseDelta, RunCompleted

from .conftest import WAIT_S

WORDS = ("Hello", " live", " world", "!")
#: How long the LLM waits for its first delta to be seen before giving up on it.
GATE_S = WAIT_S


class GatedLLM:
    """A blocking streaming LLM: it streams its first delta, waits until a watcher has seen
    it (``seen``), then streams the rest 0.2 s apart and answers."""

    def __init__(self) -> None:
        self.called = threading.Event()
        self.seen = threading.Event()
        self.seen_before_answer: bool | None = None

    def call(self, request: LLMRequest) -> LLMResponse:
        """Stream the words through ``request.deltas``, the first one gated on ``seen``."""
        assert request.deltas is not None
        request.deltas(ResponseDelta(text=WORDS[0]))
        self.called.set()
        self.seen_before_answer = self.seen.wait(GATE_S)
        for word in WORDS[1:]:
            time.sleep(0.2)  # the model's pace, not a synchronisation
            request.deltas(ResponseDelta(text=word))
        return LLMResponse(content="".join(WORDS))


class ThreadedAsyncLLM(GatedLLM):
    """An async LLM that streams from a worker thread (as a blocking SDK wrapped in a thread
    would)."""

    async def call(self, request: LLMRequest) -> LLMResponse:  # type: ignore[override]
        """``GatedLLM.call`` in a worker thread."""
        return await asyncio.to_thread(GatedLLM.call, self, request)


async def watch_deltas(
    client: AsyncSidecarClient, llm: GatedLLM, run_id: str
) -> list[StreamedEvent]:
    """Watch ``run_id`` once ``llm`` is called, opening its gate at the first delta seen."""
    assert await asyncio.to_thread(llm.called.wait, WAIT_S)
    events = []
    async for streamed in client.watch(run_id, stream_deltas=True):
        events.append(streamed)
        if isinstance(streamed.event, LLMDelta):
            llm.seen.set()
    return events


def assert_live(llm: GatedLLM, events: list[StreamedEvent]) -> None:
    """The watcher saw the first delta while the LLM waited, and then all of its text."""
    assert llm.seen_before_answer is True
    text = "".join(e.event.text for e in events if isinstance(e.event, LLMDelta))
    assert text == "".join(WORDS)
    assert isinstance(events[-1].event, RunCompleted)


async def hosted_in_async_client(client: AsyncSidecarClient, llm: Any, run_id: str) -> None:
    """Host ``llm`` in a session of the async client, to the run's end."""
    async for _ in client.session("go", llm=llm, run_id=run_id, stream_deltas=True):
        pass


async def test_a_blocking_hosted_llm_streams_live_through_the_async_client(
    client: AsyncSidecarClient,
) -> None:
    llm = GatedLLM()
    async with asyncio.timeout(WAIT_S * 3), asyncio.TaskGroup() as group:
        group.create_task(hosted_in_async_client(client, llm, "live-aio"))
        watched = group.create_task(watch_deltas(client, llm, "live-aio"))

    assert_live(llm, watched.result())


async def test_an_async_hosted_llm_streaming_from_a_thread_wakes_the_async_client(
    client: AsyncSidecarClient,
) -> None:
    llm = ThreadedAsyncLLM()
    # In debug mode the loop refuses a call from another thread that is not thread-safe
    # (which might otherwise go unnoticed until something else wakes the loop).
    asyncio.get_running_loop().set_debug(True)
    async with asyncio.timeout(WAIT_S * 3), asyncio.TaskGroup() as group:
        group.create_task(hosted_in_async_client(client, llm, "live-thread"))
        watched = group.create_task(watch_deltas(client, llm, "live-thread"))

    assert_live(llm, watched.result())


async def test_a_blocking_hosted_llm_streams_live_through_the_blocking_client(
    sidecar: Sidecar, client: AsyncSidecarClient
) -> None:
    llm = GatedLLM()

    def host() -> None:
        with SidecarClient(sidecar.address) as sync:
            for _ in sync.session("go", llm=llm, run_id="live-sync", stream_deltas=True):
                pass

    async with asyncio.timeout(WAIT_S * 3), asyncio.TaskGroup() as group:
        group.create_task(asyncio.to_thread(host))
        watched = group.create_task(watch_deltas(client, llm, "live-sync"))

    assert_live(llm, watched.result())
