"""A burst of 3,000 sessions at once: each one runs or is refused out loud, none is lost."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from cleveragents.toolruntime.v1 import service_pb2_grpc, session_pb2, types_pb2

if TYPE_CHECKING:
    from tests.conftest import ServeSidecar

SESSIONS = 3000
RUN_SLOTS = 1000
CHANNELS = 16
HOLD = [
    {"content": "", "tool_calls": [{"id": "h1", "name": "hold", "arguments": {}}]},
    {"content": "done"},
]


@pytest.fixture
def burst_sidecar(serve_sidecar: ServeSidecar, tmp_path: Path) -> tuple[str, str, Path]:
    """A sidecar process with ``RUN_SLOTS`` run slots and metrics; its address, its metrics
    URL and its log file."""
    log_path = tmp_path / "sidecar.log"
    with log_path.open("w") as log_file:
        sidecar = serve_sidecar(
            "--log-format", "json", "--max-concurrent-runs", str(RUN_SLOTS),
            "--metrics-listen", "127.0.0.1:0", stderr=log_file,
        )  # fmt: skip
    assert sidecar.process.stdout is not None
    metrics = sidecar.process.stdout.readline().strip().rsplit(" ", 1)[1]
    return sidecar.address, metrics, log_path


class Burst:
    """``SESSIONS`` sessions whose runs each call the client tool ``hold``; the client answers
    only once every session has its invocation or its refusal, so admitted runs keep their
    slots for the whole burst."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.settled = 0
        self.all_settled = asyncio.Event()

    def _settle(self) -> None:
        self.settled += 1
        if self.settled == SESSIONS:
            self.all_settled.set()

    async def one(self, stub: Any) -> tuple[str, str]:
        spec = types_pb2.RunSpec(prompt="go")
        spec.llm.script = json.dumps(HOLD)
        start = session_pb2.SessionStart(spec=spec, tools=[types_pb2.ToolSpec(name="hold")])
        call = stub.Session(timeout=120)
        settled = False
        try:
            await call.write(session_pb2.SessionRequest(start=start))
            outcome = "no end"
            while (response := await call.read()) is not grpc.aio.EOF:
                if response.HasField("tool_invocation"):
                    self._settle()
                    settled = True
                    await self.all_settled.wait()
                    result = session_pb2.ToolResult(
                        call_id=response.tool_invocation.call_id, output="{}"
                    )
                    await call.write(session_pb2.SessionRequest(tool_result=result))
                elif response.event.HasField("run_completed"):
                    outcome = "completed"
            return outcome, ""
        except grpc.aio.AioRpcError as exc:
            return exc.code().name, exc.details() or ""
        finally:
            if not settled:
                self._settle()

    async def run(self) -> list[tuple[str, str]]:
        options = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.aio.insecure_channel(self.address, options) for _ in range(CHANNELS)]
        try:
            stubs = [service_pb2_grpc.ToolRuntimeServiceStub(c) for c in channels]
            async with asyncio.timeout(90):
                return await asyncio.gather(
                    *(self.one(stubs[i % CHANNELS]) for i in range(SESSIONS))
                )
        finally:
            for channel in channels:
                await channel.close()


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        name: float(value)
        for name, _, value in (line.partition(" ") for line in text.splitlines())
        if not name.startswith("#")
    }


async def test_every_session_of_a_3000_burst_runs_or_is_refused_logged_and_counted(
    burst_sidecar: tuple[str, str, Path],
) -> None:
    address, metrics_url, log_path = burst_sidecar
    outcomes = await Burst(address).run()

    counts = Counter(code for code, _ in outcomes)
    assert counts == {"completed": RUN_SLOTS, "RESOURCE_EXHAUSTED": SESSIONS - RUN_SLOTS}, counts
    refusals = {details for code, details in outcomes if code == "RESOURCE_EXHAUSTED"}
    assert all("max_concurrent_runs" in details for details in refusals)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    refused_lines = [line for line in lines if line.get("event") == "run refused"]
    assert len(refused_lines) == SESSIONS - RUN_SLOTS
    assert _scrape(metrics_url)["cleveragents_refused_runs_total"] == (SESSIONS - RUN_SLOTS)
