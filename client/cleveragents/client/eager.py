"""Work started at once: a coroutine that finishes without suspending is done inline.

Most hosted calls (a quick tool) never wait; a task of their own, scheduled for a later turn of
the event loop, cost a session more than the call. ``started`` runs a coroutine's first step
where it is called: finished, its value is there at once; suspended, ``Resumed`` carries it on
from where it stopped, in whatever task then awaits it.

What runs before a coroutine's first suspension sees the caller's task as
``asyncio.current_task()``: ``asyncio.timeout``, a ``TaskGroup`` or an anyio cancel scope
entered then would bind to the wrong task once the rest runs in another. So only functions that
``cannot_suspend`` (an ``async def`` with no ``await``, ``async for`` or ``async with``) are
worth starting so; ``Resumed`` is the way on should one suspend all the same.
"""

from __future__ import annotations

import dis
import inspect
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cleveragents.tool.frozen import quick_init

__all__ = ["Finished", "Resumed", "cannot_suspend", "started"]

_T = TypeVar("_T")
#: A ``Resumed`` whose first step was taken: what its coroutine yielded then is given.
_GIVEN = object()
#: The instructions with which a coroutine's own code may suspend it (``await``, ``async for``
#: and ``async with`` compile to some of them).
_SUSPENDING = frozenset(
    {"YIELD_VALUE", "SEND", "GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH"}
)


@quick_init
@dataclass(frozen=True, slots=True)
class Finished(Generic[_T]):
    """A coroutine's value: it finished in its first step."""

    value: _T


class Resumed(Coroutine[Any, Any, _T]):
    """A coroutine stopped at its first suspension, to be finished by whoever runs this one:
    its first step gives what the coroutine yielded then, every later one (``send``,
    ``throw``, ``close``) is forwarded to it."""

    __slots__ = ("_work", "_yielded")

    def __init__(self, work: Coroutine[Any, Any, _T], yielded: Any) -> None:
        self._work = work
        self._yielded = yielded

    def send(self, value: Any) -> Any:
        yielded = self._yielded
        if yielded is _GIVEN:
            return self._work.send(value)
        self._yielded = _GIVEN
        return yielded

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._yielded = _GIVEN
        if val is None and tb is None:
            return self._work.throw(typ)
        return self._work.throw(typ, val, tb)  # pragma: no cover - the old three-argument form

    def close(self) -> None:
        self._yielded = _GIVEN
        self._work.close()

    def __await__(self) -> Generator[Any, Any, _T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def __iter__(self) -> Resumed[_T]:
        return self


def started(work: Coroutine[Any, Any, _T]) -> Finished[_T] | Resumed[_T]:
    """``work`` run up to its first suspension: its value if it finished, else the rest of
    it. What its first step raises, it raises."""
    try:
        yielded = work.send(None)
    except StopIteration as done:
        return Finished(done.value)
    return Resumed(work, yielded)


def cannot_suspend(function: Callable[..., Any]) -> bool:
    """Whether ``function`` is an ``async def`` whose code never suspends its coroutine (no
    ``await``, ``async for``, ``async with``): calling it runs straight through."""
    if not inspect.iscoroutinefunction(function) or not inspect.isfunction(function):
        return False
    return not any(i.opname in _SUSPENDING for i in dis.get_instructions(function.__code__))
