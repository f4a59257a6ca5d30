"""What tracing and metrics cost per iteration: ``python -m tests.telemetry.bench_overhead``.

In-process sidecars (off; metrics; tracing; both; tracing with a caller whose trace is not
sampled) run the same 200-iteration scripted StreamToolLoop runs, each iteration one call of a
no-op tool, in turns (off, metrics, tracing, both, unsampled, off, ...) so that drift of the
machine hits them alike. Spans go through a
``BatchSpanProcessor`` to an exporter that drops them: the sidecar's own cost, not an
exporter's network. A run's time is measured by the server (its first and last event's
timestamps) and by the client (wall clock); the medians per iteration are printed.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar, SidecarConfig, configure_logging
from cleveragents.tool import ToolRegistry

ITERATIONS = 200
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = TRACEPARENT[:-2] + "00"


class _Discard(SpanExporter):
    """Accepts every span and keeps none."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def noop() -> dict[str, Any]:
        """Do nothing."""
        return {}

    return registry


SCRIPT: list[dict[str, Any]] = [
    {"content": "", "tool_calls": [{"id": f"c{i}", "name": "noop", "arguments": {}}],
     "usage": {"input_tokens": 10, "output_tokens": 2}}
    for i in range(ITERATIONS - 1)
] + [{"content": "done"}]  # fmt: skip


async def _run(client: AsyncSidecarClient) -> tuple[float, float]:
    """One run; (server seconds, client seconds)."""
    started = time.perf_counter()
    first = last = 0.0
    async for streamed in client.stream_tool_loop("go", script=SCRIPT, max_iterations=ITERATIONS):
        if not first:
            first = streamed.time
        last = streamed.time
    return last - first, time.perf_counter() - started


async def main(rounds: int) -> None:
    configure_logging("console", "error")
    exporter = _Discard()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    variants: dict[str, dict[str, Any]] = {
        "off": {},
        "metrics": {"metrics_listen": "127.0.0.1:0"},
        "tracing": {"tracing": True},
        "both": {"tracing": True, "metrics_listen": "127.0.0.1:0"},
        "unsampled": {"tracing": True},
    }
    sidecars = {}
    clients = {}
    for name, settings in variants.items():
        config = SidecarConfig(listen="127.0.0.1:0", log_format="console", **settings)
        sidecar = Sidecar(config, registry=_registry(), tracer_provider=provider)
        await sidecar.start()
        sidecars[name] = sidecar
        traceparent = UNSAMPLED if name == "unsampled" else TRACEPARENT
        clients[name] = AsyncSidecarClient(sidecar.address, metadata=[("traceparent", traceparent)])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(3):  # warm up
        for name in variants:
            await _run(clients[name])
    for _ in range(rounds):
        for name in variants:
            times[name].append(await _run(clients[name]))
    print(f"{rounds} rounds of {ITERATIONS}-iteration runs; median per iteration (µs):")
    base_server = statistics.median(t[0] for t in times["off"]) / ITERATIONS * 1e6
    base_client = statistics.median(t[1] for t in times["off"]) / ITERATIONS * 1e6
    for name in variants:
        server = statistics.median(t[0] for t in times[name]) / ITERATIONS * 1e6
        client = statistics.median(t[1] for t in times[name]) / ITERATIONS * 1e6
        print(
            f"  {name:<9} server {server:7.1f} ({server - base_server:+6.1f})"
            f"   client {client:7.1f} ({client - base_client:+6.1f})"
        )
    for name in variants:
        await clients[name].close()
        await sidecars[name].stop(1)
    provider.shutdown()
    print(f"spans exported: {exporter.spans}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
