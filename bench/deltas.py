"""`make bench`, live model output: what the sidecar adds to a delta on its way to a client.

Latency row: a Session's client-hosted LLM sends deltas (each stamped with its send time) and
the same session, which set ``stream_deltas``, receives them back through the sidecar: a
delta's trip is client -> sidecar -> client. The floor is the same bytes on a bare grpc.aio
bidi echo (``floor_server.py``), two hops too. Both are paced alike (one delta every 2 ms).

Batch rows: a Session's client LLM streams ``BENCH_DELTA_BURST`` deltas (default 10,000) as
fast as the stream takes them, ``K`` to a message (``llm_deltas``; K = 1: each alone, as to a
sidecar without ``accepts_delta_batches``), and reads them back (``stream_deltas``): the
sidecar's CPU per delta for K = 1, 16 and 256, in turns (``BENCH_DELTA_TURNS``, default 5),
beside the floor's CPU per message of a bare bidi echo of the same deltas one to a message.
Then the same burst from the Python client's streaming LLM, which batches by itself.

Load row: ``BENCH_DELTA_RUNS`` runs at once (default 50), each a Session whose client LLM
streams ``BENCH_DELTA_RATE`` deltas/s (50) for ``BENCH_DELTA_SECONDS`` (5 s), each with one
``WatchRun`` watcher that set ``stream_deltas``: deltas/s delivered to the watchers, p99 added
latency, lost or reordered deltas (index and count checked per run), the sidecar's CPU and
RSS. Client and sidecar share the machine's two cores; the client is one Python process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, session_pb2, types_pb2

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
LATENCY_DELTAS = int(os.environ.get("BENCH_DELTA_COUNT", "500"))
RUNS = int(os.environ.get("BENCH_DELTA_RUNS", "50"))
RATE = float(os.environ.get("BENCH_DELTA_RATE", "50"))
SECONDS = float(os.environ.get("BENCH_DELTA_SECONDS", "5"))
BURST = int(os.environ.get("BENCH_DELTA_BURST", "10000"))
TURNS = int(os.environ.get("BENCH_DELTA_TURNS", "5"))
#: The deltas a message carries in the batch rows (1: each alone).
PER_MESSAGE = (1, 16, 256)


def start(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (NaN for none)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def session_run(
    stub: Any,
    count: int,
    interval_s: float,
    *,
    run_id: str = "",
    started: asyncio.Event | None = None,
    receipts: list[float] | None = None,
) -> list[float]:
    """One client-LLM session streaming ``count`` deltas ``interval_s`` apart; the latencies
    (seconds) of those it gets back itself (when ``receipts`` is None)."""
    call = stub.Session()
    spec = types_pb2.RunSpec(prompt="stream", run_id=run_id)
    own = receipts is None
    start = session_pb2.SessionStart(spec=spec, client_llm=True, stream_deltas=own)
    await call.write(session_pb2.SessionRequest(start=start))
    latencies: list[float] = []
    sender: asyncio.Task[None] | None = None

    async def send(request_id: str) -> None:
        sent = []
        for index in range(count):
            text = f"{time.perf_counter():.9f} "
            sent.append(text)
            delta = session_pb2.LlmResultDelta(request_id=request_id, index=index, text=text)
            await call.write(session_pb2.SessionRequest(llm_delta=delta))
            await asyncio.sleep(interval_s)
        # The sidecar checks that an answer's deltas spell it.
        result = session_pb2.LlmResult(request_id=request_id, content="".join(sent))
        await call.write(session_pb2.SessionRequest(llm_result=result))

    async for response in call:
        events = [*response.events, *([response.event] if response.HasField("event") else [])]
        now = time.perf_counter()
        for event in events:
            if event.HasField("run_started") and started is not None:
                started.set()
            if event.HasField("llm_delta") and own:
                latencies += [now - float(t) for t in event.llm_delta.text.split()]
            if event.WhichOneof("payload") in ("run_completed", "run_failed", "run_cancelled"):
                await call.done_writing()
        if response.HasField("llm_invocation") and sender is None:
            sender = asyncio.create_task(send(response.llm_invocation.request_id))
    if sender is not None:
        await sender
    return latencies


async def burst_session(stub: Any, count: int, per_message: int) -> int:
    """One client-LLM session sending ``count`` deltas ``per_message`` to a message as fast as
    its stream takes them, and reading them back; how many came back."""
    call = stub.Session()
    spec = types_pb2.RunSpec(prompt="stream")
    start = session_pb2.SessionStart(
        spec=spec, client_llm=True, stream_deltas=True, batch_events=True
    )
    await call.write(session_pb2.SessionRequest(start=start))
    got = 0
    sender: asyncio.Task[None] | None = None

    async def send(request_id: str) -> None:
        for first in range(0, count, per_message):
            deltas = [
                session_pb2.LlmResultDelta(request_id=request_id, index=i, text="tok ")
                for i in range(first, min(count, first + per_message))
            ]
            if len(deltas) == 1:
                request = session_pb2.SessionRequest(llm_delta=deltas[0])
            else:
                request = session_pb2.SessionRequest(
                    llm_deltas=session_pb2.LlmResultDeltas(deltas=deltas)
                )
            await call.write(request)
        result = session_pb2.LlmResult(request_id=request_id, content="tok " * count)
        await call.write(session_pb2.SessionRequest(llm_result=result))

    async for response in call:
        for event in [*response.events, *([response.event] if response.HasField("event") else [])]:
            if event.HasField("llm_delta"):
                got += event.llm_delta.count
            if event.WhichOneof("payload") in ("run_completed", "run_failed", "run_cancelled"):
                if not event.HasField("run_completed"):
                    raise RuntimeError(f"the burst session ended with {event}")
                await call.done_writing()
        if response.HasField("llm_invocation") and sender is None:
            sender = asyncio.create_task(send(response.llm_invocation.request_id))
    if sender is not None:
        await sender
    return got


async def client_burst(target: str, count: int) -> int:
    """The same burst from the Python client's streaming LLM (it batches by itself)."""
    from cleveragents.client import AsyncSidecarClient
    from cleveragents.tool import LLMDelta, LLMRequest, LLMResponse, ResponseDelta

    class Burst:
        async def call(self, request: LLMRequest) -> LLMResponse:
            assert request.deltas is not None
            for _ in range(count):
                request.deltas(ResponseDelta("tok "))
            return LLMResponse("tok " * count)

    got = 0
    async with AsyncSidecarClient(target) as client:
        async for streamed in client.session("stream", llm=Burst(), stream_deltas=True):
            if isinstance(streamed.event, LLMDelta):
                got += streamed.event.count
    return got


