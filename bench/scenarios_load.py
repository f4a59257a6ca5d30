"""The load scenarios of `make bench`: concurrency, fan-out and latency (medians over repeats).

- concurrency: 1,000 concurrent Sessions x 20 iterations (a client-hosted no-op tool) against
  one sidecar process. The client load runs in CLIENT_PROCESSES worker processes (this file,
  run as `scenarios_load.py worker TARGET SESSIONS ITERATIONS`), summed. In a *gated* round
  every session waits at its first tool call until all 1,000 are live, then the iterations
  that start after that are timed; rounds 2.. are measured against the RSS left by round 1.
  The sidecar's RSS is sampled every 20 ms from /proc during a round and read again once its
  finished runs expired (TTL 2 s, then a GetRun). A last *burst* round lets every session go
  as soon as the sidecar admits it, as a real burst would.
- fan-out: one StreamToolLoop run (a `pause` turn so watchers attach, then 200 timed `noop`
  iterations) with 100 WatchRun watchers, against the same run with none and with 100
  FollowRun watchers that ack as the clients do, in turns; per-
  iteration time from the run's own events' server timestamps, the median of the pairs' ratios.
- latency: from a client-hosted tool returning to its `tool_call_completed` reaching the same
  client process, at 1 session and at 100 concurrent sessions: 100 whose tools return at once
  (saturating the sidecar and this client) and 100 whose tools take 0.1-0.3 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.tool import (
    IterationStarted,
    LLMRequest,
    LLMResponse,
    RunCompleted,
    RunStarted,
    ToolCallCompleted,
    ToolRegistry,
    response_from_dict,
)
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub

HERE = Path(__file__).resolve().parent

SESSIONS = int(os.environ.get("BENCH_SESSIONS", "1000"))
SESSION_ITERATIONS = 20
CLIENT_PROCESSES = int(os.environ.get("BENCH_CLIENT_PROCESSES", "2"))
LOAD_ROUNDS = max(2, int(os.environ.get("BENCH_LOAD_ROUNDS", "3")))  # round 1 sets the RSS base
TTL_S = 2.0
SAMPLE_EVERY_S = 0.02
WATCHERS = 100
FANOUT_ITERATIONS = 200
FANOUT_PAUSE_S = 0.5
#: A timed fan-out run lasts some 30-60 ms, so one pause of the VM can double a sample (single
#: pairs have ranged 0.3-7.9x): many short pairs, and the median of their ratios.
FANOUT_REPEATS = int(os.environ.get("BENCH_FANOUT_REPEATS", "11"))
LATENCY_REPEATS = int(os.environ.get("BENCH_LATENCY_REPEATS", "5"))
MB = 1e6


@dataclass
class Figure:
    """One figure of a load scenario: a median over repeats, and whether it meets its target."""

    scenario: str
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    samples: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def start_sidecar(**settings: str) -> tuple[subprocess.Popen[str], str]:
    """A sidecar subprocess with the bench tools (`noop`, `pause`) and ``settings`` (env)."""
    return start_sidecar_with("noop_tools:registry", {}, settings)


def start_sidecar_with(
    tools: str, env_extra: dict[str, str], settings: dict[str, str]
) -> tuple[subprocess.Popen[str], str]:
    """A sidecar subprocess with the tool modules ``tools`` (from `bench/`), ``settings`` as
    its env settings and ``env_extra`` added to its environment; and its address."""
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, **env_extra)
    env["CLEVERAGENTS_SIDECAR_TOOL_MODULES"] = tools
    env["CLEVERAGENTS_SIDECAR_BUILTIN_TOOLS"] = "false"
    env.update({f"CLEVERAGENTS_SIDECAR_{key.upper()}": value for key, value in settings.items()})
    command = [
        sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0",
        "--log-level", "warning",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    return process, process.stdout.readline().strip().rsplit(" ", 1)[1]


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=15)


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def percentile(samples: list[float], p: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


# -- sessions with a client-hosted tool ---------------------------------------------------


def noop_script(iterations: int, tool: str = "client_noop") -> list[dict[str, Any]]:
    """N-1 turns that call ``tool`` (the client's `client_noop` by default), then a final
    answer: 4*N events."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": tool, "arguments": {}}]}
        for i in range(iterations - 1)
    ]
    turns.append({"content": "done"})
    return turns


