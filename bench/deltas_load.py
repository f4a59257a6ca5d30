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

The floor, measured in turns with the sidecar (``BENCH_LOAD_TURNS`` of each, default 1): the
same streams from the same provider relayed by a bare grpc.aio server (``floor_server.py``'s
``Relay``: aiohttp reads each answer, and each read goes on to one client stream unparsed),
watched by the same client processes: what moving a provider's bytes to a gRPC stream costs in
Python with no logic at all. The ratios are the sidecar's CPU per delta and throughput over
the floor's in the same turn (the median of the turns).
Run alone: .venv/bin/python bench/deltas_load.py  (``--profile FILE``: the sidecar runs under
cProfile and writes its profile to FILE when it stops).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
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
TURNS = int(os.environ.get("BENCH_LOAD_TURNS", "1"))
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


_STAMP = re.compile(rb'"content":"([0-9.]+) "')


async def relayed(channel: Any, url: str, count: int) -> tuple[list[float], int, int]:
    """One answer relayed by the floor: its chunks' latencies (a read may hold several)."""
    content = f"count={count} interval={1 / RATE} first={FIRST_S}"
    body = json.dumps({"model": "sse-bench", "stream": True,
                       "messages": [{"role": "user", "content": content}]})  # fmt: skip
    call = channel.unary_stream("/floor.Floor/Relay")(f"{url}\n{body}".encode())
    latencies: list[float] = []
    async for message in call:
        now = time.perf_counter()
        stamps = _STAMP.findall(message)
        latencies += [now - float(t) for t in stamps]
        if stamps:
            RECEIVED[0] = min(RECEIVED[0], now)
            RECEIVED[1] = max(RECEIVED[1], now)
    return latencies, len(latencies), 0


async def client_main(mode: str, target: str, first: int, last: int, urls: list[str]) -> None:
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
        if mode == "floor":
            runs = [relayed(channel, urls[i % len(urls)], count) for i in range(first, last)]
        else:
            runs = [
                one_run(stub, f"load-{i}", f"sse{i % len(urls)}", count) for i in range(first, last)
            ]
        results = await asyncio.gather(*runs)
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


