"""A store that stops writing (a file-size limit: the disk is "full") ends the live runs,
turns health NOT_SERVING and refuses runs, then recovers once it can write again."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.tool import RunFailed, ToolCallStarted

NAP: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 60}}]}
]
#: One event larger than the file-size limit set below (its commit cannot succeed), and the
#: run still in flight when that commit fails.
BIG_ECHO: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "x" * 300_000}}]},
    *NAP,
]
SMALL: list[dict[str, Any]] = [{"content": "done"}]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WAIT_S = 30.0


class Served:
    """A `cleveragents-sidecar serve` process on a SQLite store, its stderr in a file."""

    def __init__(self, db: Path, stderr: Path) -> None:
        env = dict(
            os.environ,
            CLEVERAGENTS_SIDECAR_EVENT_STORE=str(db),
            CLEVERAGENTS_SIDECAR_FILE_TOOLS="false",
        )
        command = [
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve",
            "--listen", "127.0.0.1:0", "--log-level", "warning",
        ]  # fmt: skip
        self.stderr = stderr
        with stderr.open("ab") as errors:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line.startswith("cleveragents-sidecar listening on "), line
        self.address = line.rsplit(" ", 1)[1]

    def limit_file_size(self, size: int) -> None:
        """Writes past ``size`` bytes of any file fail in the server (EFBIG): a full disk."""
        resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))

    def error_lines(self) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.stderr.read_text().splitlines() if line]
        return [line for line in lines if line.get("level") == "error"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start() -> Served:
        served = Served(tmp_path / "runs.sqlite", tmp_path / "stderr.log")
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


async def _health_until(channel: grpc.aio.Channel, wanted: int) -> None:
    """Follow ``Health.Watch`` until the server reports ``wanted``."""
    stub: Any = health_pb2_grpc.HealthStub(channel)
    call = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
    async for response in call:
        if response.status == wanted:
            call.cancel()
            return
    raise AssertionError("health watch ended")


@pytest.mark.timeout(120)
async def test_a_store_that_cannot_write_ends_live_runs_refuses_new_ones_and_recovers(
    serve: Any,
) -> None:
    served = serve()
    async with AsyncSidecarClient(served.address) as client:
        # A run in flight (napping in a tool) when the disk fills up.
        napping = client.stream_tool_loop("go", script=NAP, run_id="napping")
        async for streamed in napping:
            if isinstance(streamed.event, ToolCallStarted):
                break
        served.limit_file_size(64 * 1024)

        # This run's event cannot be written: the store fails, and every live run ends.
        with pytest.raises(SidecarRpcError) as big:
            await client.run_tool_loop("go", script=BIG_ECHO, run_id="big", timeout=WAIT_S)
        assert big.value.code == grpc.StatusCode.UNAVAILABLE
        assert "run store failed" in big.value.details
        assert "disk I/O error" in big.value.details  # names the store's own error
        rest = [streamed.event async for streamed in napping]
        assert isinstance(rest[-1], RunFailed), rest
        assert "run store failed (OperationalError: disk I/O error)" in rest[-1].message
        info = await client.get_run("napping")
        assert info.state == "failed"

        channel = grpc.aio.insecure_channel(served.address)
        await _health_until(channel, NOT_SERVING)
        with pytest.raises(SidecarRpcError) as refused:
            await client.run_tool_loop("go", script=SMALL, run_id="refused", timeout=WAIT_S)
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert "new runs are refused until it works again" in refused.value.details
        [error] = served.error_lines()
        assert error["event"].startswith("event store failed")
        assert error["error"] == "OperationalError: disk I/O error"

        # The disk has room again: the store writes what it held, health and runs come back.
        served.limit_file_size(resource.RLIM_INFINITY)
        await _health_until(channel, SERVING)
        result = await client.run_tool_loop("go", script=SMALL, run_id="after", timeout=WAIT_S)
        assert result.content == "done"
        await channel.close()
    served.stop()

    # What the failing store held reached the file once it could write: the runs it ended
    # keep their run_failed across a restart (not the "stopped while live" of a crash).
    again = serve()
    async with AsyncSidecarClient(again.address) as client:
        napped, after = await client.get_run("napping"), await client.get_run("after")
        events = [streamed.event async for streamed in client.watch("napping")]
    assert (napped.state, after.state) == ("failed", "completed")
    assert isinstance(events[-1], RunFailed)
    assert "run store failed" in events[-1].message
