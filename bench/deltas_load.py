"""`make bench`, live model output under load: many streaming runs, the load split across processes.

``BENCH_LOAD_RUNS`` runs at once (default 200), each streaming from the loopback SSE fake
provider (``sse_server.py``, ``BENCH_LOAD_PROVIDERS`` processes, default 1) ``BENCH_LOAD_RATE``
chunks/s (50) for ``BENCH_LOAD_SECONDS`` (5 s), each chunk stamped with its write time. The runs
are started and watched by ``BENCH_LOAD_PROCS`` client processes (default 2), each of its share
of runs with a starting ``StreamToolLoop`` (no deltas) and one ``WatchRun`` watcher that set
``stream_deltas`` (and ``BENCH_LOAD_PLAIN`` more watchers without it, default 0). Reported:
deltas/s delivered to the watchers, the added latency from the provider's write (p50/p99), lost
or reordered deltas (per run: the indexes run on without a gap and the counts add up to what
the provider sent), and the sidecar's CPU and RSS over the run.
Run alone: .venv/bin/python bench/deltas_load.py  (``--profile FILE``: the sidecar runs under
cProfile and writes its profile to FILE when it stops).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

if TYPE_CHECKING:  # mypy runs from the repository root; `python bench/X.py` from bench/
    from bench.deltas import cpu_seconds, pct, rss_mib
else:
    from deltas import cpu_seconds, pct, rss_mib

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
RUNS = int(os.environ.get("BENCH_LOAD_RUNS", "200"))
RATE = float(os.environ.get("BENCH_LOAD_RATE", "50"))
SECONDS = float(os.environ.get("BENCH_LOAD_SECONDS", "5"))
PROCS = int(os.environ.get("BENCH_LOAD_PROCS", "2"))
PROVIDERS = int(os.environ.get("BENCH_LOAD_PROVIDERS", "1"))
PLAIN = int(os.environ.get("BENCH_LOAD_PLAIN", "0"))
#: The provider's wait before its first chunk (a model's time to first token): every
#: watcher is there before the first delta, so each delta it gets is a live one.
FIRST_S = float(os.environ.get("BENCH_LOAD_FIRST_S", "2"))
#: This client process's first and last delta received (perf_counter).
RECEIVED = [float("inf"), 0.0]


# -- a client process ----------------------------------------------------------------------------


def events_of(response: Any) -> list[Any]:
    return [*response.events, *([response.event] if response.HasField("event") else [])]


async def watch(stub: Any, run_id: str, deltas: bool) -> tuple[list[float], int, int]:
    """A watcher's delta latencies, how many deltas it got, and how many were out of order or
    missing (none are counted missing for a watcher that joined after the call: it got none)."""
    latencies: list[float] = []
    bad = expect = 0
    request = service_pb2.WatchRunRequest(run_id=run_id, stream_deltas=deltas, batch_events=True)
    async for response in stub.WatchRun(request):
        now = time.perf_counter()
        for event in events_of(response):
            if event.HasField("llm_delta"):
                delta = event.llm_delta
                bad += delta.index != expect
                expect = delta.index + delta.count
                stamps = delta.text.split()
                latencies += [now - float(t) for t in stamps]
                if stamps:
                    RECEIVED[0] = min(RECEIVED[0], now)
                    RECEIVED[1] = max(RECEIVED[1], now)
            elif event.HasField("llm_responded"):
                # A watcher that joined during the call must have got each of its deltas (the
                # first it got holds all so far); one that joined after it got none: late.
                words = len(event.llm_responded.content.split())
                if latencies:
                    bad += words - len(latencies)
    return latencies, len(latencies), bad


async def one_run(stub: Any, run_id: str, profile: str, count: int) -> tuple[list[float], int, int]:
    spec = types_pb2.RunSpec(
        prompt=f"count={count} interval={1 / RATE} first={FIRST_S}",
        run_id=run_id,
        max_iterations=1,
    )
    spec.llm.profile = profile
    starter = stub.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=spec, batch_events=True))
    async with asyncio.TaskGroup() as group:
        first = await starter.read()  # run_started: the run exists
        assert first is not grpc.aio.EOF
        watcher = group.create_task(watch(stub, run_id, True))
        for _ in range(PLAIN):
            group.create_task(watch(stub, run_id, False))
        while (response := await starter.read()) is not grpc.aio.EOF:
            for event in events_of(response):
                if event.HasField("run_failed"):
                    raise RuntimeError(f"run {run_id} failed: {event.run_failed.message}")
    return watcher.result()


async def client_main(target: str, first: int, last: int, providers: int) -> None:
    count = int(RATE * SECONDS)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    async with grpc.aio.insecure_channel(target) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        await channel.channel_ready()
        print("ready", flush=True)
        sys.stdin.readline()  # go
        began = time.perf_counter()
        results = await asyncio.gather(
            *(one_run(stub, f"load-{i}", f"sse{i % providers}", count) for i in range(first, last))
        )
        ended = time.perf_counter()
    latencies = [round(x * 1e3, 3) for r in results for x in r[0]]
    out = {
        "began": RECEIVED[0],
        "ended": RECEIVED[1],
        "wall": ended - began,
        "sent": (last - first) * count,
        "delivered": sum(r[1] for r in results),
        "reordered": sum(r[2] for r in results),
        "late": sum(not r[1] for r in results),
        "cpu_s": time.process_time(),
        "latencies_ms": latencies,
    }
    print(json.dumps(out), flush=True)


# -- the conductor -------------------------------------------------------------------------------


def start(command: list[str], **kwargs: Any) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, **kwargs)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def config(ports: list[str], directory: str) -> Path:
    path = Path(directory) / "sidecar.toml"
    profiles = [
        f'[profiles.sse{i}]\nkind = "openai"\nmodel = "sse-bench"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\napi_key_env = ""\nmax_retries = 0\n'
        for i, port in enumerate(ports)
    ]
    path.write_text("\n".join(profiles))
    return path


def main(profile: str | None) -> dict[str, float]:
    providers = [start([sys.executable, str(HERE / "sse_server.py"), "--uvloop"])
                 for _ in range(PROVIDERS)]  # fmt: skip
    clients: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory() as directory:
        path = config([port for _, port in providers], directory)
        command = [str(BIN / "cleveragents-sidecar"), "serve", "--listen", "127.0.0.1:0",
                   "--log-level", "error", "--config", str(path)]  # fmt: skip
        if profile:
            command = [sys.executable, "-m", "cProfile", "-o", profile, *command]
        sidecar, line = start(command)
        try:
            target = line.rsplit(" ", 1)[1]
            share = -(-RUNS // PROCS)
            for first in range(0, RUNS, share):
                last = min(RUNS, first + share)
                client, ready = start(
                    [sys.executable, __file__, "--client", target, str(first), str(last)],
                    stdin=subprocess.PIPE,
                )
                assert ready == "ready", ready
                clients.append(client)
            began_cpu = cpu_seconds(sidecar.pid)
            for client in clients:
                assert client.stdin is not None
                client.stdin.write("go\n")
                client.stdin.flush()
            rss = 0.0
            outs = []
            for client in clients:
                assert client.stdout is not None
                outs.append(json.loads(client.stdout.readline()))
                rss = max(rss, rss_mib(sidecar.pid))
            cpu = cpu_seconds(sidecar.pid) - began_cpu
            rss = max(rss, rss_mib(sidecar.pid))
            provider_cpu = sum(cpu_seconds(process.pid) for process, _ in providers)
        finally:
            for client in clients:
                client.wait(30)
            sidecar.terminate()
            sidecar.wait(60)
            for process, _ in providers:
                process.terminate()
                process.wait(15)
    # Delivered per second from the first delta received to the last (the runs' starts and
    # the provider's wait before its first chunk are not counted); CPU over the whole run.
    elapsed = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
    wall = max(o["wall"] for o in outs)
    latencies = [x for o in outs for x in o["latencies_ms"]]
    row = {
        "runs": RUNS,
        "sent": sum(o["sent"] for o in outs),
        "delivered": sum(o["delivered"] for o in outs),
        "reordered": sum(o["reordered"] for o in outs),
        "late": sum(o["late"] for o in outs),
        "client_cpu_pct": sum(o["cpu_s"] for o in outs) / wall * 100,
        "provider_cpu_pct": provider_cpu / wall * 100,
        "per_s": sum(o["delivered"] for o in outs) / elapsed,
        "p50_ms": pct(latencies, 0.5),
        "p99_ms": pct(latencies, 0.99),
        "cpu_pct": cpu / wall * 100,
        "cpu_us_per_delta": cpu / max(1, sum(o["delivered"] for o in outs)) * 1e6,
        "rss_mib": rss,
        "seconds": elapsed,
    }
    print(
        f"load through a provider: {RUNS} runs x {RATE:g} deltas/s x {SECONDS:g} s, "
        f"{PROCS} client processes, {PROVIDERS} provider process(es), one delta watcher per run"
        + (f" and {PLAIN} plain watcher(s)" if PLAIN else "")
        + " (target: 1,000 runs, >= 50,000 deltas/s, p99 added <= 10 ms)"
    )
    print(
        f"  delivered {row['delivered']:.0f}/{row['sent']:.0f} deltas ({row['per_s']:.0f}/s over "
        f"{row['seconds']:.1f} s, offered {RUNS * RATE:.0f}/s), {row['reordered']:.0f} lost or "
        f"reordered, {row['late']:.0f} watchers joined after their call; latency from the "
        f"provider's write p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms; sidecar CPU "
        f"{row['cpu_pct']:.0f}% of a core ({row['cpu_us_per_delta']:.0f} µs per delta), "
        f"RSS {row['rss_mib']:.0f} MiB; clients "
        f"{row['client_cpu_pct']:.0f}%, provider {row['provider_cpu_pct']:.0f}%"
    )
    return row


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", nargs=3, metavar=("TARGET", "FIRST", "LAST"))
    parser.add_argument("--profile", metavar="FILE")
    args = parser.parse_args()
    if args.client:
        target, first, last = args.client
        asyncio.run(client_main(target, int(first), int(last), PROVIDERS))
    else:
        main(args.profile)