async def floor_echo(target: str, count: int) -> int:
    """``count`` deltas' bytes echoed one to a message by the bare bidi echo, written as fast
    as the stream takes them while they are read back."""
    payload = session_pb2.SessionRequest(
        llm_delta=session_pb2.LlmResultDelta(request_id="llm_1", index=count, text="tok ")
    ).SerializeToString()
    async with grpc.aio.insecure_channel(target) as channel:
        method: Any = channel.stream_stream("/floor.Floor/Ping")
        call = method()

        async def write() -> None:
            for _ in range(count):
                await call.write(payload)
            await call.done_writing()

        writer = asyncio.create_task(write())
        got = 0
        while await call.read() is not grpc.aio.EOF:
            got += 1
        await writer
    return got


def fine_cpu_seconds(pid: int) -> float:
    """Process ``pid``'s CPU time to the nanosecond: its live threads' scheduler counters (a
    clock tick, 10 ms, is too coarse for a batched burst)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def cpu_per_unit(pid: int, work: Any) -> float:
    """``work()``'s CPU in process ``pid`` (all threads), in microseconds per unit it returns."""
    began = fine_cpu_seconds(pid)
    units: int = await work()
    return (fine_cpu_seconds(pid) - began) / units * 1e6


async def batch_rows(stub: Any, target: str, pid: int, floor: str, floor_pid: int) -> None:
    """The batch rows: sidecar CPU per delta by deltas per message, in turns with the floor."""
    samples: dict[str, list[float]] = {}
    works: dict[str, Any] = {"floor": (floor_pid, lambda: floor_echo(floor, BURST))}
    for k in PER_MESSAGE:
        works[f"{k}"] = (pid, lambda k=k: burst_session(stub, BURST, k))
    works["client"] = (pid, lambda: client_burst(target, BURST))
    for _, work in works.values():  # warm-up
        await work()
    for _ in range(TURNS):
        for name, (process, work) in works.items():
            samples.setdefault(name, []).append(await cpu_per_unit(process, work))
    med = {name: statistics.median(values) for name, values in samples.items()}
    span = {name: f"{min(v):.1f}-{max(v):.1f}" for name, v in samples.items()}
    print(
        f"client-hosted LLM deltas, a burst of {BURST:,} read back by the session, median of "
        f"{TURNS} turns (target: <= 25 us sidecar CPU a delta when the client batches):"
    )
    print(f"  floor    {med['floor']:6.1f} us CPU a message ({span['floor']}; bare bidi echo, "
          "one delta a message)")  # fmt: skip
    for k in PER_MESSAGE:
        ratio = statistics.median(
            s / f for s, f in zip(samples[f"{k}"], samples["floor"], strict=True)
        )
        print(f"  {k:>3} a message {med[f'{k}']:6.1f} us sidecar CPU a delta ({span[f'{k}']}), "
              f"{ratio:.2f}x the floor's message")  # fmt: skip
    print(f"  Python client {med['client']:6.1f} us sidecar CPU a delta ({span['client']}; "
          "its streaming LLM, batching as writes allow)")  # fmt: skip