def measure(
    mode: str, target: str, server: subprocess.Popen[str], urls: list[str], providers: list[int]
) -> dict[str, float]:
    """One turn: every run at once through ``mode`` (``sidecar`` or ``floor``) at ``target``,
    whose process is ``server``."""
    clients: list[subprocess.Popen[str]] = []
    try:
        share = -(-RUNS // PROCS)
        for first in range(0, RUNS, share):
            last = min(RUNS, first + share)
            client, ready = start(
                [sys.executable, __file__, "--client", mode, target, str(first), str(last),
                 *urls],
                stdin=subprocess.PIPE,
            )  # fmt: skip
            assert ready == "ready", ready
            clients.append(client)
        began_cpu = cpu_seconds(server.pid)
        provider_began = sum(cpu_seconds(pid) for pid in providers)
        for client in clients:
            assert client.stdin is not None
            client.stdin.write("go\n")
            client.stdin.flush()
        rss = 0.0
        outs = []
        for client in clients:
            assert client.stdout is not None
            outs.append(json.loads(client.stdout.readline()))
            rss = max(rss, rss_mib(server.pid))
        cpu = cpu_seconds(server.pid) - began_cpu
        rss = max(rss, rss_mib(server.pid))
        provider_cpu = sum(cpu_seconds(pid) for pid in providers) - provider_began
    finally:
        for client in clients:
            client.wait(30)
    # Delivered per second from the first delta received to the last (the runs' starts and
    # the provider's wait before its first chunk are not counted); CPU over the whole run.
    elapsed = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
    wall = max(o["wall"] for o in outs)
    latencies = [x for o in outs for x in o["latencies_ms"]]
    delivered = sum(o["delivered"] for o in outs)
    return {
        "runs": RUNS,
        "sent": sum(o["sent"] for o in outs),
        "delivered": delivered,
        "reordered": sum(o["reordered"] for o in outs),
        "late": sum(o["late"] for o in outs),
        "client_cpu_pct": sum(o["cpu_s"] for o in outs) / wall * 100,
        "provider_cpu_pct": provider_cpu / wall * 100,
        "per_s": delivered / elapsed,
        "p50_ms": pct(latencies, 0.5),
        "p99_ms": pct(latencies, 0.99),
        "cpu_pct": cpu / wall * 100,
        "cpu_us_per_delta": cpu / max(1, delivered) * 1e6,
        "rss_mib": rss,
        "seconds": elapsed,
    }


def main(profile: str | None) -> dict[str, float]:
    providers = [start([sys.executable, str(HERE / "sse_server.py"), "--uvloop"])
                 for _ in range(PROVIDERS)]  # fmt: skip
    urls = [f"http://127.0.0.1:{port}/v1/chat/completions" for _, port in providers]
    pids = [process.pid for process, _ in providers]
    floor, floor_port = start([sys.executable, str(HERE / "floor_server.py")])
    rows: list[dict[str, float]] = []
    floors: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as directory:
        path = config([port for _, port in providers], directory)
        command = [str(BIN / "cleveragents-sidecar"), "serve", "--listen", "127.0.0.1:0",
                   "--log-level", "error", "--config", str(path)]  # fmt: skip
        if profile:
            command = [sys.executable, "-m", "cProfile", "-o", profile, *command]
        sidecar, line = start(command)
        try:
            target = line.rsplit(" ", 1)[1]
            for _ in range(TURNS):  # in turns, so that both see the machine's moods
                floors.append(measure("floor", f"127.0.0.1:{floor_port}", floor, urls, pids))
                rows.append(measure("sidecar", target, sidecar, urls, pids))
        finally:
            for process in (sidecar, floor, *(p for p, _ in providers)):
                process.terminate()
                process.wait(60)
    row = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    base = {key: statistics.median(r[key] for r in floors) for key in floors[0]}
    row["floor_cpu_us_per_delta"] = base["cpu_us_per_delta"]
    row["floor_per_s"] = base["per_s"]
    row["floor_p50_ms"], row["floor_p99_ms"] = base["p50_ms"], base["p99_ms"]
    row["cpu_ratio"] = statistics.median(
        r["cpu_us_per_delta"] / f["cpu_us_per_delta"] for r, f in zip(rows, floors, strict=True)
    )
    print(
        f"load through a provider: {RUNS} runs x {RATE:g} deltas/s x {SECONDS:g} s, "
        f"{PROCS} client processes, {PROVIDERS} provider process(es), one delta watcher per run"
        + (f" and {PLAIN} plain watcher(s)" if PLAIN else "")
        + f"; median of {TURNS} turn(s) (targets: <= 30 us sidecar CPU a delta, "
        ">= 25,000 deltas/s on a core, p99 added <= 10 ms)"
    )
    for name, r in (("sidecar", row), ("floor", base)):
        print(
            f"  {name:8} delivered {r['delivered']:.0f}/{r['sent']:.0f} deltas "
            f"({r['per_s']:.0f}/s over {r['seconds']:.1f} s, offered {RUNS * RATE:.0f}/s), "
            f"{r['reordered']:.0f} lost or reordered, {r['late']:.0f} watchers late; latency "
            f"from the provider's write p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms; "
            f"CPU {r['cpu_pct']:.0f}% of a core ({r['cpu_us_per_delta']:.0f} us a delta), "
            f"RSS {r['rss_mib']:.0f} MiB; clients {r['client_cpu_pct']:.0f}%, provider "
            f"{r['provider_cpu_pct']:.0f}%"
        )
    print(
        f"  sidecar against the floor (a bare aiohttp -> grpc.aio relay): CPU a delta "
        f"{row['cpu_ratio']:.2f}x, deltas/s {row['per_s'] / base['per_s']:.2f}x"
    )
    return row


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", nargs="+", metavar="MODE TARGET FIRST LAST URL")
    parser.add_argument("--profile", metavar="FILE")
    args = parser.parse_args()
    if args.client:
        mode, target, first, last, *urls = args.client
        asyncio.run(client_main(mode, target, int(first), int(last), urls))
    else:
        main(args.profile)
