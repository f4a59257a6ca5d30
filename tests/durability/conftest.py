"""Sidecars that keep their run logs in a SQLite file, in process and as killable processes."""

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

StartInProcess = Callable[..., Awaitable[Sidecar]]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.sqlite"


@pytest.fixture
async def start_in_process(db: Path) -> AsyncIterator[StartInProcess]:
    """Start sidecars on ``db``; each is stopped at the end unless the test stopped it."""
    running: list[Sidecar] = []

    async def start(**settings: object) -> Sidecar:
        settings.setdefault("sandbox_roots", (os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],))
        config = SidecarConfig(listen="127.0.0.1:0", event_store=str(db), **settings)  # type: ignore[arg-type]
        sidecar = Sidecar(config)
        await sidecar.start()
        running.append(sidecar)
        return sidecar

    yield start
    for sidecar in running:
        await sidecar.stop(1.0)


@dataclass
class SidecarProcess:
    """A `cleveragents-sidecar serve` process on a SQLite store."""

    process: subprocess.Popen[str]
    address: str

    def kill(self) -> None:
        """``kill -9``: no shutdown, no flush."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


Spawn = Callable[..., SidecarProcess]


@pytest.fixture
def spawn(db: Path) -> Iterator[Spawn]:
    """Start ``serve`` processes on ``db``; keyword arguments are settings, given as their
    environment variables (``resume_runs="false"``)."""
    processes: list[SidecarProcess] = []

    def start(**settings: str) -> SidecarProcess:
        env = dict(os.environ, CLEVERAGENTS_SIDECAR_EVENT_STORE=str(db))
        env.update({f"CLEVERAGENTS_SIDECAR_{k.upper()}": v for k, v in settings.items()})
        command = [
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve",
            "--listen", "127.0.0.1:0", "--log-level", "warning",
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
