"""``CallTimer``: a call's timeout, kept as ``asyncio.timeout`` keeps one, on a loop timer
shared by the calls of its event loop."""

from __future__ import annotations

import asyncio

import pytest

from cleveragents.tool.execution.call_timer import CallTimer


async def _never() -> None:
    await asyncio.Event().wait()  # only a cancel ends it


async def test_code_past_its_deadline_is_cancelled_and_raises_timeout_error() -> None:
    timer = CallTimer(0.01)
    with pytest.raises(TimeoutError):
        async with timer:
            await _never()
    assert timer.expired()


async def test_code_done_before_its_deadline_neither_raises_nor_expires() -> None:
    timer = CallTimer(60.0)
    async with timer:
        await asyncio.sleep(0)
    assert not timer.expired()


async def test_a_later_call_expires_though_an_earlier_one_armed_the_shared_timer() -> None:
    async with CallTimer(60.0):  # arms the loop's timer for a minute from now
        pass
    early = CallTimer(0.01)
    with pytest.raises(TimeoutError):
        async with early:
            await _never()


async def test_a_call_outlasts_its_first_deadline_once_rescheduled() -> None:
    timer = CallTimer(0.01)
    event = asyncio.Event()
    async with timer:
        first = timer.when()
        assert first is not None
        timer.reschedule(first + 60.0)
        asyncio.get_running_loop().call_later(0.05, event.set)  # past the first deadline
        await event.wait()
    assert not timer.expired()


async def test_a_call_rescheduled_to_no_deadline_runs_on() -> None:
    timer = CallTimer(0.01)
    event = asyncio.Event()
    async with timer:
        timer.reschedule(None)
        asyncio.get_running_loop().call_later(0.05, event.set)
        await event.wait()
    assert timer.when() is None
    assert not timer.expired()


async def test_a_timer_is_rescheduled_only_while_its_code_runs() -> None:
    timer = CallTimer(60.0)
    with pytest.raises(RuntimeError):
        timer.reschedule(1.0)
    async with timer:
        pass
    with pytest.raises(RuntimeError):
        timer.reschedule(1.0)


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    entered = asyncio.Event()

    async def timed() -> None:
        async with CallTimer(60.0):
            entered.set()
            await _never()

    task = asyncio.create_task(timed())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_calls_in_flight_together_each_expire_at_their_own_deadline() -> None:
    async def timed(delay_s: float) -> bool:
        timer = CallTimer(delay_s)
        try:
            async with timer:
                await _never()
        except TimeoutError:
            return timer.expired()
        return False

    assert list(await asyncio.gather(timed(0.03), timed(0.01), timed(0.02))) == [True] * 3
