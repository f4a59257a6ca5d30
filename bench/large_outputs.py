"""`make bench`'s large-output figures: how long a run stalls after a tool returns a big output.

A tool returns a prebuilt output of 1, 8 or 24 MiB, one string or rows of nested JSON
(bench/large_tools.py). Two figures each, medians of ``REPEATS`` runs:

- *gap*: from the tool's return to the run's next LLM request. In process (the core loop and
  a scripted LLM) by the tool's and the LLM's own clocks; in a real sidecar (a server-hosted
  tool, a secret to redact, a client reading the stream) from the end of the call's record to
  the next ``iteration_started`` event, both by the sidecar's clock.
- *stall*: the longest the event loop did not run anything else. In process, a ticker task's
  longest sleep of 1 ms, less that 1 ms; in the sidecar, the longest round trip of a
  ``ListTools`` call repeated meanwhile by another connection (what every other run sees).

Prints a table and writes JSON to bench/results/. ``BENCH_LARGE_SIZES`` (MiB, comma
separated) and ``BENCH_LARGE_REPEATS`` change what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.client.exchange import run_spec
from cleveragents.tool import (
    IterationStarted,
    LLMRequest,
    LLMResponse,
    ScriptedLLMCaller,
    ToolCall,
    ToolCallCompleted,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)
from cleveragents.toolruntime.v1 import service_pb2

if TYPE_CHECKING:  # mypy runs from the repository root; `python bench/...` from bench/
    from bench import large_tools, scenarios_load
else:
    import large_tools
    import scenarios_load

HERE = Path(__file__).resolve().parent
SIZES = [int(s) for s in os.environ.get("BENCH_LARGE_SIZES", "1,8,24").split(",")]
SHAPES = ("string", "json")
REPEATS = int(os.environ.get("BENCH_LARGE_REPEATS", "5"))
#: Set in the sidecar's environment: a secret its runner redacts from every output.
SECRET_ENV = {"BENCH_LARGE_API_KEY": "bench-secret-value-not-in-any-output"}
_STREAM = "/cleveragents.toolruntime.v1.ToolRuntimeService/StreamToolLoop"


def _script(mib: int, shape: str) -> list[LLMResponse]:
    call = ToolCall("c1", "big", {"mib": mib, "shape": shape})
    return [LLMResponse(tool_calls=[call]), LLMResponse("done")]


class _Ticker:
    """A task that sleeps 1 ms at a time and keeps the longest time it was kept from waking."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._last = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Ticker:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._tock(time.perf_counter())  # a stall the run ended in counts too
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _tick(self) -> None:
        self._last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            self._tock(time.perf_counter())

    def _tock(self, now: float) -> None:
        self.longest = max(self.longest, now - self._last - 0.001)
        self._last = now


async def in_process(mib: int, shape: str) -> tuple[float, float]:
    """One run in process: (gap, stall) in milliseconds."""
    large_tools.output_of(mib, shape)  # built before the clock starts
    registry = ToolRegistry()
    returned: list[float] = []

    @registry.tool
    async def big(mib: int, shape: str) -> dict[str, Any]:
        """The prebuilt output."""
        value = large_tools.output_of(mib, shape)
        returned.append(time.perf_counter())
        return value

    scripted = ScriptedLLMCaller(_script(mib, shape))
    asked: list[float] = []

    class Timed:
        """The scripted LLM, noting when each request reaches it."""

        async def call(self, request: LLMRequest) -> LLMResponse:
            asked.append(time.perf_counter())
            return await scripted.call(request)

    runtime = ToolCallingRuntime(registry, ToolRunner(registry), Timed(), max_iterations=3)
    async with _Ticker() as ticker:
        result = await runtime.arun_tool_loop("go")
    assert result.content == "done", result
    assert result.tool_call_history[0].success, result
    return (asked[1] - returned[0]) * 1e3, ticker.longest * 1e3


async def in_sidecar(address: str, mib: int, shape: str) -> tuple[float, float]:
    """One run in the sidecar: (gap, stall) in milliseconds. The stream is read as bytes, so
    that this process's decoding does not hold up the pinger."""
    arguments = {"mib": mib, "shape": shape}
    turns = [
        {"tool_calls": [{"id": "c1", "name": "big", "arguments": arguments}]},
        {"content": "done"},
    ]
    spec = run_spec("go", script=turns, max_iterations=3, tool_names=["big"])
    request = service_pb2.StreamToolLoopRequest(spec=spec, batch_events=True)
    pings: list[float] = []
    done = asyncio.Event()
    async with (
        AsyncSidecarClient(address) as pinger,
        grpc.aio.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 64 << 20)]
        ) as channel,
    ):
        await pinger.list_tools()

        async def ping() -> None:
            while not done.is_set():
                began = time.perf_counter()
                await pinger.list_tools()
                pings.append(time.perf_counter() - began)

        async def run() -> str:
            stream: Any = channel.unary_stream(
                _STREAM, request_serializer=service_pb2.StreamToolLoopRequest.SerializeToString
            )(request)
            first = service_pb2.StreamToolLoopResponse.FromString(await stream.read())
            while await stream.read() is not grpc.aio.EOF:
                pass
            done.set()
            event = first.event if first.HasField("event") else first.events[0]
            return event.run_id

        async with asyncio.TaskGroup() as group:
            group.create_task(ping())
            run_task = group.create_task(run())
        ended = returned = None
        async for item in pinger.run_history(run_task.result()):
            if isinstance(item.event, ToolCallCompleted):
                record = item.event.record
                assert record.success, record.error
                returned = record.started_at + record.duration_ms / 1e3
            elif isinstance(item.event, IterationStarted) and item.event.iteration == 2:
                ended = item.time
    assert ended is not None
    assert returned is not None
    return (ended - returned) * 1e3, max(pings) * 1e3


def _median(samples: list[float]) -> float:
    return statistics.median(samples[1:] if len(samples) > 2 else samples)  # less the warm-up


async def measure() -> list[dict[str, Any]]:
    """Every (where, shape, size) row: medians of gap and stall in ms, with the samples."""
    rows: list[dict[str, Any]] = []
    process, address = scenarios_load.start_sidecar_with("large_tools:registry", SECRET_ENV, {})
    try:
        for shape in SHAPES:
            for mib in SIZES:
                for where in ("in process", "sidecar"):
                    gaps, stalls = [], []
                    for _ in range(REPEATS + 1):
                        if where == "in process":
                            gap, stall = await in_process(mib, shape)
                        else:
                            gap, stall = await in_sidecar(address, mib, shape)
                        gaps.append(gap)
                        stalls.append(stall)
                    rows.append({
                        "where": where, "shape": shape, "mib": mib,
                        "gap_ms": _median(gaps), "stall_ms": _median(stalls),
                        "gaps_ms": gaps, "stalls_ms": stalls,
                    })  # fmt: skip
                    print(_line(rows[-1]), flush=True)
    finally:
        process.terminate()
        process.wait(timeout=15)
    return rows


def _line(row: dict[str, Any]) -> str:
    label = f"{row['where']}, {row['mib']} MiB {row['shape']}"
    return f"{label:32} {row['gap_ms']:10.1f} ms {row['stall_ms']:10.1f} ms"


async def main() -> None:
    print(f"\n{'large tool output':32} {'gap':>13} {'stall':>13}")
    rows = await measure()
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    path = results / f"large-outputs-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({"repeats": REPEATS, "rows": rows}, indent=2))
    print(f"JSON: {path}")


if __name__ == "__main__":
    asyncio.run(main())
