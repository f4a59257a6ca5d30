"""``CallTimer``: a tool call's timeout, as ``asyncio.timeout`` gives one, for less.

``asyncio.timeout`` arms a timer on the event loop for each call and cancels it when the call
returns: counted under callgrind on uvloop, some 30k instructions a call, nearly all of a fast
call's own cost. The calls of one event loop share one loop timer here instead, armed for the
earliest deadline of the calls in flight: a call registers its deadline and drops it when it
returns, and the shared timer is re-armed only when it fires or an earlier deadline comes (a
run's calls, one after another with one timeout, arm it about once a timeout). The timer keeps
``asyncio.Timeout``'s contract: on expiry the call's task is cancelled and the ``async with``
raises ``TimeoutError``; ``when``, ``reschedule`` and ``expired`` are its methods.
"""

from __future__ import annotations

import asyncio
import enum
import math
import weakref
from types import TracebackType

__all__ = ["CallTimer"]


class _State(enum.Enum):
    CREATED = "created"
    ENTERED = "active"
    EXPIRING = "expiring"
    EXPIRED = "expired"
    EXITED = "finished"


class CallTimer:
    """A deadline ``delay_s`` seconds from now (loop time) for the code an ``async with``
    runs; ``reschedule`` moves it (``None``: no deadline), ``expired`` says whether it passed
    and cancelled that code. Made on the event loop's thread, used there."""

    __slots__ = ("_cancelling", "_loop", "_state", "_task", "_watch", "_when")

    def __init__(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._when: float | None = loop.time() + delay_s
        self._state = _State.CREATED
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        watch = _WATCHES.get(loop)
        if watch is None:
            watch = _WATCHES[loop] = _Watch(loop)
        self._watch = watch

    def when(self) -> float | None:
        """The deadline, in loop time (``None``: none)."""
        return self._when

    def expired(self) -> bool:
        """Whether the deadline passed while the code ran (and cancelled it)."""
        return self._state is _State.EXPIRING or self._state is _State.EXPIRED

    def reschedule(self, when: float | None) -> None:
        """Move the deadline to ``when`` (loop time; ``None``: none); ``RuntimeError`` unless
        the code is running and the deadline has not passed."""
        if self._state is not _State.ENTERED:
            raise RuntimeError(f"Cannot change state of {self._state.value} Timeout")
        self._when = when
        if when is None:
            self._watch.drop(self)
        else:
            self._watch.add(self, when)

    async def __aenter__(self) -> CallTimer:
        if self._state is not _State.CREATED:
            raise RuntimeError("CallTimer has already been entered")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("CallTimer should be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        self._state = _State.ENTERED
        if self._when is not None:
            self._watch.add(self, self._when)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._watch.drop(self)
        if self._state is _State.EXPIRING:
            self._state = _State.EXPIRED
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc  # no newer cancel asked for: this one is ours
        elif self._state is _State.ENTERED:
            self._state = _State.EXITED

    def _expire(self) -> None:
        """The deadline has passed: cancel the code."""
        assert self._task is not None
        self._task.cancel()
        self._state = _State.EXPIRING


class _Watch:
    """The one loop timer of an event loop's ``CallTimer``s: armed for the earliest deadline
    of those running, or earlier (it then finds none due, and is armed again)."""

    __slots__ = ("_at", "_handle", "_loop", "_timers")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: Weakly: the loop is the key the watch is kept under.
        self._loop = weakref.ref(loop)
        #: The timers running, each with its deadline.
        self._timers: dict[CallTimer, float] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf

    def add(self, timer: CallTimer, when: float) -> None:
        """Watch ``timer``'s deadline ``when`` (its earlier one, if any, no longer holds)."""
        self._timers[timer] = when
        if when < self._at:
            self._arm(when)

    def drop(self, timer: CallTimer) -> None:
        """Stop watching ``timer`` (the loop timer stays armed: it finds nothing due)."""
        self._timers.pop(timer, None)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        loop = self._loop()
        if loop is None:  # pragma: no cover - a loop gone has no timers running
            return
        self._at = when
        self._handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle, self._at = None, math.inf
        loop = self._loop()
        if loop is None:  # pragma: no cover - a loop gone runs no callbacks
            return
        now = loop.time()
        due = [timer for timer, when in self._timers.items() if when <= now]
        for timer in due:
            del self._timers[timer]
            timer._expire()
        if self._timers:
            self._arm(min(self._timers.values()))


#: Each event loop's watch, gone with its loop.
_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()
