"""`make bench`: the runtime's own cost per iteration, in process and across gRPC, and under load.

Every per-iteration scenario is timed against a floor measured in the same run (a bare grpc.aio
round trip or streamed message, same payload size, same two-process layout), so the ratios
survive a noisy machine. The load scenarios (concurrency, fan-out, latency: scenarios_load.py)
have absolute targets. Prints a table and writes JSON to bench/results/.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import (
    LLMResponse,
    ScriptedLLMCaller,
    ToolCall,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)

if TYPE_CHECKING:  # mypy runs from the repository root; `python bench/run.py` from bench/
    from bench import (
        failover,
        mcp_calls,
        scenarios_load,
        session_messages,
        stores,
        structured_output,
    )
    from bench.bare_loop import bare_loop
    from bench.scenarios_load import Figure
else:
    import failover
    import mcp_calls
    import scenarios_load
    import session_messages
    import stores
    import structured_output
    from bare_loop import bare_loop
    from scenarios_load import Figure

HERE = Path(__file__).resolve().parent
PAYLOAD = b"x" * 195
REPEATS = int(os.environ.get("BENCH_REPEATS", "7"))


@dataclass
class Row:
    """One line of the table: a median per-unit cost, and its ratio to a floor."""

    scenario: str
    unit: str
    median_us: float
    samples_us: list[float] = field(default_factory=list)
    floor: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    #: The samples of the floor the ratio is taken against, when no row of the table has them.
    floor_samples_us: list[float] = field(default_factory=list)


@dataclass
class Cpu:
    """CPU time (user + system, all threads) the server and this client process spent per
    unit of a measurement, one sample per run of it; the first sample is the warm-up."""

    server_us: list[float] = field(default_factory=list)
    client_us: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class CpuReading:
    """A process's CPU time at one moment, read two ways."""

    threads: frozenset[str]
    #: The live threads' time, from the scheduler's nanosecond counters.
    fine_s: float
    #: The process's time from /proc/PID/stat: clock ticks, but it keeps ended threads' time.
    coarse_s: float


def cpu_reading(pid: int) -> CpuReading:
    threads: set[str] = set()
    fine = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            fine += int((task / "schedstat").read_text().split()[0])
            threads.add(task.name)
    return CpuReading(frozenset(threads), fine / 1e9, scenarios_load.cpu_s(pid))


def cpu_between(before: CpuReading, after: CpuReading) -> float:
    """CPU seconds spent between two readings: to the nanosecond, unless a thread ended in
    between (its time would drop out of the sum), then to the clock tick."""
    if before.threads <= after.threads:
        return after.fine_s - before.fine_s
    return after.coarse_s - before.coarse_s


def with_cpu(
    fn: Callable[[], Awaitable[float]], server_pid: int, units: int, cpu: Cpu
) -> Callable[[], Awaitable[float]]:
    """``fn`` (which times ``units`` of work), also noting both processes' CPU per unit."""

    async def measured() -> float:
        server, client = cpu_reading(server_pid), time.process_time()
        per_unit_us = await fn()
        cpu.server_us.append(cpu_between(server, cpu_reading(server_pid)) / units * 1e6)
        cpu.client_us.append((time.process_time() - client) / units * 1e6)
        return per_unit_us

    return measured


def cpu_rows(floor: Cpu, scenario: Cpu, unit: str) -> list[Row]:
    """The CPU behind a session's round trip, each side against the floor's same side."""
    rows = []
    for side, floor_side, floor_samples, samples in (
        ("sidecar", "server", floor.server_us[1:], scenario.server_us[1:]),
        ("client", "client", floor.client_us[1:], scenario.client_us[1:]),
    ):
        rows.append(
            Row(f"  {side} CPU", unit, median_of(samples), samples,
                f"floor {floor_side} {median_of(floor_samples):.0f}us",
                pair_ratio(samples, floor_samples), floor_samples_us=floor_samples)
        )  # fmt: skip
    return rows


def median_of(samples: list[float]) -> float:
    return statistics.median(samples)


def pair_ratio(samples: list[float], floors: list[float]) -> float:
    return statistics.median(s / f for s, f in zip(samples, floors, strict=True))


