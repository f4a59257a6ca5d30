"""`make bench`, HTTP stacks side by side: the CPU each spends per event of a provider's stream.

The candidates for the providers' streaming path read the same answers from the loopback
provider (``sse_server.py``, its own process, on uvloop): ``BENCH_STACK_RUNS`` streams at once
(200), each ``BENCH_STACK_COUNT`` chunks (100) of the recorded OpenAI or Anthropic shape,
either paced (``BENCH_STACK_RATE`` chunks/s, 50: one event a read, as providers send them) or
as a burst (the whole answer in one write). Each candidate runs in a process of its own on
uvloop, as the sidecar does, and parses every event's JSON with the same parser; the figure
is that process's CPU (all threads: some stacks read in threads of their own) per event, the
median over ``BENCH_STACK_ROUNDS`` rounds (3) taken in turns, and its ratio to the stack the
providers use. A stack that is not installed is skipped (say which to install in
``BENCH_STACKS``, e.g. ``httpx2,aiohttp,pyreqwest,curl_cffi,niquests``).

Every candidate but ``httpx2 EventSource`` splits events with the providers' own decoder
(``cleveragents.providers.sse``), read by read, so the rows differ by the HTTP layer alone;
``httpx2 raw`` is httpx2 with that decoder, which separates its SSE parser from its HTTP layer.
Run alone: .venv/bin/python bench/http_stacks.py  (``--stack NAME``: one reading process).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from cleveragents.providers.sse import SSEDecoder

HERE = Path(__file__).parent
RUNS = int(os.environ.get("BENCH_STACK_RUNS", "200"))
COUNT = int(os.environ.get("BENCH_STACK_COUNT", "100"))
RATE = float(os.environ.get("BENCH_STACK_RATE", "50"))
ROUNDS = int(os.environ.get("BENCH_STACK_ROUNDS", "3"))
#: The stack the providers use: the others' ratios are to it.
SHIPPED = "aiohttp"
#: Each candidate: the module it needs, and how it reads one stream's bytes (or events).
STACKS = {
    "floor: socket reads": "asyncio",
    "httpx2 EventSource": "httpx2",
    "httpx2 raw": "httpx2",
    "aiohttp": "aiohttp",
    "pyreqwest": "pyreqwest",
    "curl_cffi": "curl_cffi",
    "niquests": "niquests",
}
WANTED = [s for s in os.environ.get("BENCH_STACKS", "").split(",") if s]
HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}

#: Reads one stream: its chunks of bytes (httpx2's own SSE parser: its events' data).
Reader = Callable[[str, bytes], AsyncIterator[Any]]


async def _stack(name: str, runs: int) -> tuple[Reader, Callable[[], Any]]:
    """What reads a stream with stack ``name``, and what closes the stack's client. The
    stacks are not all dependencies: imported by name, untyped (mypy passes either way)."""
    if name.startswith("httpx2"):
        httpx2: Any = importlib.import_module("httpx2")
        client = httpx2.AsyncClient(timeout=None, limits=httpx2.Limits(max_connections=None))

        async def events(url: str, body: bytes) -> AsyncIterator[Any]:
            async with client.stream("POST", url, content=body, headers=HEADERS) as response:
                if name == "httpx2 raw":
                    async for chunk in response.aiter_raw():
                        yield chunk
                    return
                response.encoding = "utf-8"
                async for event in httpx2.EventSource(response):
                    yield event.data

        return events, client.aclose
    if name == "aiohttp":
        aiohttp: Any = importlib.import_module("aiohttp")
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def chunks(url: str, body: bytes) -> AsyncIterator[Any]:
            async with session.post(url, data=body, headers=HEADERS) as response:
                async for chunk in response.content.iter_any():
                    yield chunk

        return chunks, session.close
    if name == "pyreqwest":
        builder: Any = importlib.import_module("pyreqwest.client").ClientBuilder
        rclient = builder().max_connections(None).build()

        async def rchunks(url: str, body: bytes) -> AsyncIterator[Any]:
            request = rclient.post(url).headers(HEADERS).body_bytes(body).build_streamed()
            async with request as response:
                reader = response.body_reader
                while (chunk := await reader.read_chunk()) is not None:
                    yield bytes(chunk)

        return rchunks, rclient.close
    if name == "curl_cffi":
        curl: Any = importlib.import_module("curl_cffi.requests")
        csession = curl.AsyncSession(max_clients=runs)

        async def cchunks(url: str, body: bytes) -> AsyncIterator[Any]:
            response = await csession.post(url, data=body, headers=HEADERS, stream=True)
            try:
                async for chunk in response.aiter_content():
                    yield chunk
            finally:
                await response.aclose()

        return cchunks, csession.close
    if name == "niquests":
        niquests: Any = importlib.import_module("niquests")
        nsession = niquests.AsyncSession(pool_connections=1, pool_maxsize=runs)

        async def nchunks(url: str, body: bytes) -> AsyncIterator[Any]:
            response = await nsession.post(url, data=body, headers=HEADERS, stream=True)
            async for chunk in await response.iter_content(None):
                yield chunk

        return nchunks, nsession.close
    if name == "floor: socket reads":
        return _socket_reads, lambda: None
    raise ValueError(name)


async def _socket_reads(url: str, body: bytes) -> AsyncIterator[bytes]:
    """The floor: the same request on a connection of its own and each read's bytes as they
    come, chunk-size lines and all (not SSE fields, so the decoder skips them), until the
    body's last chunk: what is left of a read once no HTTP is parsed."""
    host, _, rest = url.removeprefix("http://").partition("/")
    address, _, port = host.partition(":")
    reader, writer = await asyncio.open_connection(address, int(port))
    head = f"POST /{rest} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    try:
        while chunk := await reader.read(65536):
            yield chunk
            if chunk.endswith(b"\r\n0\r\n\r\n"):
                return
    finally:
        writer.close()


