"""Sidecars that keep their run logs in a durable store, in process and as killable processes.

``start_in_process`` and ``spawn`` run each test on every durable store (the store contract:
a SQLite file, and a Redis server started for the test); ``start_on_sqlite`` is for the tests
that look inside the SQLite file itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cleveragents.sidecar import Sidecar, SidecarConfig
from tests.redis_server import RedisServer

StartInProcess = Callable[..., Awaitable[Sidecar]]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.sqlite"


@pytest.fixture(params=["sqlite", "redis"])
def event_store(request: pytest.FixtureRequest, db: Path, tmp_path: Path) -> Iterator[str]:
    """The ``event_store`` setting of one durable store: a SQLite file, or a Redis server
    (with an append-only file, so that it survives being killed like the file does)."""
    if request.param == "sqlite":
        yield str(db)
        return
    server = RedisServer(tmp_path / "redis", appendfsync="everysec").start()
    yield server.url
    server.stop()


def _starter(event_store: str) -> tuple[StartInProcess, list[Sidecar]]:
    running: list[Sidecar] = []

    async def start(**settings: object) -> Sidecar:
        settings.setdefault("sandbox_roots", (os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],))
        config = SidecarConfig(listen="127.0.0.1:0", event_store=event_store, **settings)
        sidecar = Sidecar(config)
        await sidecar.start()
        running.append(sidecar)
        return sidecar

    return start, running


@pytest.fixture
async def start_in_process(event_store: str) -> AsyncIterator[StartInProcess]:
    """Start sidecars on ``event_store``; each is stopped at the end unless the test stopped it."""
    start, running = _starter(event_store)
    yield start
    for sidecar in running:
        await sidecar.stop(1.0)


@pytest.fixture
async def start_on_sqlite(db: Path) -> AsyncIterator[StartInProcess]:
    """Start sidecars on the SQLite file ``db``; each is stopped at the end."""
    start, running = _starter(str(db))
    yield start
    for sidecar in running:
        await sidecar.stop(1.0)


@dataclass
class SidecarProcess:
    """A `cleveragents-sidecar serve` process on a durable store."""

    process: subprocess.Popen[str]
    address: str

    def kill(self) -> None:
        """``kill -9``: no shutdown, no flush."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


Spawn = Callable[..., SidecarProcess]


@pytest.fixture
def spawn(event_store: str) -> Iterator[Spawn]:
    """Start ``serve`` processes on ``event_store``; keyword arguments are settings, given as
    their environment variables (``resume_runs="false"``); ``listen`` the address (a free
    port by default; a restarted one may take its predecessor's)."""
    processes: list[SidecarProcess] = []

    def start(listen: str = "127.0.0.1:0", **settings: str) -> SidecarProcess:
        # The same id each time: a restarted sidecar takes its own live runs back at once.
        env = dict(
            os.environ,
            CLEVERAGENTS_SIDECAR_EVENT_STORE=event_store,
            CLEVERAGENTS_SIDECAR_SIDECAR_ID="durability-sidecar",
        )
        env.update({f"CLEVERAGENTS_SIDECAR_{k.upper()}": v for k, v in settings.items()})
        command = [
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve",
            "--listen", listen, "--log-level", "warning",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("cleveragents-sidecar listening on "), line
        started = SidecarProcess(process, line.rsplit(" ", 1)[1])
        processes.append(started)
        return started

    yield start
    for started in processes:
        if started.process.poll() is None:
            started.process.kill()
            started.process.wait(10)
