"""``cleveragents-sidecar serve``: run the sidecar until SIGTERM or SIGINT (a second one
hurries it), or until its parent dies when it was asked to follow it."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import structlog

from cleveragents.sidecar.cli.allocator import return_large_blocks
from cleveragents.sidecar.cli.flags import add_setting_flags, overrides
from cleveragents.sidecar.cli.lifecycle import (
    DEATH_SIGNAL,
    ParentWatch,
    announcement,
    arm_death_signal,
    remove_ready_file,
    write_ready_fd,
    write_ready_file,
)
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import loop_factory
from cleveragents.sidecar.observability.logs import configure_logging
from cleveragents.sidecar.transport.server import Sidecar

__all__ = ["add_serve_arguments", "serve"]

log = structlog.get_logger("cleveragents.sidecar.server")
#: After the shutdown, how long the threads of sync tools get before the process leaves them.
_THREAD_WAIT_S = 2.0


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """The flags of ``serve``; each overrides the setting of the same name."""
    serve.add_argument(
        "--config", help="a TOML configuration file (env CLEVERAGENTS_SIDECAR_CONFIG)"
    )
    add_setting_flags(serve)


def serve(args: argparse.Namespace) -> int:
    """Load the settings, then serve; the exit status (2: the settings are wrong)."""
    try:
        config = load_config(args.config, overrides=overrides(args))
        _, new_loop = loop_factory(config.process.event_loop)
        configure_logging(config.log_format, config.log_level)
    except (ConfigError, ValueError) as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    return_large_blocks()
    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(_serve(Sidecar(config)))
    except ConfigError as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    return 0


class _Stop:
    """Why and how the sidecar stops: the first SIGTERM/SIGINT begins a graceful stop, a
    second one ends the grace period at once; the parent's death stops with no grace (nobody
    is left to hear the runs end)."""

    def __init__(self, sidecar: Sidecar, parent: ParentWatch | None) -> None:
        self.sidecar = sidecar
        self.parent = parent
        self.requested = asyncio.Event()
        self.grace_s: float | None = None

    def signalled(self) -> None:
        if self.requested.is_set():
            log.warning("second stop signal: cancelling the live runs now")
            self.sidecar.hurry()
        self.requested.set()

    def parent_gone(self) -> None:
        assert self.parent is not None
        log.warning("parent process exited; stopping", parent_pid=self.parent.pid)
        self.grace_s = 0.0
        if self.requested.is_set():
            self.sidecar.hurry()
        self.requested.set()

    def parent_thread_ended(self) -> None:
        """PR_SET_PDEATHSIG fired: the parent's spawning thread ended; is the process gone?"""
        if self.parent is not None and not self.parent.alive():
            self.parent_gone()
        elif self.parent is not None:
            log.info("parent thread ended; the parent process runs on", parent_pid=self.parent.pid)

    async def watch_parent(self) -> None:
        if self.parent is not None:
            await self.parent.gone()
            self.parent_gone()


async def _serve(sidecar: Sidecar) -> None:
    # Handlers first: a supervisor may signal as soon as it reads the listening line.
    config = sidecar.config
    parent = None
    if config.process.exit_with_parent or config.process.parent_pid:
        parent = ParentWatch(config.process.parent_pid or os.getppid())
    stop = _Stop(sidecar, parent)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.signalled)
    if parent is not None and parent.direct:
        loop.add_signal_handler(DEATH_SIGNAL, stop.parent_thread_ended)
        arm_death_signal()
    threads = _CountingExecutor(thread_name_prefix="tool")
    loop.set_default_executor(threads)  # where sync tools and LLM callers run
    address = await sidecar.start()
    ready = announcement(address, sidecar.metrics_port, sidecar.console_url)
    try:
        if config.process.ready_file:
            write_ready_file(config.process.ready_file, ready)
        if config.process.ready_fd:
            write_ready_fd(config.process.ready_fd, ready)
        # A stable line (parents may read it), after the ready file is in place.
        print(f"cleveragents-sidecar listening on {address}", flush=True)
        if sidecar.metrics_port is not None:
            host = config.metrics.listen.rpartition(":")[0]
            print(f"metrics at http://{host}:{sidecar.metrics_port}/metrics", flush=True)
        if sidecar.console_url:
            print(f"console at {sidecar.console_url}", flush=True)
        async with asyncio.TaskGroup() as tasks:
            watcher = tasks.create_task(stop.watch_parent(), name="parent-watch")
            await stop.requested.wait()
            watcher.cancel()
    except BaseException:
        await sidecar.stop(0.0)  # a ready file that cannot be written: store still flushed
        raise
    finally:
        if config.process.ready_file:
            remove_ready_file(config.process.ready_file, ready)
    await sidecar.stop(stop.grace_s)
    await _leave_stuck_threads(threads)


class _CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that knows how many of its calls are still running."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._idle: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.busy = 0

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        def counted() -> Any:
            with self._lock:
                self.busy += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.busy -= 1
                    waiters = self._idle if self.busy == 0 else []
                    if waiters:
                        self._idle = []
                for loop, waiter in waiters:
                    loop.call_soon_threadsafe(_settle, waiter)

        return super().submit(counted)

    async def idle(self) -> None:
        """Return once no call is running."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        with self._lock:
            if self.busy == 0:
                return
            self._idle.append((loop, waiter))
        await waiter


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _leave_stuck_threads(threads: _CountingExecutor) -> None:
    """Give the threads of sync tools a moment; exit without those still stuck then.

    Their runs have ended (cancelled after the grace period) and the store is flushed, but a
    thread cannot be stopped, and Python would wait for it at exit however long it ran.
    """
    try:
        await asyncio.wait_for(threads.idle(), _THREAD_WAIT_S)
    except TimeoutError:
        log.warning(
            "tool threads still running after shutdown; exiting without them",
            threads=threads.busy,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
