"""Small helpers of the loop in ``runtime.py``: the event channel, result text, argument
checks and the blocking wrapper."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from cleveragents.tool.events import RunEvent
from cleveragents.tool.jsontext import Encoder
from cleveragents.tool.messages import ToolCall
from cleveragents.tool.records import ToolCallRecord, ToolCallRunResult
from cleveragents.tool.spec import ToolSpec

__all__ = [
    "EventChannel",
    "YieldTimer",
    "check_prompt",
    "over_budget",
    "result_text",
    "run_blocking",
]


class Clock(Protocol):
    """What ``YieldTimer`` needs of an event loop."""

    def time(self) -> float: ...

    def call_soon(self, callback: Callable[[], object]) -> object: ...


class YieldTimer:
    """Says when a loop that has not let other tasks run for ``interval_s`` must yield.

    A loop that suspends on its own (for a client's tool, a real LLM) is never told to: a
    callback queued when the timer is armed only runs once the loop has given way, and finding
    it ran re-arms the timer. So only a loop that never waits pays for the extra turns.
    """

    __slots__ = ("_deadline", "_interval_s", "_loop", "_yielded")

    def __init__(self, loop: Clock, interval_s: float) -> None:
        self._loop = loop
        self._interval_s = interval_s
        self._deadline = 0.0
        self._yielded = False
        self.arm()

    def arm(self) -> None:
        """Start a new interval now."""
        self._start(self._loop.time())

    def due(self) -> bool:
        """Whether the loop must yield now.

        If it gave way since the timer was armed, a new interval starts now: when it resumed
        is not known (the marker runs as it starts waiting, which may have lasted any time),
        and now is the latest that moment can be.
        """
        now = self._loop.time()
        if self._yielded:
            self._start(now)
            return False
        return now >= self._deadline

    def _start(self, at: float) -> None:
        self._yielded = False
        self._deadline = at + self._interval_s
        self._loop.call_soon(self._mark)

    def _mark(self) -> None:
        self._yielded = True


class EventChannel:
    """An unbounded single-consumer queue, lighter than ``asyncio.Queue`` on the hot path."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[RunEvent] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, event: RunEvent) -> None:
        self._items.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> RunEvent:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()


_encode = Encoder()


async def over_budget(
    call: ToolCall, inputs: Mapping[str, Any], spec: ToolSpec, iteration: int
) -> str:
    return "not run: the run's tool-call budget is used up"


def result_text(record: ToolCallRecord) -> str:
    if record.success:
        return _encode(record.output)
    return _encode({"error": record.error})


def check_prompt(prompt: str) -> None:
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    if not prompt.strip():
        raise ValueError("prompt must not be empty")


def run_blocking(coro: Coroutine[Any, Any, ToolCallRunResult]) -> ToolCallRunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tool-loop") as pool:
        return pool.submit(asyncio.run, coro).result()