async def interleaved(
    floor: Callable[[], Awaitable[float]],
    scenario: Callable[[], Awaitable[float]],
    times: int = REPEATS,
) -> tuple[list[float], list[float]]:
    """Samples of a floor and a scenario taken in turns (after one warm-up of each)."""
    await floor()
    await scenario()
    floors: list[float] = []
    samples: list[float] = []
    for _ in range(times):
        floors.append(await floor())
        samples.append(await scenario())
    return floors, samples


def start(
    command: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


# -- floors --------------------------------------------------------------------------------


async def floor_ping(target: str, rounds: int) -> float:
    async with grpc.aio.insecure_channel(target) as channel:
        method: Any = channel.stream_stream("/floor.Floor/Ping")
        call = method()
        began = time.perf_counter()
        for _ in range(rounds):
            await call.write(PAYLOAD)
            await call.read()
        elapsed = time.perf_counter() - began
        await call.done_writing()
    return elapsed / rounds * 1e6


async def floor_stream(target: str, count: int) -> float:
    async with grpc.aio.insecure_channel(target) as channel:
        method: Any = channel.unary_stream("/floor.Floor/Stream")
        call = method(count.to_bytes(4, "big") + PAYLOAD)
        began = time.perf_counter()
        async for _ in call:
            pass
        elapsed = time.perf_counter() - began
    return elapsed / count * 1e6


# -- scenarios -----------------------------------------------------------------------------


async def in_process(iterations: int) -> float:
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


async def stream_rpc(client: AsyncSidecarClient, iterations: int) -> float:
    began = time.perf_counter()
    events = 0
    script = scenarios_load.noop_script(iterations, "noop")  # the sidecar's own no-op
    async for _ in client.stream_tool_loop(
        "go", script=script, max_iterations=iterations, tool_names=["noop"]
    ):
        events += 1
    elapsed = time.perf_counter() - began
    assert events == 4 * iterations, events
    return elapsed / iterations * 1e6


async def session_rpc(
    client: AsyncSidecarClient, iterations: int, client_llm: bool = False
) -> float:
    """A Session with a client-hosted no-op tool; with ``client_llm`` the client is the LLM too
    (answering at once), else the sidecar plays the script."""
    registry = ToolRegistry()

    @registry.tool
    async def client_noop() -> dict[str, Any]:
        """Do nothing, in the client."""
        return {}

    llm = scenarios_load.ThinkingLLM(iterations, 0.0) if client_llm else None
    script = None if client_llm else scenarios_load.noop_script(iterations)
    began = time.perf_counter()
    events = 0
    async for _ in client.session(
        "go", tools=registry, llm=llm, script=script, max_iterations=iterations, tool_names=[]
    ):
        events += 1
    elapsed = time.perf_counter() - began
    assert events == 4 * iterations, events
    return elapsed / iterations * 1e6


async def main() -> None:
    floor_proc, floor_port = start([sys.executable, str(HERE / "floor_server.py")])
    sidecar_proc, sidecar = scenarios_load.start_sidecar()
    floor = f"127.0.0.1:{floor_port}"
    rows: list[Row] = []
    figures: list[Figure] = []
    began = time.perf_counter()
    try:
        async with AsyncSidecarClient(sidecar) as client:
            # Each scenario alternates with its floor, so that both see the same machine: on
            # a shared VM the speed can change several-fold within a minute.
            # CPU per round trip on each side explains the session's ratio: both processes
            # run Python and gRPC along every round trip (partly at once: gRPC has threads).
            floor_cpu, session_cpu = Cpu(), Cpu()
            ping, session = await interleaved(
                with_cpu(lambda: floor_ping(floor, 1000), floor_proc.pid, 1000, floor_cpu),
                with_cpu(lambda: session_rpc(client, 200), sidecar_proc.pid, 200, session_cpu),
            )
            streamed, stream = await interleaved(
                lambda: floor_stream(floor, 5000), lambda: stream_rpc(client, 200)
            )
            # The conversation grows by two messages an iteration; a client-hosted LLM must
            # not pay for its length (N=200 against N=20, in turns).
            llm20, llm200 = await interleaved(
                lambda: session_rpc(client, 20, client_llm=True),
                lambda: session_rpc(client, 200, client_llm=True),
            )
            structured = await structured_output.measure(interleaved, client)
            messages = await session_messages.measure(sidecar)  # what the session rows send
        rows.append(Row("floor: bidi ping-pong", "round trip", median_of(ping), ping))
        rows.append(Row("floor: server stream", "message", median_of(streamed), streamed))
        # In turns too: measured one after the other, a change of the VM's speed between the
        # two would read as (or hide) a cost that grows with the history.
        n20, n200 = await interleaved(
            functools.partial(in_process, 20), functools.partial(in_process, 200), REPEATS * 3
        )
        rows.append(Row("in-process N=20", "iteration", median_of(n20), n20, target="<= 50 us"))
        rows.append(
            Row("in-process N=200", "iteration", median_of(n200), n200, "in-process N=20",
                pair_ratio(n200, n20), "<= 1.2x")
        )  # fmt: skip
        # The loop beside a bare hand-written one (bare_loop.py): what its features cost.
        bare, again = await interleaved(
            functools.partial(bare_loop, 200), functools.partial(in_process, 200), REPEATS * 3
        )
        rows.append(Row("floor: bare loop N=200", "iteration", median_of(bare), bare))
        rows.append(
            Row("in-process N=200, again", "iteration", median_of(again), again,
                "floor: bare loop N=200", pair_ratio(again, bare))
        )  # fmt: skip
        # Ratios: the median over adjacent (floor, scenario) pairs.
        rows.append(
            Row("stream (StreamToolLoop)", "iteration", median_of(stream), stream,
                "floor: server stream", pair_ratio(stream, streamed), "<= 6x")
        )  # fmt: skip
        rows.append(
            Row("session (client tool)", "iteration", median_of(session), session,
                "floor: bidi ping-pong", pair_ratio(session, ping), "<= 1.5x")
        )  # fmt: skip
        rows += cpu_rows(floor_cpu, session_cpu, "iteration")
        rows.append(
            Row("session, client LLM N=20", "iteration", median_of(llm20), llm20)
        )  # fmt: skip
        rows.append(
            Row("session, client LLM N=200", "iteration", median_of(llm200), llm200,
                "session, client LLM N=20", pair_ratio(llm200, llm20), "<= 1.2x")
        )  # fmt: skip
        rows += structured_rows(structured)
        mcp_floor, mcp = await mcp_calls.measure(interleaved)  # its own sidecar and MCP servers
        rows.append(Row("floor: MCP call via the SDK", "call", median_of(mcp_floor), mcp_floor))
        rows.append(
            Row("MCP tool call in a run", "call", median_of(mcp), mcp,
                "floor: MCP call via the SDK", pair_ratio(mcp, mcp_floor), "<= 1.5x")
        )  # fmt: skip
        print(f"  per-iteration scenarios: {time.perf_counter() - began:.0f} s", file=sys.stderr)
        figures += await scenarios_load.timed("fan-out", lambda: scenarios_load.fanout(sidecar))
        figures += await scenarios_load.timed("latency", lambda: scenarios_load.latency(sidecar))
    finally:
        for process in (floor_proc, sidecar_proc):
            process.terminate()
            process.wait(timeout=15)
    # Its own sidecar (a short finished-run TTL, so that memory can be seen to come back).
    figures = await scenarios_load.timed("concurrency", scenarios_load.concurrency) + figures
    figures += await scenarios_load.timed("stores", stores.compare)  # memory, SQLite, Redis
    figures += await scenarios_load.timed("failover", failover.death_to_resume)  # issue 21
    rows[2].met = rows[2].median_us <= 50
    for row in rows[3:]:
        if row.target:
            row.met = row.ratio is not None and row.ratio <= float(row.target.strip("<= x"))
    report(rows, figures, time.perf_counter() - began)
    session_messages.report(messages)


def structured_rows(samples: dict[str, tuple[list[float], list[float]]]) -> list[Row]:
    """A final answer with an output schema beside the same answer without one (a one-
    iteration run each: the difference is the parse and validation), and a retried one."""
    plain, structured = samples["in process"]
    again, retried = samples["retried"]
    grpc_plain, grpc_structured = samples["grpc"]
    return [
        Row("final answer, plain (in-process)", "run", median_of(plain), plain),
        Row("final answer, structured", "run", median_of(structured), structured,
            "final answer, plain (in-process)", pair_ratio(structured, plain), "<= 1.5x"),
        Row("structured, one retry", "run", median_of(retried), retried,
            "final answer, structured", pair_ratio(retried, again), floor_samples_us=again),
        Row("final answer, plain (StreamToolLoop)", "run", median_of(grpc_plain), grpc_plain),
        Row("final answer, structured (StreamToolLoop)", "run", median_of(grpc_structured),
            grpc_structured, "final answer, plain (StreamToolLoop)",
            pair_ratio(grpc_structured, grpc_plain), "<= 1.2x"),
    ]  # fmt: skip


def verdict(met: bool | None) -> str:
    return "" if met is None else "yes" if met else "NO"


def report(rows: list[Row], figures: list[Figure], seconds: float) -> None:
    print(
        f"\n{'scenario':28} {'per':>11} {'median':>11} {'vs its floor (the floor median)':>48} "
        f"{'target':>10} {'met':>4}"
    )
    medians = {row.scenario: row.median_us for row in rows}
    for row in rows:
        ratio = ""
        if row.ratio is not None:
            base = (
                median_of(row.floor_samples_us) if row.floor_samples_us else medians.get(row.floor)
            )
            beside = (
                f" ({base:.1f}us)"
                if base is not None and not row.floor.startswith("floor ")
                else ""
            )
            ratio = f"{row.ratio:.2f}x {row.floor}{beside}"
        print(
            f"{row.scenario:28} {row.unit:>11} {row.median_us:9.1f}us {ratio:>48} "
            f"{row.target:>10} {verdict(row.met):>4}"
        )
    print(f"\n{'load scenario':28} {'figure':36} {'median':>15} {'target':>13} {'met':>4}")
    for fig in figures:
        value = f"{fig.value:,.0f}" if abs(fig.value) >= 100 else f"{fig.value:.2f}"
        if fig.value == int(fig.value):
            value = f"{fig.value:,.0f}"
        measure = fig.unit in ("it/s", "MB", "ms", "us", "s", "x")
        shown = f"{value} {fig.unit}" if measure else value
        target = f"{fig.target} {fig.unit}" if fig.target and measure else fig.target
        print(f"{fig.scenario:28} {fig.name:36} {shown:>15} {target:>13} {verdict(fig.met):>4}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    versions = {
        name: metadata.version(name)
        for name in ("cleveragents-sidecar", "grpcio", "protobuf", "jsonschema-rs")
    }
    with contextlib.suppress(metadata.PackageNotFoundError):
        versions["uvloop"] = metadata.version("uvloop")
    out = {
        "time": stamp,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
        "repeats": REPEATS,
        # The servers' loop (the sidecar's event_loop setting; the floor follows it).
        "event_loop": os.environ.get("CLEVERAGENTS_SIDECAR_EVENT_LOOP", "auto"),
        "load": {
            "sessions": scenarios_load.SESSIONS,
            "session_iterations": scenarios_load.SESSION_ITERATIONS,
            "client_processes": scenarios_load.CLIENT_PROCESSES,
            "rounds": scenarios_load.LOAD_ROUNDS,
            "watchers": scenarios_load.WATCHERS,
            "fanout_iterations": scenarios_load.FANOUT_ITERATIONS,
            "fanout_repeats": scenarios_load.FANOUT_REPEATS,
            "latency_repeats": scenarios_load.LATENCY_REPEATS,
        },
        "seconds": seconds,
        "rows": [row.__dict__ for row in rows],
        "figures": [fig.__dict__ for fig in figures],
    }
    path = results / f"bench-{stamp}.json"
    path.write_text(json.dumps(out, indent=2))
    print(
        f"\n{os.cpu_count()} cores, Python {platform.python_version()}, grpcio "
        f"{versions['grpcio']}; {seconds:.0f} s; JSON: {path}"
    )


if __name__ == "__main__":
    asyncio.run(main())