async def read_streams(name: str, url: str, shape: str, interval: float) -> dict[str, float]:
    """Read ``RUNS`` streams at once with stack ``name``; its CPU per event."""
    reader, close = await _stack(name, RUNS)
    decoded = name == "httpx2 EventSource"

    async def one(count: int) -> int:
        content = f"count={count} interval={interval} shape={shape}"
        message = {"role": "user", "content": content}
        body = json.dumps({"model": "m", "stream": True, "messages": [message]}).encode()
        seen = 0
        if decoded:
            async for data in reader(url, body):
                if data != "[DONE]":
                    json.loads(data)
                seen += 1
            return seen
        decoder = SSEDecoder(16 * 1024 * 1024)
        async for chunk in reader(url, body):
            for event in decoder.feed(chunk):
                if event.data != "[DONE]":
                    json.loads(event.data)
                seen += 1
        return seen

    await asyncio.gather(*(one(2) for _ in range(RUNS)))  # connections open, code warm
    began_cpu, began = time.process_time(), time.perf_counter()
    events = sum(await asyncio.gather(*(one(COUNT) for _ in range(RUNS))))
    cpu, wall = time.process_time() - began_cpu, time.perf_counter() - began
    closing = close()
    if asyncio.iscoroutine(closing):
        await closing
    return {"us_per_event": cpu / events * 1e6, "events": events, "wall_s": wall}


# -- the conductor ---------------------------------------------------------------------------


def available() -> list[str]:
    names = [n for n in STACKS if not WANTED or n in WANTED or STACKS[n] in WANTED]
    return [n for n in names if importlib.util.find_spec(STACKS[n]) is not None]


def one_round(name: str, url: str, shape: str, interval: float) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--stack", name, url, shape, str(interval)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(json.loads(out)["us_per_event"])


def compare() -> dict[str, dict[str, float]]:
    """Every available stack's CPU per event in each case (paced and burst, both shapes)."""
    provider = subprocess.Popen(
        [sys.executable, str(HERE / "sse_server.py"), "--uvloop"], stdout=subprocess.PIPE, text=True
    )
    assert provider.stdout is not None
    url = f"http://127.0.0.1:{provider.stdout.readline().strip()}/v1/chat/completions"
    stacks = available()
    cases = [("openai", 1 / RATE), ("anthropic", 1 / RATE), ("openai", 0.0)]
    samples: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(ROUNDS):
            for shape, interval in cases:
                case = f"{shape} {'paced' if interval else 'burst'}"
                for name in stacks:  # in turns: each round sees the machine as the others do
                    samples.setdefault((case, name), []).append(
                        one_round(name, url, shape, interval)
                    )
    finally:
        provider.terminate()
        provider.wait(15)
    table: dict[str, dict[str, float]] = {}
    for (case, name), values in samples.items():
        table.setdefault(case, {})[name] = statistics.median(values)
    report(table, stacks)
    return table


def report(table: dict[str, dict[str, float]], stacks: list[str]) -> None:
    print(
        f"HTTP stacks for a provider's stream: CPU per event of the reading process ({RUNS} "
        f"streams at once x {COUNT} events, JSON parsed; median of {ROUNDS} rounds in turns)"
    )
    cases = list(table)
    print(f"  {'stack':20}" + "".join(f"{case:>24}" for case in cases))
    for name in stacks:
        cells = []
        for case in cases:
            value, base = table[case].get(name), table[case].get(SHIPPED)
            ratio = f" ({value / base:.2f}x)" if value and base else ""
            cells.append(f"{value:.1f} us{ratio}" if value else "-")
        mark = "  <- the providers'" if name == SHIPPED else ""
        print(f"  {name:20}" + "".join(f"{cell:>24}" for cell in cells) + mark)
    absent = sorted({STACKS[n] for n in STACKS if n not in stacks and (not WANTED or n in WANTED)})
    if absent:
        print(f"  not installed, so not measured: {', '.join(absent)} (.venv/bin/pip install them)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--stack", nargs=4, metavar=("NAME", "URL", "SHAPE", "INTERVAL"))
    args = parser.parse_args()
    if args.stack:
        import uvloop

        name, url, shape, interval = args.stack
        print(json.dumps(uvloop.run(read_streams(name, url, shape, float(interval)))))
    else:
        compare()
