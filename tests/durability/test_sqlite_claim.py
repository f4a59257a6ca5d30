"""A SQLite run store belongs to one sidecar at a time: a second sidecar started on the file
while the first serves refuses to start, naming the holder, instead of resuming the first
one's live runs (and running their tools a second time)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import ConfigError
from cleveragents.tool import RunCompleted, ToolCallStarted
from tests.conftest import ServeSidecar

from .conftest import StartInProcess
from .test_resume import LONG_S, gated_tools

#: Two calls of a tool that is not safe to run twice; the first waits for the release file.
TWICE: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "w1", "name": "wait_plain", "arguments": {"tag": "first"}}]},
    {"tool_calls": [{"id": "w2", "name": "wait_plain", "arguments": {"tag": "second"}}]},
    {"content": "done"},
]


async def test_a_second_sidecar_on_a_live_sqlite_store_exits_naming_the_holder(
    serve_sidecar: ServeSidecar, tmp_path: Path
) -> None:
    config, gate = gated_tools(tmp_path)
    store = tmp_path / "runs.sqlite"
    first = serve_sidecar(config=config, event_store=store)
    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        async for streamed in client.stream_tool_loop(
            "go", script=TWICE, run_id="charged", detach=True
        ):
            if isinstance(streamed.event, ToolCallStarted):
                break  # w1 runs on the first sidecar
        env = dict(
            os.environ,
            CLEVERAGENTS_SIDECAR_CONFIG=str(config),
            CLEVERAGENTS_SIDECAR_EVENT_STORE=str(store),
            CLEVERAGENTS_SIDECAR_FILE_TOOLS="false",
        )
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert second.stdout is not None
        line = await second.stdout.readline()  # listening, or its exit
        if line:  # it serves: let both run on, to show what that does
            (gate / "release").touch()
            await asyncio.sleep(5)
            second.kill()
            await second.wait()
            ran = sorted(p.name for p in gate.iterdir())
            raise AssertionError(f"the second sidecar served the same store ({line!r}); ran: {ran}")
        _, stderr = await second.communicate()
        err = stderr.decode()
        (gate / "release").touch()
        log = [streamed.event async for streamed in client.watch("charged")]
    assert second.returncode == 2, err
    assert str(store) in err
    assert "is in use by another sidecar" in err
    assert f"pid {first.process.pid}" in err
    assert isinstance(log[-1], RunCompleted)
    assert sorted(p.name for p in gate.glob("started-*")) == [
        "started-first-1",
        "started-second-1",
    ]


async def test_the_store_file_is_free_again_once_its_sidecar_stops(
    start_on_sqlite: StartInProcess,
) -> None:
    first = await start_on_sqlite()
    with pytest.raises(ConfigError, match=rf"is in use by another sidecar \(pid {os.getpid()} "):
        await start_on_sqlite()
    await first.stop(1.0)
    second = await start_on_sqlite()
    assert second.address
