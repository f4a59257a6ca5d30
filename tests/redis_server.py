"""A real ``redis-server`` (Debian's package) in a temporary directory, for the Redis store's
tests: on a free loopback port or a unix socket, without persistence or with an append-only
file, started, killed with ``SIGKILL`` and started again on the same port and files."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

#: What redis-server prints once it serves (Redis 7: "Ready to accept connections tcp", or
#: "The server is now ready to accept connections at PATH" for a unix socket alone).
_READY = "ready to accept connections"
_START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; ``url`` is what ``event_store`` is set to for it.

    ``unix_socket``: listen on a socket in ``directory`` only. ``appendfsync`` (``always``,
    ``everysec``, ``no``) turns the append-only file on, so that the data survives a kill;
    empty: nothing is persisted. ``password``: clients must ``AUTH`` with it. ``tls``: the
    server's certificate, key and CA files: it serves TLS only (``rediss://``), and asks
    clients for no certificate unless ``client_certs`` (``tls-auth-clients yes``: a client
    must show a certificate that CA issued).
    """

    def __init__(
        self,
        directory: Path,
        *,
        unix_socket: bool = False,
        appendfsync: str = "",
        password: str = "",
        tls: tuple[Path, Path, Path] | None = None,
        client_certs: bool = False,
    ) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail(
                "redis-server is not installed: the Redis store's tests need it "
                "(Debian: apt-get install redis-server; make test installs it)"
            )
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.appendfsync = appendfsync
        self.password = password
        self.tls = tls
        self.client_certs = client_certs
        self.socket_path = directory / "redis.sock" if unix_socket else None
        self.port = 0 if unix_socket else free_port()
        self.process: subprocess.Popen[str] | None = None
        self._drain: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self.socket_path is not None:
            return f"unix://{self.socket_path}?db=0"
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.port}/0"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and return once it says it serves (its log line, read blocking)."""
        assert self.binary is not None
        command = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--save", "", "--daemonize", "no",
            "--logfile", "", "--loglevel", "notice",
        ]  # fmt: skip
        if self.socket_path is not None:
            command += ["--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        if self.password:
            command += ["--requirepass", self.password]
        if self.tls is not None:
            cert, key, ca = map(str, self.tls)
            command[command.index("--port") + 1] = "0"
            command += [
                "--tls-port", str(self.port), "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-ca-cert-file", ca,
                "--tls-auth-clients", "yes" if self.client_certs else "no",
            ]  # fmt: skip
        if self.appendfsync:
            command += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            command += ["--appendonly", "no"]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )  # fmt: skip
        self.process = process
        assert process.stdout is not None
        seen: list[str] = []
        timer = threading.Timer(_START_TIMEOUT_S, process.kill)  # a hung start fails the test
        timer.start()
        try:
            for line in process.stdout:
                seen.append(line)
                if _READY in line.lower():
                    break
            else:
                pytest.fail("redis-server exited before serving:\n" + "".join(seen[-20:]))
        finally:
            timer.cancel()
        # Keep reading its log so that a full pipe never blocks the server.
        self._drain = threading.Thread(target=process.stdout.read, daemon=True)
        self._drain.start()
        return self

    def kill(self) -> None:
        """``SIGKILL``: what Redis had not written to its files is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
