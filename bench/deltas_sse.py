"""`make bench`, live model output through a provider: from the provider's byte to the client.

A loopback OpenAI-shaped SSE endpoint (``sse_server.py``, its own process) streams
``BENCH_SSE_COUNT`` chunks (500) 2 ms apart, each stamped with its write time. The sidecar
row: a sidecar whose ``sse`` profile (``kind = "openai"``, streaming) points at it runs one
``StreamToolLoop`` with ``stream_deltas``, and the client stamps each delta as it arrives
(provider -> sidecar's aiohttp and SSE parse -> runtime -> gRPC -> client). The floor: the
same stream read directly by an ``aiohttp`` client in this process, with the same SSE decoder
the sidecar uses (``cleveragents.providers.sse``). Both are measured in the same run, in turns.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import grpc

from cleveragents.providers.sse import SSEDecoder
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

if TYPE_CHECKING:  # mypy runs from the repository root; `python bench/X.py` from bench/
    from bench.deltas import pct
else:
    from deltas import pct

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
COUNT = int(os.environ.get("BENCH_SSE_COUNT", "500"))
INTERVAL_S = 0.002


def sse_config(port: int, directory: str) -> Path:
    """A sidecar config whose ``sse`` profile streams from the fake provider on ``port``."""
    path = Path(directory) / "sidecar.toml"
    path.write_text(
        "[profiles.sse]\n"
        'kind = "openai"\n'
        'model = "sse-bench"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\n'
        'api_key_env = ""\n'
        "max_retries = 0\n"
    )
    return path


def start(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def events_of(response: Any) -> list[Any]:
    return [*response.events, *([response.event] if response.HasField("event") else [])]


async def through_sidecar(stub: Any, count: int, interval_s: float) -> list[float]:
    """One streaming run of the ``sse`` profile: each delta's latency from its chunk's write."""
    spec = types_pb2.RunSpec(prompt=f"count={count} interval={interval_s}", max_iterations=1)
    spec.llm.profile = "sse"
    request = service_pb2.StreamToolLoopRequest(spec=spec, stream_deltas=True, batch_events=True)
    latencies: list[float] = []
    async for response in stub.StreamToolLoop(request):
        now = time.perf_counter()
        for event in events_of(response):
            if event.HasField("llm_delta"):
                latencies += [now - float(t) for t in event.llm_delta.text.split()]
            elif event.HasField("run_failed"):
                raise RuntimeError(f"the SSE run failed: {event.run_failed.message}")
    return latencies


async def direct(
    client: aiohttp.ClientSession, url: str, count: int, interval_s: float
) -> list[float]:
    """The same stream read by a client of its own: the floor."""
    body = {
        "model": "sse-bench",
        "stream": True,
        "messages": [{"role": "user", "content": f"count={count} interval={interval_s}"}],
    }
    latencies: list[float] = []
    decoder = SSEDecoder(1 << 24)
    async with client.post(url, data=json.dumps(body).encode()) as response:
        async for chunk in response.content.iter_any():
            now = time.perf_counter()
            for event in decoder.feed(chunk):
                if event.data == "[DONE]":
                    return latencies
                for choice in json.loads(event.data).get("choices", []):
                    text = choice.get("delta", {}).get("content") or ""
                    latencies += [now - float(t) for t in text.split()]
    return latencies


async def latency_row() -> dict[str, float]:
    provider, port = start([sys.executable, str(HERE / "sse_server.py")])
    with tempfile.TemporaryDirectory() as directory:
        config = sse_config(int(port), directory)
        command = [str(BIN / "cleveragents-sidecar"), "serve", "--listen", "127.0.0.1:0",
                   "--log-level", "error", "--config", str(config)]  # fmt: skip
        sidecar, line = start(command)
        try:
            target = line.rsplit(" ", 1)[1]
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            async with (
                grpc.aio.insecure_channel(target) as channel,
                aiohttp.ClientSession() as http,
            ):
                stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
                await channel.channel_ready()
                await through_sidecar(stub, 20, INTERVAL_S)  # warm up both
                await direct(http, url, 20, INTERVAL_S)
                mine: list[float] = []
                base: list[float] = []
                for _ in range(2):  # alternate, so that both see the machine's moods
                    mine += await through_sidecar(stub, COUNT // 2, INTERVAL_S)
                    base += await direct(http, url, COUNT // 2, INTERVAL_S)
        finally:
            sidecar.terminate()
            provider.terminate()
            sidecar.wait(15)
            provider.wait(15)
    p50, p99 = pct(mine, 0.5) * 1e3, pct(mine, 0.99) * 1e3
    f50, f99 = pct(base, 0.5) * 1e3, pct(base, 0.99) * 1e3
    print(f"delta latency through a provider ({len(mine)} SSE chunks 2 ms apart, provider's "
          "write -> client's delta):")  # fmt: skip
    print(f"  sidecar  p50 {p50:.3f} ms  p99 {p99:.3f} ms  (openai profile, stream_deltas)")
    print(f"  floor    p50 {f50:.3f} ms  p99 {f99:.3f} ms  (the same SSE read by aiohttp directly)")
    print(f"  added    p50 {p50 - f50:.3f} ms  p99 {p99 - f99:.3f} ms  "
          f"(ratio p50 {p50 / f50:.2f}x, p99 {p99 / f99:.2f}x)")  # fmt: skip
    return {"p50_ms": p50, "p99_ms": p99, "floor_p50_ms": f50, "floor_p99_ms": f99}


if __name__ == "__main__":
    asyncio.run(latency_row())
