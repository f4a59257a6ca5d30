"""The run stores side by side (memory, a SQLite file, a Redis server): what each costs a run
per iteration, and how many 1,000 Sessions get through a second, in one `make bench` run.

Each store gets a sidecar of its own, started the same way; Redis is Debian's redis-server in
a temporary directory with its append-only file (``appendfsync everysec``, Redis's default
for AOF), on loopback. Stores are measured in turns, so that all see the same machine.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cleveragents.client import AsyncSidecarClient

if TYPE_CHECKING:
    from bench import scenarios_load
    from bench.scenarios_load import Figure
else:
    import scenarios_load
    from scenarios_load import Figure

STORES = ("memory", "sqlite", "redis")
ITERATIONS = 200
SESSIONS = 1000
#: Sessions in flight at once while the 1,000 go through (well under max_concurrent_runs).
SESSION_CONCURRENCY = 100
SESSION_ITERATIONS = 4
REPEATS = 5


def start_redis(directory: Path) -> tuple[subprocess.Popen[str], str]:
    """redis-server on a free loopback port; returns once it says it serves."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("make bench needs redis-server (Debian: apt-get install redis-server)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
        "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--logfile", "",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if "ready to accept connections" in line.lower():
            break
    else:
        raise SystemExit("redis-server did not start")
    process.stdout.close()  # --logfile "" logs to stdout: nothing more is logged at notice
    return process, f"redis://127.0.0.1:{port}/0"


async def stream_iteration_us(client: AsyncSidecarClient) -> float:
    """One StreamToolLoop of ``ITERATIONS`` no-op tool calls: microseconds per iteration."""
    script = scenarios_load.noop_script(ITERATIONS, "noop")
    began = time.perf_counter()
    async for _ in client.stream_tool_loop(
        "go", script=script, max_iterations=ITERATIONS, tool_names=["noop"]
    ):
        pass
    return (time.perf_counter() - began) / ITERATIONS * 1e6


async def sessions_per_s(client: AsyncSidecarClient) -> tuple[float, int]:
    """``SESSIONS`` Sessions with a client-hosted tool, ``SESSION_CONCURRENCY`` at a time:
    Sessions a second, and the events lost."""
    began, lost = time.perf_counter(), 0
    for _ in range(SESSIONS // SESSION_CONCURRENCY):
        tally = await scenarios_load.session_round(client, SESSION_CONCURRENCY, SESSION_ITERATIONS)
        lost += tally.lost + len(tally.errors)
    return SESSIONS / (time.perf_counter() - began), lost


async def compare() -> list[Figure]:
    """Per-iteration cost and 1,000-Session throughput on each store, measured in turns."""
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as scratch:
        redis_process, redis_url = start_redis(Path(scratch))
        settings = {"memory": "", "sqlite": str(Path(scratch) / "runs.sqlite"), "redis": redis_url}
        sidecars = {
            name: scenarios_load.start_sidecar(event_store=settings[name], max_finished_runs="100")
            for name in STORES
        }
        per_iteration: dict[str, list[float]] = {name: [] for name in STORES}
        rates: dict[str, list[float]] = {name: [] for name in STORES}
        lost: dict[str, int] = dict.fromkeys(STORES, 0)
        try:
            clients = {name: AsyncSidecarClient(sidecars[name][1]) for name in STORES}
            for client in clients.values():
                await client.__aenter__()
            for repeat in range(REPEATS + 1):  # the first round warms up
                for name in STORES:
                    cost = await stream_iteration_us(clients[name])
                    rate, missing = await sessions_per_s(clients[name]) if repeat < 3 else (0, 0)
                    if repeat:
                        per_iteration[name].append(cost)
                        if rate:
                            rates[name].append(rate)
                        lost[name] += missing
            for client in clients.values():
                await client.__aexit__(None, None, None)
        finally:
            for process, _ in sidecars.values():
                scenarios_load.stop(process)
            redis_process.terminate()
            redis_process.wait(15)
    figures: list[Figure] = []
    for name in STORES:
        cost, rate = scenarios_load.median(per_iteration[name]), scenarios_load.median(rates[name])
        figures += [
            Figure("stores", f"{name}: stream, per iteration", cost, "us", "", None,
                   per_iteration[name]),
            Figure("stores", f"{name}: 1,000 sessions, sessions/s", rate, "/s", "", None,
                   rates[name]),
            Figure("stores", f"{name}: events lost or failed sessions", lost[name], "", "0",
                   lost[name] == 0),
        ]  # fmt: skip
    return figures


if __name__ == "__main__":
    for figure in asyncio.run(compare()):
        print(f"{figure.name:44} {figure.value:12.1f} {figure.unit}", file=sys.stdout)