class ThinkingLLM:
    """A client-hosted LLM that plays a script, each answer after 0.5-1.5x ``think_s``.

    A real model always takes time, so the sidecar sends a `tool_call_completed` before the
    next LLM call begins; an instant scripted answer would instead let the next iteration's
    work ride in the same message.
    """

    def __init__(self, iterations: int, think_s: float) -> None:
        self._turns = [response_from_dict(t) for t in noop_script(iterations)]
        self._think_s = think_s

    async def call(self, request: LLMRequest) -> LLMResponse:
        if self._think_s:
            await asyncio.sleep(random.uniform(self._think_s / 2, self._think_s * 1.5))
        return self._turns[request.iteration - 1]


@dataclass
class Tally:
    """What one or more sessions received, against what they should have."""

    expected: int = 0
    received: int = 0
    iterations: int = 0
    disordered: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_us: list[float] = field(default_factory=list)
    up_us: list[float] = field(default_factory=list)
    down_us: list[float] = field(default_factory=list)
    #: Per session: when it was opened, its first event arrived and its last one (Unix time).
    spans: list[tuple[float, float, float]] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.expected - self.received

    def add(self, other: Tally) -> None:
        self.expected += other.expected
        self.received += other.received
        self.iterations += other.iterations
        self.disordered += other.disordered
        self.errors += other.errors
        self.latencies_us += other.latencies_us
        self.up_us += other.up_us
        self.down_us += other.down_us
        self.spans += [(a, b, c) for a, b, c in other.spans]


class Gate:
    """Holds every session at its first tool call until all of them got there (or failed).

    So that all the sessions are live at once before any proceeds: the sidecar admits new
    calls one per turn of its event loop, and a busy loop would otherwise admit the last ones
    only after the first had finished. Once full, the gate awaits ``release`` (the other
    client processes' gates), then opens.
    """

    def __init__(self, parties: int, release: Callable[[], Awaitable[None]]) -> None:
        self.parties = parties
        self.release = release
        self.opened = asyncio.Event()
        self.opened_at = 0.0
        self._opening: asyncio.Task[None] | None = None

    async def arrive(self) -> None:
        self.leave()
        await self.opened.wait()

    def leave(self) -> None:
        self.parties -= 1
        if self.parties == 0:
            self._opening = asyncio.create_task(self._open())

    async def _open(self) -> None:
        await self.release()
        self.opened_at = time.time()
        self.opened.set()


async def counted_session(
    client: AsyncSidecarClient,
    iterations: int,
    timed: bool = False,
    tool_s: float = 0.0,
    gate: Gate | None = None,
    think_s: float = 0.0,
) -> Tally:
    """One Session; counts its events and, if ``timed``, each tool-return-to-event latency.

    The client's tool returns at once, or after 0.5-1.5x ``tool_s`` (a tool that does work).
    With a ``gate``, the first tool call waits for it, and only the iterations that start
    after it opened are counted. With ``think_s``, the client hosts the LLM (``ThinkingLLM``).

    The latency is split at the event's own timestamp (the sidecar's clock, the same host's):
    ``up`` from the tool's return to the sidecar logging `tool_call_completed`, ``down`` from
    there to the event reaching this client.
    """
    registry = ToolRegistry()
    returned: list[tuple[float, float]] = []
    arrived_at_gate = False

    @registry.tool
    async def client_noop() -> dict[str, Any]:
        """Do nothing (or wait), in the client, and note when it returns."""
        nonlocal arrived_at_gate
        if gate is not None and not arrived_at_gate:
            arrived_at_gate = True
            await gate.arrive()
        if tool_s:
            await asyncio.sleep(random.uniform(tool_s / 2, tool_s * 1.5))
        returned.append((time.perf_counter(), time.time()))
        return {}

    tally = Tally(expected=4 * iterations)
    sequences: list[int] = []
    completed = 0
    opened = first = last = time.time()
    try:
        llm = ThinkingLLM(iterations, think_s) if think_s else None
        async for streamed in client.session(
            "go", tools=registry, llm=llm, script=None if llm else noop_script(iterations),
            max_iterations=iterations, tool_names=["noop"],
        ):  # fmt: skip
            arrived, arrived_at = time.perf_counter(), time.time()
            if not sequences:
                first = arrived_at
            last = arrived_at
            sequences.append(streamed.sequence)
            event = streamed.event
            if isinstance(event, ToolCallCompleted):
                if timed:
                    clock, at = returned[completed]
                    tally.latencies_us.append((arrived - clock) * 1e6)
                    tally.up_us.append((streamed.time - at) * 1e6)
                    tally.down_us.append((arrived_at - streamed.time) * 1e6)
                completed += 1
            elif isinstance(event, IterationStarted) and (
                gate is None or (gate.opened.is_set() and streamed.time >= gate.opened_at)
            ):
                tally.iterations += 1
    except SidecarRpcError as exc:
        tally.errors.append(str(exc))
    finally:
        if gate is not None and not arrived_at_gate:
            arrived_at_gate = True
            gate.leave()
    if sequences:
        tally.spans.append((opened, first, last))
    tally.received = len(set(sequences) & set(range(1, tally.expected + 1)))
    tally.disordered = int(sequences != list(range(1, len(sequences) + 1)))
    return tally


