"""`make bench`'s containment figures: what three memory attacks of issue 30 cost a real sidecar.

Each starts its own sidecar process (default settings unless said) and reports how much its
memory grew, with the issue's own figures (what it measured before the bounds in brackets):

- *hosted ids*: a client-hosted LLM streams 160 deltas, each with a 2 MiB ``tool_call_id``,
  under ``max_message_bytes`` of 4 MiB (``VmHWM`` less ``VmRSS`` before; +334 MiB);
- *provider flood*: a loopback Chat Completions server streams 192 MiB of text (``VmHWM``
  growth; +1.33 GiB), the time to the run's failure and the bytes the server got to send;
- *stalled followers*: one identity opens 240 ``FollowRun`` streams of a run whose first event
  is 4 MiB, with the smallest windows its gRPC may grant, and never reads them (``VmRSS``
  growth once all but 16 have been dropped, ``watcher_stall_s`` of 1 s, or after 120 s;
  +966 MiB).

Prints a table and writes JSON to bench/results/. ``BENCH_CONTAINMENT`` (comma separated:
``hosted``, ``flood``, ``followers``) picks the rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from cleveragents.client import AsyncSidecarClient, RunFailedError
from cleveragents.client.exchange import run_spec
from cleveragents.toolruntime.v1 import service_pb2_grpc, session_pb2

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024
ROWS = os.environ.get("BENCH_CONTAINMENT", "hosted,flood,followers").split(",")
FOLLOWERS = 240
#: The tests' observer that opens FollowRun streams and never reads them.
OBSERVER = HERE.parent / "tests" / "load" / "stalled_observer.py"


class Sidecar:
    """A ``serve`` process with ``settings`` as its environment settings; its log on a pipe."""

    def __init__(self, *flags: str, **settings: object) -> None:
        env = dict(os.environ, CLEVERAGENTS_SIDECAR_FILE_TOOLS="false")
        env.update({f"CLEVERAGENTS_SIDECAR_{k.upper()}": str(v) for k, v in settings.items()})
        command = [
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0",
            "--log-level", "warning", *flags,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip().rsplit(" ", 1)[1]

    def kib(self, field: str = "VmRSS") -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise LookupError(field)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(15)


async def hosted_ids() -> dict[str, Any]:
    sidecar = Sidecar(max_message_bytes=4 * MIB)
    before = sidecar.kib()
    outcome = "completed"
    try:
        async with grpc.aio.insecure_channel(sidecar.address) as channel:
            call: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()
            start = session_pb2.SessionStart(spec=run_spec("go"), client_llm=True)
            start.stream_deltas = True
            await call.write(session_pb2.SessionRequest(start=start))

            async def stream(request_id: str) -> None:
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    for index in range(160):
                        delta = session_pb2.LlmResultDelta(
                            request_id=request_id, index=index, tool_call_index=index,
                            tool_call_id=chr(97 + index % 26) * (2 * MIB),
                        )  # fmt: skip
                        await call.write(session_pb2.SessionRequest(llm_delta=delta))
                    answer = session_pb2.LlmResult(request_id=request_id, error="all sent")
                    await call.write(session_pb2.SessionRequest(llm_result=answer))

            async with asyncio.timeout(300), asyncio.TaskGroup() as group:
                async for response in call:
                    if response.HasField("llm_invocation"):
                        group.create_task(stream(response.llm_invocation.request_id))
                    events = [
                        *response.events,
                        *([response.event] if response.HasField("event") else []),
                    ]
                    failed = [e.run_failed for e in events if e.HasField("run_failed")]
                    if failed:
                        outcome = failed[0].message.partition("SidecarError: ")[2][:70]
                        break
        return {"grown_mib": (sidecar.kib("VmHWM") - before) / 1024, "outcome": outcome}
    finally:
        sidecar.stop()


async def provider_flood(tmp: Path) -> dict[str, Any]:
    sent = 0
    piece = json.dumps(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "x" * 65536}}],
        }
    ).encode()
    data = b"data: " + piece + b"\n\n"
    chunk = b"%x\r\n%s\r\n" % (len(data), data)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(x.split(b":")[1])
            for x in head.split(b"\r\n")
            if x.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            while sent < 192 * MIB:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = tmp / "flood.toml"
    config.write_text(
        f'[profiles.gpt]\nkind = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'api_key_env = ""\nmax_retries = 0\ntimeout = 60\n'
    )
    sidecar = Sidecar("--config", str(config))
    before = sidecar.kib()
    began = time.perf_counter()
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            try:
                await client.run_tool_loop("go", profile="gpt", timeout=300)
                outcome = "completed"
            except RunFailedError as error:
                said = error.details.partition("HTTP 200: ")[2] or error.details
                outcome = f"{error.code.name}: {said[:70]}"
        took = time.perf_counter() - began
        await asyncio.sleep(1)  # the server's next writes find the socket closed
        return {
            "grown_mib": (sidecar.kib("VmHWM") - before) / 1024, "seconds": round(took, 2),
            "server_sent_mib": round(sent / MIB, 1), "outcome": outcome,
        }  # fmt: skip
    finally:
        sidecar.stop()
        server.close()


def _start_observer(address: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(OBSERVER), address, "", str(FOLLOWERS)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def _wait_for_drops(sidecar: Sidecar, count: int, deadline: float) -> int:
    log, dropped = sidecar.process.stderr, 0
    assert log is not None
    os.set_blocking(log.fileno(), False)
    while dropped < count and time.monotonic() < deadline:
        line = log.readline()
        if not line:
            time.sleep(0.05)
            continue
        dropped += line.startswith("{") and json.loads(line).get("event") == "watcher dropped"
    return dropped


async def stalled_followers() -> dict[str, Any]:
    sidecar = Sidecar(watcher_stall_s=1)
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            await client.run_tool_loop("p" * (4 * MIB), run_id="big")
        before = sidecar.kib()
        observer = _start_observer(sidecar.address)
        try:
            dropped = await asyncio.to_thread(
                _wait_for_drops, sidecar, FOLLOWERS - 16, time.monotonic() + 120
            )
            grown = (sidecar.kib() - before) / 1024
        finally:
            observer.kill()
            observer.wait(15)
        return {"grown_mib": grown, "dropped": dropped}
    finally:
        sidecar.stop()


async def main() -> None:
    results: dict[str, Any] = {}
    tmp = HERE / "results"
    tmp.mkdir(exist_ok=True)
    if "hosted" in ROWS:
        results["hosted ids (160 x 2 MiB, limit 4 MiB)"] = await hosted_ids()
    if "flood" in ROWS:
        results["provider flood (192 MiB)"] = await provider_flood(tmp)
    if "followers" in ROWS:
        results[f"stalled followers ({FOLLOWERS}, 4 MiB first event)"] = await stalled_followers()
    for name, row in results.items():
        print(
            f"{name:45} "
            + "  ".join(
                f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
    (tmp / "containment.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
