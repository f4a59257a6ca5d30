"""Shared fakes, helpers and fixtures for the tests of ``cleveragents.tool``.

The fakes are small hand-written classes implementing the library's protocols; tests import
them with ``from .conftest import ...``.
"""

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    Message,
    Responder,
    RunEvent,
    ScriptedLLMCaller,
    ToolCall,
    ToolCallingRuntime,
    ToolCallRouter,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    Usage,
)


def recording_llm(script: Sequence[LLMResponse] | Responder) -> ScriptedLLMCaller:
    """A scripted LLM that keeps a snapshot of every request it answers (``requests``).

    ``script`` is a list of responses returned in order, or a function of the request.
    """
    return ScriptedLLMCaller(script, record=True)


class RaisingLLMCaller:
    """Answers from ``script`` and then raises ``error`` on the next call."""

    def __init__(self, script: Sequence[LLMResponse], error: Exception) -> None:
        self._script = list(script)
        self.error = error
        self.calls = 0

    async def call(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        if self.calls > len(self._script):
            raise self.error
        return self._script[self.calls - 1]


class SyncLLMCaller:
    """A plain (non-async) LLM caller that records the thread it runs on."""

    def __init__(self, script: Sequence[LLMResponse]) -> None:
        self._script = list(script)
        self.thread_ids: list[int] = []

    def call(self, request: LLMRequest) -> LLMResponse:
        self.thread_ids.append(threading.get_ident())
        return self._script[len(self.thread_ids) - 1]


class WrongTypeLLMCaller:
    """An LLM caller that returns a plain dict instead of an ``LLMResponse``."""

    async def call(self, request: LLMRequest) -> Any:
        return {"content": "not an LLMResponse"}


class HangingTool:
    """An async dict handler that never returns until cancelled.

    ``all_started`` is set once ``expected`` calls are running; ``cancelled`` lists the
    ``tag`` input of every call whose ``finally`` block ran after a ``CancelledError``.
    """

    def __init__(self, expected: int = 1) -> None:
        self.expected = expected
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.finalised: list[str] = []
        self.all_started = asyncio.Event()

    async def __call__(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        tag = str(inputs.get("tag", ""))
        self.started.append(tag)
        if len(self.started) >= self.expected:
            self.all_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(tag)
            raise
        finally:
            self.finalised.append(tag)
        raise AssertionError("unreachable")

    async def wait_started(self) -> None:
        async with asyncio.timeout(2):
            await self.all_started.wait()


# -- response helpers ----------------------------------------------------------------------


def final(content: str = "done", usage: Usage | None = None) -> LLMResponse:
    """A final answer (no tool calls)."""
    return LLMResponse(content=content, usage=usage)


def asks(*calls: ToolCall, content: str = "", usage: Usage | None = None) -> LLMResponse:
    """A response that requests ``calls``."""
    return LLMResponse(content=content, tool_calls=list(calls), usage=usage)


def always_asks(name: str, arguments: Mapping[str, Any]) -> Responder:
    """A responder that asks for one call of ``name`` every time, saying ``step <k>``."""

    def respond(request: LLMRequest) -> LLMResponse:
        k = request.iteration
        return asks(ToolCall(f"call-{k}", name, dict(arguments)), content=f"step {k}")

    return respond


def make_runtime(
    registry: ToolRegistry,
    llm: Any,
    *,
    max_iterations: int = 10,
    router: ToolCallRouter | None = None,
    parallel_tool_calls: bool = True,
    default_timeout_s: float | None = None,
    system_prompt: str | None = None,
) -> ToolCallingRuntime:
    """A runtime over ``registry`` with a fresh runner."""
    return ToolCallingRuntime(
        registry=registry,
        runner=ToolRunner(registry, default_timeout_s=default_timeout_s),
        llm_caller=llm,
        max_iterations=max_iterations,
        router=router,
        parallel_tool_calls=parallel_tool_calls,
        system_prompt=system_prompt,
    )


async def collect(stream: AsyncIterator[RunEvent]) -> list[RunEvent]:
    """Every event of a stream, bounded so that a hanging stream fails the test quickly."""
    events: list[RunEvent] = []
    async with asyncio.timeout(5):
        async for event in stream:
            events.append(event)
    return events


def tool_message_payload(message: Message) -> Any:
    """The JSON a tool message carries back to the model."""
    return json.loads(message.content)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def registry() -> ToolRegistry:
    """``add`` (decorated, ints), ``echo`` (dict handler) and ``boom`` (always raises)."""
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        """
        return a + b

    def echo(inputs: Mapping[str, Any]) -> dict[str, Any]:
        return dict(inputs)

    reg.register(ToolSpec("echo", "Return the inputs."), echo)

    def boom(inputs: Mapping[str, Any]) -> None:
        raise RuntimeError("kaboom")

    reg.register(ToolSpec("boom", "Always fails."), boom)
    return reg