async def floor_latency(target: str, count: int, interval_s: float, size: int) -> list[float]:
    async with grpc.aio.insecure_channel(target) as channel:
        method: Any = channel.stream_stream("/floor.Floor/Ping")
        call = method()
        out = []
        for _ in range(count):
            payload = f"{time.perf_counter():.9f} ".encode().ljust(size, b" ")
            await call.write(payload)
            echoed = await call.read()
            out.append(time.perf_counter() - float(echoed.split()[0]))
            await asyncio.sleep(interval_s)
        await call.done_writing()
    return out


async def watch_run(stub: Any, run_id: str) -> tuple[list[float], int, int]:
    """A watcher's delta latencies, how many deltas it got and how many were out of order."""
    latencies: list[float] = []
    got = bad = 0
    expect = 0
    async for response in stub.WatchRun(
        service_pb2.WatchRunRequest(run_id=run_id, stream_deltas=True, batch_events=True)
    ):
        now = time.perf_counter()
        for event in [*response.events, *([response.event] if response.HasField("event") else [])]:
            if event.HasField("llm_delta"):
                delta = event.llm_delta
                bad += delta.index != expect
                expect = delta.index + delta.count
                got += delta.count
                latencies += [now - float(t) for t in delta.text.split()]
    return latencies, got, bad


async def load(stub: Any, pid: int) -> dict[str, float]:
    count = int(RATE * SECONDS)
    began_cpu, began = cpu_seconds(pid), time.perf_counter()

    async def one(index: int) -> tuple[list[float], int, int]:
        run_id = f"load-{index}"
        started = asyncio.Event()
        receipts: list[float] = []
        async with asyncio.TaskGroup() as group:
            producer = group.create_task(
                session_run(
                    stub, count, 1 / RATE, run_id=run_id, started=started, receipts=receipts
                )
            )
            await started.wait()
            watcher = group.create_task(watch_run(stub, run_id))
        del producer
        return watcher.result()

    results = await asyncio.gather(*(one(i) for i in range(RUNS)))
    elapsed, cpu = time.perf_counter() - began, cpu_seconds(pid) - began_cpu
    latencies = [x for r in results for x in r[0]]
    return {
        "runs": RUNS,
        "sent": RUNS * count,
        "delivered": sum(r[1] for r in results),
        "reordered": sum(r[2] for r in results),
        "per_s": sum(r[1] for r in results) / elapsed,
        "p50_ms": pct(latencies, 0.5) * 1e3,
        "p99_ms": pct(latencies, 0.99) * 1e3,
        "cpu_pct": cpu / elapsed * 100,
        "rss_mib": rss_mib(pid),
        "seconds": elapsed,
    }


async def main() -> None:
    sidecar, line = start([str(BIN / "cleveragents-sidecar"), "serve", "--listen", "127.0.0.1:0",
                           "--log-level", "error"])  # fmt: skip
    target = line.rsplit(" ", 1)[1]
    floor, port = start([sys.executable, str(HERE / "floor_server.py")])
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
            await channel.channel_ready()
            await session_run(stub, 20, 0.002)  # warm up
            mine = await session_run(stub, LATENCY_DELTAS, 0.002)
            base = await floor_latency(f"127.0.0.1:{port}", LATENCY_DELTAS, 0.002, 60)
            p50, p99 = pct(mine, 0.5) * 1e3, pct(mine, 0.99) * 1e3
            f50, f99 = pct(base, 0.5) * 1e3, pct(base, 0.99) * 1e3
            print(f"delta latency, one run ({len(mine)} deltas, client -> sidecar -> client):")
            print(f"  sidecar  p50 {p50:.3f} ms  p99 {p99:.3f} ms")
            print(f"  floor    p50 {f50:.3f} ms  p99 {f99:.3f} ms  (bare grpc.aio bidi echo)")
            print(f"  added    p50 {p50 - f50:.3f} ms  p99 {p99 - f99:.3f} ms  "
                  f"(ratio p50 {p50 / f50:.2f}x)")  # fmt: skip
            await batch_rows(stub, target, sidecar.pid, f"127.0.0.1:{port}", floor.pid)
            row = await load(stub, sidecar.pid)
            print(
                f"load: {row['runs']:.0f} runs x {RATE:g} deltas/s x {SECONDS:g} s, one watcher "
                "each (target: 1,000 runs, >= 50,000 deltas/s, p99 added <= 10 ms)"
            )
            print(
                f"  delivered {row['delivered']:.0f}/{row['sent']:.0f} deltas "
                f"({row['per_s']:.0f}/s over {row['seconds']:.1f} s), {row['reordered']:.0f} "
                f"reordered, watcher latency p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms "
                f"(floor p99 {f99:.3f} ms), sidecar CPU {row['cpu_pct']:.0f}%, "
                f"RSS {row['rss_mib']:.0f} MiB"
            )
    finally:
        sidecar.terminate()
        floor.terminate()
        sidecar.wait(15)
        floor.wait(15)


if __name__ == "__main__":
    asyncio.run(main())