async def session_round(
    client: AsyncSidecarClient,
    sessions: int,
    iterations: int,
    timed: bool = False,
    tool_s: float = 0.0,
    gate: Gate | None = None,
    think_s: float = 0.0,
) -> Tally:
    """``sessions`` concurrent sessions; their tallies summed."""
    total = Tally()
    for tally in await asyncio.gather(
        *(
            counted_session(client, iterations, timed, tool_s, gate, think_s)
            for _ in range(sessions)
        )
    ):
        total.add(tally)
    return total


async def worker(target: str, sessions: int, iterations: int) -> None:
    """A client process: runs a round on each `gated` or `burst` line; prints it as JSON.

    A gated round holds its sessions at their first tool call until all are live, and times
    the iterations after that; a burst round lets each session go as soon as it is admitted.
    """
    loop = asyncio.get_running_loop()

    async def read_line() -> str:
        line: str = await loop.run_in_executor(None, sys.stdin.readline)
        return line.strip()

    async def all_full() -> None:
        print("full", flush=True)
        assert await read_line() == "open"

    async with AsyncSidecarClient(target) as client:
        await client.list_tools()  # connected before the first round
        print("ready", flush=True)
        while (mode := await read_line()) in ("gated", "burst"):
            began, cpu = time.time(), time.process_time()
            gate = Gate(sessions, all_full) if mode == "gated" else None
            tally = await session_round(client, sessions, iterations, gate=gate)
            ended, cpu = time.time(), time.process_time() - cpu
            if gate is not None:
                began = gate.opened_at
            report = {"began": began, "ended": ended, "cpu_s": cpu, **tally.__dict__}
            print(json.dumps(report), flush=True)


# -- concurrency ---------------------------------------------------------------------------


