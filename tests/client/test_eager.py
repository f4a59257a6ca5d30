"""``started``, ``Resumed`` and ``cannot_suspend``: work that finishes without suspending is done
where it is started; work that suspends goes on, from where it stopped, wherever it is awaited."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import types
from collections.abc import AsyncIterator, Generator
from typing import Any

import pytest

from cleveragents.client.eager import Finished, Resumed, cannot_suspend, started


@types.coroutine
def pause(shown: str) -> Generator[str, Any, Any]:
    """Suspends its awaiter, showing ``shown`` to whoever drives it; returns what it is sent."""
    return (yield shown)


async def twice() -> tuple[Any, Any]:
    return await pause("first"), await pause("second")


async def answer() -> int:
    return 42


async def fails() -> int:
    raise ValueError("no")


def test_work_that_never_suspends_is_finished_at_once() -> None:
    assert started(answer()) == Finished(42)


def test_what_the_first_step_raises_is_raised() -> None:
    with pytest.raises(ValueError, match="no"):
        started(fails())


def test_work_that_suspends_is_handed_on_stopped_where_it_suspended() -> None:
    rest = started(twice())

    assert isinstance(rest, Resumed)
    assert rest.send(None) == "first"  # what it yielded when it stopped, not a second step


def test_resumed_forwards_what_it_is_sent() -> None:
    rest = started(twice())
    assert isinstance(rest, Resumed)
    rest.send(None)

    assert rest.send("a") == "second"
    with pytest.raises(StopIteration) as done:
        rest.send("b")
    assert done.value.value == ("a", "b")


def test_resumed_forwards_what_is_thrown_into_it() -> None:
    async def catches() -> str:
        try:
            await pause("waiting")
        except KeyError:
            return "caught"
        return "not thrown"

    rest = started(catches())
    assert isinstance(rest, Resumed)
    rest.send(None)

    with pytest.raises(StopIteration) as done:
        rest.throw(KeyError("k"))
    assert done.value.value == "caught"


def test_resumed_forwards_a_throw_before_its_first_step() -> None:
    """A task cancelled before its first step throws into its coroutine at once."""

    async def catches() -> str:
        try:
            await pause("waiting")
        except asyncio.CancelledError:
            return "cancelled"
        return "not thrown"

    rest = started(catches())
    assert isinstance(rest, Resumed)

    with pytest.raises(StopIteration) as done:
        rest.throw(asyncio.CancelledError())
    assert done.value.value == "cancelled"


def test_resumed_forwards_close() -> None:
    closed = False

    async def cleans_up() -> None:
        nonlocal closed
        try:
            await pause("waiting")
        finally:
            closed = True

    rest = started(cleans_up())
    assert isinstance(rest, Resumed)
    rest.send(None)

    rest.close()

    assert closed


async def test_a_task_finishes_resumed_work_from_where_it_stopped() -> None:
    go = asyncio.Event()
    steps: list[str] = []

    async def waits() -> str:
        steps.append("started")
        await go.wait()
        steps.append("went on")
        return "done"

    rest = started(waits())
    assert isinstance(rest, Resumed)
    task: asyncio.Task[str] = asyncio.create_task(rest)
    go.set()

    assert await task == "done"
    assert steps == ["started", "went on"]


async def test_resumed_work_is_awaitable() -> None:
    go = asyncio.Event()

    async def waits() -> str:
        await go.wait()
        return "done"

    rest = started(waits())
    assert isinstance(rest, Resumed)
    asyncio.get_running_loop().call_soon(go.set)

    assert await rest == "done"


async def test_a_task_cancelled_while_its_resumed_work_waits_cancels_the_work() -> None:
    cancelled = False

    async def waits() -> None:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled = True
            raise

    rest = started(waits())
    assert isinstance(rest, Resumed)
    task: asyncio.Task[None] = asyncio.create_task(rest)  # it waits on the event already

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled


async def plain() -> dict[str, Any]:
    return {}


async def awaits() -> None:
    await asyncio.sleep(0)


async def enters() -> None:
    async with contextlib.AsyncExitStack():
        pass


async def iterates(items: AsyncIterator[int]) -> None:
    async for _ in items:
        pass


def blocking() -> None:
    pass


def test_an_async_function_with_no_await_cannot_suspend() -> None:
    assert cannot_suspend(plain)


@pytest.mark.parametrize("function", [awaits, enters, iterates])
def test_an_async_function_that_awaits_may_suspend(function: Any) -> None:
    assert not cannot_suspend(function)


def test_a_plain_function_is_not_one_to_start_so() -> None:
    assert not cannot_suspend(blocking)


def test_a_wrapped_function_is_not_looked_into() -> None:
    assert not cannot_suspend(functools.partial(plain))
