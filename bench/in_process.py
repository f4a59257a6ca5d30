"""The in-process loop's workload: N iterations of a scripted LLM calling a no-op tool.

Shared by `make bench` (timed) and `make bench-check` (counted), so that both measure one loop.
It imports the core alone, so that a counted run pays for nothing else.
"""

from __future__ import annotations

import time
from typing import Any

from cleveragents.tool import (
    LLMResponse,
    ScriptedLLMCaller,
    ToolCall,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)


async def in_process(iterations: int) -> float:
    """Run ``iterations`` no-op iterations (4 events each); the time per iteration in us."""
    registry = ToolRegistry()

    @registry.tool
    async def noop() -> dict[str, Any]:
        """Do nothing."""
        return {}

    llm = ScriptedLLMCaller(
        [LLMResponse(tool_calls=[ToolCall(f"c{i}", "noop", {})]) for i in range(iterations - 1)]
        + [LLMResponse("done")]
    )
    runtime = ToolCallingRuntime(registry, ToolRunner(registry), llm, max_iterations=iterations)
    began = time.perf_counter()
    events = 0
    async for _ in runtime.stream_tool_loop("go"):
        events += 1
    elapsed = time.perf_counter() - began
    assert events == 4 * iterations, events
    return elapsed / iterations * 1e6