def rss_kb(pid: int) -> int:
    """VmRSS of ``pid``, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def rss_mb(pid: int) -> float:
    return rss_kb(pid) * 1024 / MB


def cpu_s(pid: int) -> float:
    """User plus system CPU time ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler(threading.Thread):
    """Samples a process's RSS every SAMPLE_EVERY_S until stopped; keeps the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak_kb = max(self.peak_kb, rss_kb(self.pid))
            self.samples += 1
            self._stop_event.wait(SAMPLE_EVERY_S)

    def finish(self) -> float:
        """Stop; the peak, in MB."""
        self._stop_event.set()
        self.join()
        self.peak_kb = max(self.peak_kb, rss_kb(self.pid))
        return self.peak_kb * 1024 / MB


def peak_overlap(spans: list[tuple[float, float, float]]) -> int:
    """The most sessions that were streaming events at one moment (first to last event)."""
    edges = sorted([(first, 1) for _, first, _ in spans] + [(last, -1) for _, _, last in spans])
    live = peak = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    return peak


@dataclass
class Round:
    """One round of the concurrency scenario, over all client processes."""

    tally: Tally
    wall_s: float
    client_cpu_s: float


def run_workers(workers: list[subprocess.Popen[str]], mode: str = "gated") -> Round:
    """One round on every worker at once: the summed tally, wall time and client CPU."""
    for process in workers:
        assert process.stdin is not None
        process.stdin.write(f"{mode}\n")
        process.stdin.flush()
    if mode == "gated":  # every client process's sessions are live: let them all go
        for process in workers:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "full"
        for process in workers:
            assert process.stdin is not None
            process.stdin.write("open\n")
            process.stdin.flush()
    total, began, ended, cpu = Tally(), float("inf"), 0.0, 0.0
    for process in workers:
        assert process.stdout is not None
        result = json.loads(process.stdout.readline())
        began, ended = min(began, result.pop("began")), max(ended, result.pop("ended"))
        cpu += result.pop("cpu_s")
        total.add(Tally(**result))
    return Round(total, ended - began, cpu)


async def expire_finished_runs(client: AsyncSidecarClient) -> None:
    """Wait out the finished-run TTL, then make the sidecar drop those runs (any lookup does)."""
    await asyncio.sleep(TTL_S + 0.3)
    with contextlib.suppress(SidecarRpcError):
        await client.get_run("bench-expiry-probe")


def start_worker(target: str, sessions: int) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "worker", target, str(sessions), str(SESSION_ITERATIONS)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def round_figures(name: str, rounds: list[Round], rate_target: bool = True) -> list[Figure]:
    """What every kind of round reports: rate, how concurrent it was, what was lost."""
    rates = [r.tally.iterations / r.wall_s for r in rounds]
    overlaps = [float(peak_overlap(r.tally.spans)) for r in rounds]
    waits = [max((b - a for a, b, _ in r.tally.spans), default=0.0) for r in rounds]
    lost = sum(r.tally.lost for r in rounds)
    disordered = sum(r.tally.disordered for r in rounds)
    errors = [error for r in rounds for error in r.tally.errors]
    distinct = sorted(set(errors))
    for error in distinct:
        print(f"  {name}: failed session: {error}", file=sys.stderr)
    return [
        Figure(name, "aggregate iterations/s", median(rates), "it/s",
               ">= 1500" if rate_target else "", median(rates) >= 1500 if rate_target else None,
               rates),
        Figure(name, "peak sessions streaming at once", median(overlaps), "", "", None,
               overlaps),
        Figure(name, "session open -> first event, max", median(waits), "s", "", None, waits),
        Figure(name, "events lost", lost, "events", "0", lost == 0),
        Figure(name, "sessions out of order", disordered, "sessions", "0", disordered == 0),
        Figure(name, "failed sessions", len(errors), "sessions", "0", not errors,
               notes=distinct),
    ]  # fmt: skip


async def concurrency() -> list[Figure]:
    """Gated rounds (all sessions live, then 19 timed iterations each), then one burst."""
    sidecar, target = start_sidecar(finished_run_ttl_s=str(TTL_S))
    shares = [SESSIONS // CLIENT_PROCESSES + (i < SESSIONS % CLIENT_PROCESSES)
              for i in range(CLIENT_PROCESSES)]  # fmt: skip
    workers = [start_worker(target, share) for share in shares]
    rounds: list[Round] = []
    peaks: list[float] = []
    afters: list[float] = []
    server_cpu: list[float] = []
    client_cpu: list[float] = []
    try:
        for process in workers:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        async with AsyncSidecarClient(target) as client:
            idle = rss_mb(sidecar.pid)
            baseline = 0.0
            for index in range(LOAD_ROUNDS):
                if index == 1:  # the first round warmed up the allocator's arenas and caches
                    baseline = afters.pop()
                sampler = RssSampler(sidecar.pid)
                sampler.start()
                cpu = cpu_s(sidecar.pid)
                done = run_workers(workers)
                cpu = cpu_s(sidecar.pid) - cpu
                peaks.append(sampler.finish())
                rounds.append(done)
                iterations = done.tally.received / 4  # all of them, the gated ones too
                server_cpu.append(cpu / iterations * 1e6)
                client_cpu.append(done.client_cpu_s / iterations * 1e6)
                await expire_finished_runs(client)
                afters.append(rss_mb(sidecar.pid))
            burst = run_workers(workers, "burst")
    finally:
        for process in workers:
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=15)
        stop(sidecar)
    name = f"concurrency {SESSIONS}x{SESSION_ITERATIONS}"
    after_ratio = [after / baseline for after in afters]
    figures = round_figures(name, rounds)
    figures[1:1] = [
        Figure(name, "server CPU per iteration", median(server_cpu), "us", "", None,
               server_cpu),
        Figure(name, f"client CPU per iteration ({CLIENT_PROCESSES} procs)", median(client_cpu),
               "us", "", None, client_cpu),
        Figure(name, "server RSS idle", idle, "MB"),
        Figure(name, "server RSS pre-load", baseline, "MB"),
        Figure(name, "server peak RSS (max)", max(peaks), "MB", "<= 200", max(peaks) <= 200,
               peaks),
        Figure(name, "server RSS after", median(afters), "MB", "", None, afters),
        Figure(name, "RSS after / pre-load (max)", max(after_ratio), "x", "<= 1.10",
               max(after_ratio) <= 1.10, after_ratio),
    ]  # fmt: skip
    return figures + round_figures(f"{name} burst", [burst], rate_target=False)


# -- fan-out -------------------------------------------------------------------------------


@dataclass
class FanOut:
    """One fan-out run: its per-iteration time and what its watchers got."""

    per_iteration_us: float
    drained_ms: float
    lost: int
    disordered: int
    late_watchers: int


async def fanout_run(
    client: AsyncSidecarClient, stub: Stub, watchers: int, *, acked: bool = False
) -> FanOut:
    """A run that pauses in its first iteration (watchers attach), then times N iterations.

    Timed: from the server's `iteration_started` of iteration 2 to its `run_completed`. The
    watchers read the raw stream (batched, as the client asks) and only decode each event's
    sequence: 100 full clients in this one process would eat the CPU the sidecar is timed on.
    """
    run_id = f"fanout-{uuid.uuid4().hex}"
    pause = FANOUT_PAUSE_S if watchers else 0.0
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "pause", "name": "pause", "arguments": {"seconds": pause}}]}
    ]
    script += [
        {"tool_calls": [{"id": f"c{i}", "name": "noop", "arguments": {}}]}
        for i in range(FANOUT_ITERATIONS - 1)
    ]
    script.append({"content": "done"})
    expected = list(range(1, 4 * len(script) + 1))
    started = asyncio.Event()
    attached: list[float] = []
    drained: list[float] = [time.time()]
    own: list[StreamedEvent] = []

    async def follow() -> list[int]:
        async for streamed in client.stream_tool_loop(
            "go", script=script, max_iterations=len(script), tool_names=["noop", "pause"],
            run_id=run_id,
        ):  # fmt: skip
            own.append(streamed)
            if isinstance(streamed.event, RunStarted):
                started.set()
        return [streamed.sequence for streamed in own]

    async def watch() -> list[int]:
        await started.wait()
        sequences: list[int] = []
        request = service_pb2.WatchRunRequest(run_id=run_id, batch_events=True)
        async for response in stub.WatchRun(request):
            if not sequences:
                attached.append(time.time())
            events = response.events or [response.event]
            sequences += [event.sequence for event in events]
        drained.append(time.time())
        return sequences

    async def follow_acked() -> list[int]:
        """A FollowRun watcher, acking what the sidecar asks it to (as the clients do)."""
        await started.wait()
        sequences: list[int] = []
        call = stub.FollowRun()
        start = service_pb2.FollowRunStart(run_id=run_id)
        await call.write(service_pb2.FollowRunRequest(start=start))
        async for response in call:
            if not sequences:
                attached.append(time.time())
            sequences += [event.sequence for event in response.events]
            if response.ack_requested:
                ack = service_pb2.FollowRunAck(sequence=sequences[-1])
                await call.write(service_pb2.FollowRunRequest(ack=ack))
        drained.append(time.time())
        return sequences

    watcher = follow_acked if acked else watch
    streams = await asyncio.gather(follow(), *(watcher() for _ in range(watchers)))
    began = next(
        s.time for s in own if isinstance(s.event, IterationStarted) and s.event.iteration == 2
    )
    ended = next(s.time for s in own if isinstance(s.event, RunCompleted))
    return FanOut(
        per_iteration_us=(ended - began) / FANOUT_ITERATIONS * 1e6,
        drained_ms=(max(drained) - ended) * 1e3,
        lost=sum(len(set(expected) - set(stream)) for stream in streams),
        disordered=sum(stream != expected for stream in streams),
        late_watchers=sum(when >= began for when in attached),
    )


async def fanout(target: str) -> list[Figure]:
    alone: list[float] = []
    watched: list[float] = []
    followed: list[float] = []
    drains: list[float] = []
    lost = disordered = late = 0
    async with (
        AsyncSidecarClient(target) as client,
        grpc.aio.insecure_channel(
            target, options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)]
        ) as channel,
    ):
        stub: Stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        await fanout_run(client, stub, 0)  # warm-up
        for _ in range(FANOUT_REPEATS):  # interleaved, so that drift hits both alike
            alone.append((await fanout_run(client, stub, 0)).per_iteration_us)
            run = await fanout_run(client, stub, WATCHERS)
            acked = await fanout_run(client, stub, WATCHERS, acked=True)
            watched.append(run.per_iteration_us)
            followed.append(acked.per_iteration_us)
            drains.append(run.drained_ms)
            lost += run.lost + acked.lost
            disordered += run.disordered + acked.disordered
            late += run.late_watchers + acked.late_watchers
    name = f"fan-out {WATCHERS} watchers"
    ratio = median([w / a for a, w in zip(alone, watched, strict=True)])
    acked_ratio = median([f / w for w, f in zip(watched, followed, strict=True)])
    return [
        Figure(name, "per iteration, no watcher", median(alone), "us", "", None, alone),
        Figure(name, f"per iteration, {WATCHERS} watchers", median(watched), "us", "", None,
               watched),
        Figure(name, "watched / no watcher", ratio, "x", "<= 2", ratio <= 2),
        Figure(name, f"per iteration, {WATCHERS} FollowRun watchers", median(followed), "us", "",
               None, followed),
        Figure(name, "FollowRun / WatchRun watchers", acked_ratio, "x", "", None),
        Figure(name, "run end -> last watcher has all", median(drains), "ms", "", None,
               drains),
        Figure(name, "events lost (all watchers)", lost, "events", "0", lost == 0),
        Figure(name, "streams out of order", disordered, "streams", "0", disordered == 0),
        Figure(name, "watchers attached late", late, "watchers", "0", late == 0),
    ]  # fmt: skip


# -- latency -------------------------------------------------------------------------------


#: (sessions, iterations, mean client-tool time, mean LLM time (0: the sidecar's instant
#: script), whether the issue's target applies); times in seconds.
LATENCY_CASES = (
    (1, 200, 0.0, 0.0, False),
    (100, 10, 0.0, 0.0, True),
    (100, 8, 0.2, 0.0, True),
    (1, 40, 0.0, 0.02, False),
    (100, 8, 0.2, 0.02, False),
)


async def latency(target: str) -> list[Figure]:
    """Tool return -> `tool_call_completed` at the client, p50/p99 (medians over repeats).

    With tools that return at once, 100 sessions keep the sidecar and this client saturated,
    so the figure is mostly queueing (by Little's law, 100 sessions at R iterations/s wait
    about 100/R s per round); the last case gives each tool call 0.1-0.3 s (offered load ~500
    iterations/s), the latency of 100 live sessions that do not saturate the machine.
    """
    figures: list[Figure] = []
    async with AsyncSidecarClient(target) as client:
        for sessions, iterations, tool_s, think_s, targeted in LATENCY_CASES:
            p50s: list[float] = []
            p99s: list[float] = []
            ups: list[float] = []
            downs: list[float] = []
            lost = 0
            await session_round(client, sessions, iterations, True, tool_s, None, think_s)
            for _ in range(LATENCY_REPEATS):
                tally = await session_round(
                    client, sessions, iterations, True, tool_s, None, think_s
                )
                p50s.append(percentile(tally.latencies_us, 50) / 1e3)
                p99s.append(percentile(tally.latencies_us, 99) / 1e3)
                ups.append(percentile(tally.up_us, 50) / 1e3)
                downs.append(percentile(tally.down_us, 50) / 1e3)
                lost += tally.lost
            name = "latency 1 session" if sessions == 1 else f"latency {sessions}, saturated"
            name = f"latency {sessions}, {tool_s * 1e3:.0f} ms tools" if tool_s else name
            name += f", {think_s * 1e3:.0f} ms LLM" if think_s else ""
            p50, p99 = median(p50s), median(p99s)
            figures += [
                Figure(name, "tool return -> event p50", p50, "ms", "<= 1" if targeted else "",
                       p50 <= 1 if targeted else None, p50s),
                Figure(name, "tool return -> event p99", p99, "ms", "<= 10" if targeted else "",
                       p99 <= 10 if targeted else None, p99s),
                Figure(name, "  p50 up: return -> logged", median(ups), "ms", "", None, ups),
                Figure(name, "  p50 down: logged -> client", median(downs), "ms", "", None,
                       downs),
                Figure(name, "events lost", lost, "events", "0", lost == 0),
            ]  # fmt: skip
    return figures


async def timed(label: str, scenario: Callable[[], Awaitable[list[Figure]]]) -> list[Figure]:
    began = time.perf_counter()
    figures = await scenario()
    print(f"  {label}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    return figures


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    asyncio.run(worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
