"""Fixtures every test area shares: a ``cleveragents-sidecar serve`` process of the test's own,
for the tests that measure a real server (its RSS from ``/proc``) or put it under load."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import structlog

from tests.redis_server import RedisServer

_LISTENING = "cleveragents-sidecar listening on "
#: Set for every sidecar process the tests start (they inherit the environment).
SANDBOX_ROOTS_ENV = "CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"


def pytest_configure(config: pytest.Config) -> None:
    """Let the processes the tests start be interrupted: a suite started in the background by
    a shell without job control (``make test &`` in a script) inherits SIGINT ignored, and a
    child inheriting that would sit through the tests' Ctrl-C. A handler (unlike ignoring) is
    reset to the default in every program this process starts."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _test_sandbox_roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tests' sandboxes live in pytest's temporary directories: sidecars they start allow
    those as ``sandbox_roots`` (which allows none by default), and nothing else."""
    base = str(tmp_path_factory.getbasetemp().resolve())
    previous = os.environ.get(SANDBOX_ROOTS_ENV)
    os.environ[SANDBOX_ROOTS_ENV] = base
    yield base
    if previous is None:
        os.environ.pop(SANDBOX_ROOTS_ENV, None)
    else:
        os.environ[SANDBOX_ROOTS_ENV] = previous


@dataclass(frozen=True)
class ServedSidecar:
    """A sidecar process started by ``serve_sidecar``, and the address it listens on."""

    process: subprocess.Popen[str]
    address: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def status_kib(self, field: str = "VmRSS") -> int:
        """A memory figure of the process from ``/proc/PID/status`` (``VmRSS``, ``VmHWM``…)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.pid}/status")


#: ``serve_sidecar(*flags, env=..., stderr=..., wrapper=..., **settings)``: settings become
#: ``CLEVERAGENTS_SIDECAR_<NAME>`` variables, ``env`` adds others; ``wrapper`` is a command
#: the server runs under (its arguments then the server's command line).
ServeSidecar = Callable[..., ServedSidecar]


@pytest.fixture
def serve_sidecar() -> Iterator[ServeSidecar]:
    """Start sidecar processes on free loopback ports (file tools off); all are stopped after
    the test."""
    started: list[subprocess.Popen[str]] = []

    def start(
        *flags: str,
        env: Mapping[str, str] | None = None,
        stderr: int | IO[Any] | None = None,
        wrapper: Sequence[str] = (),
        **settings: object,
    ) -> ServedSidecar:
        environment = dict(os.environ, CLEVERAGENTS_SIDECAR_FILE_TOOLS="false")
        environment.update(env or {})
        environment.update(
            {f"CLEVERAGENTS_SIDECAR_{k.upper()}": str(v) for k, v in settings.items()}
        )
        command = [
            *wrapper, sys.executable, "-m", "cleveragents.sidecar.cli", "serve",
            "--listen", "127.0.0.1:0", "--log-level", "warning", *flags,
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=environment
        )
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith(_LISTENING), line
        return ServedSidecar(process, line.removeprefix(_LISTENING))

    yield start
    for process in started:  # all told first: their grace periods run side by side
        process.terminate()
    for process in started:
        process.wait(15)


@contextlib.contextmanager
def captured_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every log line written inside the block, whatever level an earlier test configured
    (``structlog.testing.capture_logs`` keeps the level filter it finds)."""
    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**previous)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A ``redis-server`` on a free loopback port, persisting nothing; stopped after the test."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def redis_unix_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A ``redis-server`` on a unix socket only; stopped after the test."""
    server = RedisServer(tmp_path / "redis-unix", unix_socket=True).start()
    yield server
    server.stop()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """``redis_factory(appendfsync=..., unix_socket=...)``: servers, not yet started, stopped
    after the test (for kill-and-restart tests)."""
    made: list[RedisServer] = []

    def make(**options: Any) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(made)}", **options)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()
