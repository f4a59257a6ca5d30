"""Tying ``serve`` to the process that started it, and telling that process where it listens.

A runtime that spawns the sidecar and then dies (``kill -9``) would otherwise leave it
orphaned, holding its port. With ``exit_with_parent`` the sidecar watches its parent: a
``pidfd`` (Linux 5.3+) that becomes readable when the parent exits, else a poll of
``getppid()`` every half second, and on Linux also ``prctl(PR_SET_PDEATHSIG)``. The kernel
sends that signal when the parent *thread* that spawned the sidecar ends, which in a
multi-threaded parent (a Go program, a JVM) can happen while the process lives on, so the
signal only prompts a check of the parent process, never a shutdown by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
import tempfile

from cleveragents.sidecar.cli.version import version
from cleveragents.sidecar.errors import ConfigError

__all__ = [
    "DEATH_SIGNAL",
    "VERSION",
    "ParentWatch",
    "announcement",
    "arm_death_signal",
    "remove_ready_file",
    "write_ready_fd",
    "write_ready_file",
]

VERSION = version()
#: The signal Linux sends when the parent thread ends (SIGTERM would be indistinguishable
#: from an operator's stop, and the parent may still be alive).
DEATH_SIGNAL = signal.SIGUSR2
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.5


def arm_death_signal() -> bool:
    """Ask Linux for :data:`DEATH_SIGNAL` when the parent thread ends; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class ParentWatch:
    """Whether the process ``pid`` (the parent, or the one ``parent_pid`` names) still runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        #: Our own parent: its death shows as a new ``getppid()`` (the reaper), which a
        #: zombie parent nobody has reaped yet cannot hide the way it hides from ``kill 0``.
        self.direct = pid == os.getppid()
        if not self.alive():
            raise ConfigError(f"parent_pid {pid} is not a running process")

    def alive(self) -> bool:
        """True while the watched process runs."""
        if self.direct:
            return os.getppid() == self.pid
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # it exists, owned by someone else
        return True

    async def gone(self) -> None:
        """Return once the watched process has exited."""
        try:
            pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # not Linux 5.3+, or forbidden (seccomp)
            pidfd = None
        try:
            if pidfd is not None and self.alive():  # opened on the right process
                loop = asyncio.get_running_loop()
                exited = loop.create_future()
                loop.add_reader(pidfd, _settle, exited)
                try:
                    await exited
                finally:
                    loop.remove_reader(pidfd)
            while True:  # no pidfd: nothing wakes us when the parent goes, so poll
                if not self.alive():
                    return
                await asyncio.sleep(_POLL_S)
        finally:
            if pidfd is not None:
                os.close(pidfd)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def announcement(address: str, metrics_port: int | None, console_url: str = "") -> str:
    """The one-line JSON a parent reads to learn where the sidecar listens (a stable format:
    keys are only ever added)."""
    line = {"address": address, "pid": os.getpid(), "version": VERSION}
    line |= {"metrics_port": metrics_port, "console_url": console_url or None}
    return json.dumps(line)


def write_ready_file(path: str, line: str) -> None:
    """Write ``line`` to ``path`` whole or not at all: a parent polling for the file never
    reads half of it. The file is written under a new name of its own first (created with
    ``O_EXCL``, as ``mkstemp`` does: a link planted at a name it could guess is never
    followed), then renamed into place; it gets the mode a plain ``open`` would give it."""
    directory, name = os.path.split(os.path.abspath(path))
    try:
        fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=directory)
    except OSError as exc:
        raise ConfigError(f"cannot write ready_file {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(line + "\n")
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise ConfigError(f"cannot write ready_file {path}: {exc.strerror or exc}") from None


def _umask() -> int:
    mask = os.umask(0o077)  # read it (setting it is the only way): briefly the strictest
    os.umask(mask)
    return mask


def write_ready_fd(fd: int, line: str) -> None:
    """Write ``line`` to the inherited descriptor ``fd``, then close it (unless stdout or
    stderr), so a parent reading it to the end sees the end."""
    try:
        os.write(fd, (line + "\n").encode())
    except OSError as exc:
        raise ConfigError(f"cannot write ready_fd {fd}: {exc.strerror or exc}") from None
    if fd > 2:
        os.close(fd)


def remove_ready_file(path: str, line: str) -> None:
    """Remove the ready file at exit if it is still ours: a stale one would send a parent to
    an address nobody listens on."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read().strip() != line:
                return
        os.unlink(path)
    except OSError:
        pass
