"""``Deadlines``: one session's calls bounded by their deadlines with a single timer, armed only
while a call waits; a call that never suspends costs no timer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from typing import Any

import pytest

from cleveragents.client.deadlines import Deadlines

#: The wall clock the tests' deadlines are read against (a fixed time: nothing depends on the
#: real one).
NOW = 1_000_000.0
#: A deadline no test reaches.
FAR = NOW + 3600.0


class FixedClock:
    """A wall clock stopped at ``NOW`` that counts how often it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return NOW


async def at_once() -> str:
    return "done"


async def until(event: asyncio.Event, started: asyncio.Event | None = None) -> str:
    if started is not None:
        started.set()
    await event.wait()
    return "waited"


async def bounded(deadlines: Deadlines, work: Awaitable[str], deadline: float) -> str:
    """``work`` within ``deadline``, as a coroutine (a task's)."""
    return await deadlines.within(work, deadline)


async def test_a_call_that_never_suspends_arms_no_timer_and_reads_no_clock() -> None:
    clock = FixedClock()
    deadlines = Deadlines(clock)

    assert await deadlines.within(at_once(), NOW - 1.0) == "done"  # past, yet never waited
    assert deadlines.armed_for is None
    assert clock.reads == 0


async def test_a_call_without_a_deadline_is_the_work_itself() -> None:
    deadlines = Deadlines(FixedClock())
    work = at_once()

    assert deadlines.within(work, None) is work
    assert await work == "done"


async def test_a_call_waiting_past_its_deadline_is_cancelled_and_raises_timeout() -> None:
    deadlines = Deadlines(FixedClock())
    cancelled = False

    async def waits() -> None:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled = True
            raise

    with pytest.raises(TimeoutError):
        await deadlines.within(waits(), NOW)
    assert cancelled
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0
    assert deadlines.armed_for is None


async def test_work_that_catches_the_cancellation_and_returns_a_result_returns_it() -> None:
    deadlines = Deadlines(FixedClock())

    async def keeps_going() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "kept"
        return "never"

    assert await deadlines.within(keeps_going(), NOW) == "kept"
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    deadlines = Deadlines(FixedClock())
    started, never = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(bounded(deadlines, until(never, started), FAR))
    await started.wait()

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines.armed_for is None


async def test_a_call_waiting_within_its_deadline_returns_its_result() -> None:
    deadlines = Deadlines(FixedClock())
    started, go = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(bounded(deadlines, until(go, started), FAR))
    await started.wait()

    go.set()

    assert await task == "waited"


async def test_a_waiting_call_arms_the_timer_for_its_deadline() -> None:
    deadlines = Deadlines(FixedClock())
    started, go = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    before = loop.time()
    task = asyncio.create_task(bounded(deadlines, until(go, started), NOW + 100.0))
    await started.wait()

    armed = deadlines.armed_for
    assert armed is not None
    assert before + 100.0 <= armed <= loop.time() + 100.0
    go.set()
    await task


async def test_an_earlier_deadline_re_arms_the_timer_and_a_later_one_does_not() -> None:
    deadlines = Deadlines(FixedClock())
    go = asyncio.Event()
    waiting = [asyncio.Event() for _ in range(3)]
    tasks = [
        asyncio.create_task(bounded(deadlines, until(go, waiting[0]), NOW + 1000.0)),
    ]
    await waiting[0].wait()
    first = deadlines.armed_for
    tasks.append(asyncio.create_task(bounded(deadlines, until(go, waiting[1]), NOW + 10.0)))
    await waiting[1].wait()
    earlier = deadlines.armed_for
    tasks.append(asyncio.create_task(bounded(deadlines, until(go, waiting[2]), NOW + 500.0)))
    await waiting[2].wait()

    assert first is not None
    assert earlier is not None
    assert earlier < first - 900.0
    assert deadlines.armed_for == earlier
    go.set()
    await asyncio.gather(*tasks)


async def test_the_timer_is_cancelled_once_no_call_waits() -> None:
    deadlines = Deadlines(FixedClock())
    go = asyncio.Event()
    waiting = [asyncio.Event(), asyncio.Event()]
    tasks = [
        asyncio.create_task(bounded(deadlines, until(go, started), FAR)) for started in waiting
    ]
    for started in waiting:
        await started.wait()
    assert deadlines.armed_for is not None

    go.set()
    await asyncio.gather(*tasks)

    assert deadlines.armed_for is None


async def test_after_the_earliest_deadline_passes_the_timer_is_armed_for_the_next() -> None:
    deadlines = Deadlines(FixedClock())
    go, started = asyncio.Event(), asyncio.Event()
    late = asyncio.create_task(bounded(deadlines, until(go, started), FAR))
    await started.wait()
    armed_for_late = deadlines.armed_for

    with pytest.raises(TimeoutError):
        await deadlines.within(asyncio.Event().wait(), NOW)

    assert deadlines.armed_for == armed_for_late
    go.set()
    assert await late == "waited"


async def test_only_the_call_whose_deadline_passed_is_cancelled() -> None:
    deadlines = Deadlines(FixedClock())
    go, started = asyncio.Event(), asyncio.Event()
    other = asyncio.create_task(bounded(deadlines, until(go, started), FAR))
    await started.wait()

    with pytest.raises(TimeoutError):
        await deadlines.within(asyncio.Event().wait(), NOW)

    assert not other.done()
    go.set()
    assert await other == "waited"


def test_a_call_waiting_outside_a_task_is_refused() -> None:
    deadlines = Deadlines(FixedClock())
    loop = asyncio.new_event_loop()
    try:
        bounded = deadlines.within(asyncio.sleep(0), FAR)
        steps = bounded.__await__()
        with pytest.raises(RuntimeError, match="task"):
            loop.run_until_complete(_step_outside_a_task(steps))
    finally:
        loop.close()


async def _step_outside_a_task(steps: Generator[Any, Any, Any]) -> None:
    """Runs in a task, but steps ``steps`` in a callback, where no task runs."""
    loop = asyncio.get_running_loop()
    stepped: asyncio.Future[None] = loop.create_future()

    def step() -> None:
        try:
            steps.send(None)
        except BaseException as exc:
            stepped.set_exception(exc)
        else:
            stepped.set_result(None)

    loop.call_soon(step)
    await stepped


def test_a_deadline_passes_on_a_loop_that_rounds_its_timers() -> None:
    """uvloop keeps a timer's time in milliseconds: the call due between two still expires."""
    uvloop = pytest.importorskip("uvloop")
    deadlines = Deadlines(FixedClock())

    async def waits_past_its_deadline() -> str:
        async with asyncio.timeout(5.0):  # a guard: without the fix this spun for ever
            try:
                await deadlines.within(asyncio.Event().wait(), NOW + 0.0001234)
            except TimeoutError:
                return "expired"
        return "returned"

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(waits_past_its_deadline()) == "expired"
    assert deadlines.armed_for is None


async def test_ended_calls_deadlines_are_not_kept_behind_one_that_waits() -> None:
    deadlines = Deadlines(FixedClock())
    long_wait, started = asyncio.Event(), asyncio.Event()
    waiting = asyncio.create_task(bounded(deadlines, until(long_wait, started), FAR))
    await started.wait()

    for _ in range(1000):  # each suspends once, then ends, while the first still waits
        assert await deadlines.within(asyncio.sleep(0, "done"), FAR) == "done"

    assert deadlines.kept <= 2 * 1 + 64
    long_wait.set()
    assert await waiting == "waited"
    assert deadlines.kept == 0
