"""The deadlines of one session's hosted calls, kept by a single timer of its event loop.

Most hosted calls (a quick tool) finish without ever waiting, and arming and cancelling a
timer for each cost more than the call itself. A call bounded by ``Deadlines.within`` is
entered only once it suspends; one timer, armed for the earliest deadline among the calls that
wait, cancels a call whose deadline passes, which then raises ``TimeoutError`` in its place, as
``asyncio.timeout`` would.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["Deadlines"]

_T = TypeVar("_T")
#: Entries of ended calls the heap may hold beyond those of waiting calls before a sweep.
_SLACK = 64


class _Waiting:
    """A call that waits: its deadline on the loop's clock and the task to cancel then."""

    __slots__ = ("cancelling", "expired", "left", "task", "when")

    def __init__(self, when: float, task: asyncio.Task[Any]) -> None:
        self.when = when
        self.task = task
        #: Cancellations the task had pending before ours: ours alone becomes a TimeoutError.
        self.cancelling = task.cancelling()
        self.expired = False
        self.left = False


class Deadlines:
    """One session's deadlines: ``within`` bounds a call by a wall-clock time, ``clock``'s
    (``time.time`` by default: the sidecar's deadlines are wall-clock times)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, _Waiting]] = []
        self._order = itertools.count()
        self._waiting = 0
        self._timer: asyncio.TimerHandle | None = None
        #: The time the timer was armed for: ours, for a loop may round its handle's (uvloop
        #: keeps milliseconds).
        self._due = 0.0

    @property
    def armed_for(self) -> float | None:
        """When, on the event loop's clock, the timer fires next (``None``: it is not armed)."""
        return None if self._timer is None else self._due

    @property
    def kept(self) -> int:
        """How many deadlines are held: those of the calls that wait, and of calls that have
        ended but whose entry has not been dropped yet (at most as many again, plus 64)."""
        return len(self._heap)

    def within(self, work: Awaitable[_T], deadline: float | None) -> Awaitable[_T]:
        """``work``, cancelled if it still waits at ``deadline`` (``None``: never) and
        ``TimeoutError`` raised in its place; a cancellation from elsewhere stays one."""
        if deadline is None:
            return work
        return _Bounded(self, work, deadline)

    def _enter(self, deadline: float) -> _Waiting:
        """The running task waits for a call due at ``deadline``: the timer is armed for it
        if it is the earliest."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a call with a deadline waits in a task")
        waiting = _Waiting(loop.time() + (deadline - self._clock()), task)
        heapq.heappush(self._heap, (waiting.when, next(self._order), waiting))
        self._waiting += 1
        timer = self._timer
        if timer is None or waiting.when < self._due:
            if timer is not None:
                timer.cancel()
            self._due, self._timer = waiting.when, loop.call_at(waiting.when, self._expire)
        return waiting

    def _leave(self, waiting: _Waiting) -> None:
        """The call ``waiting`` stands for is over; with no call waiting the timer stops."""
        waiting.left = True
        self._waiting -= 1
        heap = self._heap
        if self._waiting == 0:
            heap.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif len(heap) > 2 * self._waiting + _SLACK:
            # Ended calls' entries leave the heap when they reach its top; behind one long
            # wait they would pile up, one per call, so they are swept (at most once per
            # _SLACK calls ended: amortised, a constant cost a call).
            heap[:] = [entry for entry in heap if not entry[2].left]
            heapq.heapify(heap)

    def _expire(self) -> None:
        heap, due, self._timer = self._heap, self._due, None
        while heap and (heap[0][0] <= due or heap[0][2].left):
            waiting = heapq.heappop(heap)[2]
            if not waiting.left:
                waiting.expired = True
                waiting.task.cancel()
        if heap:
            self._due = heap[0][0]
            self._timer = asyncio.get_running_loop().call_at(self._due, self._expire)


class _Bounded(Awaitable[_T]):
    """``work`` run step by step: entered in its ``Deadlines`` at its first suspension."""

    __slots__ = ("_deadline", "_deadlines", "_work")

    def __init__(self, deadlines: Deadlines, work: Awaitable[_T], deadline: float) -> None:
        self._deadlines = deadlines
        self._work = work
        self._deadline = deadline

    def __await__(self) -> Generator[Any, Any, _T]:
        steps = self._work.__await__()
        try:
            yielded = steps.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        waiting = self._deadlines._enter(self._deadline)
        try:
            while True:
                try:
                    sent = yield yielded
                except GeneratorExit:
                    steps.close()
                    raise
                except BaseException as exc:
                    yielded = steps.throw(exc)
                else:
                    yielded = steps.send(sent)
        except StopIteration as done:
            result: _T = done.value
        except asyncio.CancelledError:
            if waiting.expired and waiting.task.uncancel() <= waiting.cancelling:
                raise TimeoutError from None  # our own cancellation, and no one else's
            raise
        except BaseException:
            if waiting.expired:
                waiting.task.uncancel()
            raise
        finally:
            self._deadlines._leave(waiting)
        if waiting.expired:
            waiting.task.uncancel()
        return result
