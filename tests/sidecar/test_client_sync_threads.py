"""The blocking client's bidi streams (``watch``, ``session``) send their requests from a
thread gRPC starts with the call: a stream that is never iterated, or is dropped part way,
must not leave that thread (and its call) behind."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from cleveragents.client import SidecarClient, SidecarRpcError
from cleveragents.sidecar import Sidecar

from .conftest import WAIT_S, ServerTools, call, echo_script, turn

T = TypeVar("T")


async def in_thread(fn: Callable[[], T]) -> T:
    """Run a blocking call in a worker thread, bounded in time (its joins included)."""
    async with asyncio.timeout(4 * WAIT_S):
        return await asyncio.to_thread(fn)


@pytest.fixture
def sync_client(sidecar: Sidecar) -> Iterator[SidecarClient]:
    with SidecarClient(sidecar.address) as client:
        yield client


def new_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    """The threads alive now that were not in ``before`` (asyncio's workers aside)."""
    return {
        t for t in threading.enumerate()
        if t not in before and t.is_alive() and not t.name.startswith("asyncio_")
    }  # fmt: skip


def ended(threads: set[threading.Thread]) -> bool:
    for thread in threads:
        thread.join(WAIT_S)
    return not any(t.is_alive() for t in threads)


async def test_a_watch_never_iterated_starts_no_thread(sync_client: SidecarClient) -> None:
    def scenario() -> set[threading.Thread]:
        sync_client.run_tool_loop("go", script=echo_script(1), run_id="unread")
        before = set(threading.enumerate())
        watched = sync_client.watch("unread")
        started = new_threads(before)
        del watched
        gc.collect()
        return started | new_threads(before)

    assert await in_thread(scenario) == set()


async def test_a_watch_dropped_part_way_ends_its_thread(sync_client: SidecarClient) -> None:
    def scenario() -> tuple[int, bool]:
        sync_client.run_tool_loop("go", script=echo_script(3), run_id="dropped")
        before = set(threading.enumerate())
        watched = sync_client.watch("dropped")
        first = next(watched)
        started = new_threads(before)
        del watched
        gc.collect()
        return first.sequence, ended(started)

    assert await in_thread(scenario) == (1, True)


async def test_a_watch_read_to_its_end_ends_its_thread(sync_client: SidecarClient) -> None:
    def scenario() -> tuple[int, bool]:
        sync_client.run_tool_loop("go", script=echo_script(1), run_id="read")
        before = set(threading.enumerate())
        events = list(sync_client.watch("read"))
        return len(events), ended(new_threads(before))

    assert await in_thread(scenario) == (8, True)


async def test_a_session_never_iterated_starts_no_thread_and_no_run(
    sync_client: SidecarClient, sidecar: Sidecar
) -> None:
    def scenario() -> set[threading.Thread]:
        before = set(threading.enumerate())
        session = sync_client.session("go", script=echo_script(1), run_id="never")
        started = new_threads(before)
        del session
        gc.collect()
        return started | new_threads(before)

    assert await in_thread(scenario) == set()
    assert sidecar.manager.live_count == 0


async def test_closing_the_client_ends_a_watch_left_part_way(sidecar: Sidecar) -> None:
    def scenario() -> tuple[int, bool, str]:
        client = SidecarClient(sidecar.address)
        client.run_tool_loop("go", script=echo_script(3), run_id="left")
        before = set(threading.enumerate())
        watched = client.watch("left")
        first = next(watched)  # then left, still referenced
        started = new_threads(before)
        client.close()
        stopped = ended(started)
        rest = "ended"
        try:
            next(watched)
        except StopIteration:
            pass
        except SidecarRpcError as exc:
            rest = exc.code.name
        return first.sequence, stopped, rest

    sequence, stopped, rest = await in_thread(scenario)

    assert (sequence, stopped) == (1, True)
    assert rest in ("ended", "CANCELLED")


async def test_closing_the_client_cancels_a_session_left_part_way(
    sidecar: Sidecar, server_tools: ServerTools
) -> None:
    def scenario() -> tuple[str, bool]:
        client = SidecarClient(sidecar.address)
        before = set(threading.enumerate())
        session = client.session("go", script=[turn("", call("h1", "hang"))], run_id="left-s")
        first = next(session)
        started = new_threads(before)
        client.close()
        return type(first.event).__name__, ended(started)

    assert await in_thread(scenario) == ("RunStarted", True)
    await server_tools.wait_hang_ended()  # the run was cancelled: its hanging tool was stopped
