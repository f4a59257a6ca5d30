"""What a structured final answer costs beside a plain one: the same answer text, with and
without an output schema (parsed and validated by the loop), in process and across gRPC.

A run here is one iteration, its final answer; timed over many runs, the per-run figure is
the cost of that final-answer iteration plus a run's fixed cost, the same for both, so the
difference between the two is what the schema adds. A third figure is a retried answer: an
invalid one sent back, then the valid one (two iterations).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import (
    LLMResponse,
    OutputSchema,
    ScriptedLLMCaller,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)

__all__ = ["SCHEMA", "measure"]

SCHEMA = OutputSchema(
    "invoice",
    {
        "type": "object",
        "properties": {
            "customer": {"type": "string"},
            "lines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
                    "required": ["item", "quantity"],
                    "additionalProperties": False,
                },
            },
            "total": {"type": "number", "minimum": 0},
        },
        "required": ["customer", "lines", "total"],
        "additionalProperties": False,
    },
)
ANSWER = (
    '{"customer":"ACME","lines":[{"item":"bolt","quantity":3},{"item":"nut","quantity":5}],'
    '"total":12.5}'
)
INVALID = '{"customer":"ACME","lines":[],"total":-1}'
RUNS = 300
GRPC_RUNS = 60

Sampler = Callable[[], Awaitable[float]]
Interleaved = Callable[[Sampler, Sampler], Awaitable[tuple[list[float], list[float]]]]


async def in_process(output: OutputSchema | None, answers: list[str], runs: int = RUNS) -> float:
    """Microseconds per run of ``answers`` (the last one final), with or without ``output``."""
    registry = ToolRegistry()
    runner = ToolRunner(registry)
    script = [LLMResponse(text) for text in answers]
    began = time.perf_counter()
    for _ in range(runs):
        runtime = ToolCallingRuntime(
            registry, runner, ScriptedLLMCaller(script), output=output, max_output_retries=1
        )
        result = await runtime.arun_tool_loop("Read the invoice.")
        assert result.content == ANSWER, result
    return (time.perf_counter() - began) / runs * 1e6


async def over_grpc(client: AsyncSidecarClient, output: Any, runs: int = GRPC_RUNS) -> float:
    """Microseconds per StreamToolLoop run of one final answer."""
    script = [{"content": ANSWER}]
    began = time.perf_counter()
    for _ in range(runs):
        events = [e async for e in client.stream_tool_loop("x", script=script, output_type=output)]
        assert len(events) == 4, events
    return (time.perf_counter() - began) / runs * 1e6


async def measure(
    interleaved: Interleaved, client: AsyncSidecarClient
) -> dict[str, tuple[list[float], list[float]]]:
    """Samples, in turns: plain and structured final answers in process, a retried one
    beside a structured one, and plain and structured over gRPC."""
    plain, structured = await interleaved(
        lambda: in_process(None, [ANSWER]), lambda: in_process(SCHEMA, [ANSWER])
    )
    structured_again, retried = await interleaved(
        lambda: in_process(SCHEMA, [ANSWER]), lambda: in_process(SCHEMA, [INVALID, ANSWER])
    )
    grpc_plain, grpc_structured = await interleaved(
        lambda: over_grpc(client, None), lambda: over_grpc(client, SCHEMA)
    )
    return {
        "in process": (plain, structured),
        "retried": (structured_again, retried),
        "grpc": (grpc_plain, grpc_structured),
    }
