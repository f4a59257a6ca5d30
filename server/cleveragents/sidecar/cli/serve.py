"""``cleveragents-sidecar serve``: run the sidecar until SIGTERM or SIGINT."""

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
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import EVENT_LOOPS, loop_factory
from cleveragents.sidecar.observability.logs import configure_logging
from cleveragents.sidecar.transport.server import Sidecar

__all__ = ["add_serve_arguments", "serve"]

log = structlog.get_logger("cleveragents.sidecar.server")
#: After the shutdown, how long the threads of sync tools get before the process leaves them.
_THREAD_WAIT_S = 2.0


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """The flags of ``serve``; each overrides the setting of the same name."""
    serve.add_argument("--listen", help="host:port (port 0 picks one) or unix:/path")
    serve.add_argument("--config", help="a TOML configuration file")
    serve.add_argument("--log-format", choices=("json", "console"), help="log line format")
    serve.add_argument("--log-level", help="debug, info, warning or error")
    serve.add_argument("--max-concurrent-runs", type=int, help="runs in flight at most")
    serve.add_argument("--shutdown-grace-s", type=float, help="seconds runs get to finish")
    serve.add_argument(
        "--watcher-queue-size", type=int, help="events a watcher may lag before it is dropped"
    )
    serve.add_argument(
        "--metrics-listen", help="serve Prometheus metrics at http://HOST:PORT/metrics"
    )
    serve.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        help="the event loop to serve on (default: auto, which is uvloop if it is installed)",
    )
    serve.add_argument(
        "--tracing",
        action="store_true",
        default=None,
        help="trace runs with OpenTelemetry (exporter from the OTEL_* variables)",
    )


def serve(args: argparse.Namespace) -> int:
    """Load the settings, then serve; the exit status (2: the settings are wrong)."""
    overrides = {
        "listen": args.listen,
        "log_format": args.log_format,
        "log_level": args.log_level,
        "max_concurrent_runs": args.max_concurrent_runs,
        "shutdown_grace_s": args.shutdown_grace_s,
        "watcher_queue_size": args.watcher_queue_size,
        "metrics_listen": args.metrics_listen,
        "tracing": args.tracing,
        "event_loop": args.event_loop,
    }
    try:
        config = load_config(args.config, overrides=overrides)
        _, new_loop = loop_factory(config.event_loop)
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


async def _serve(sidecar: Sidecar) -> None:
    # Handlers first: a supervisor may signal as soon as it reads the listening line.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    threads = _CountingExecutor(thread_name_prefix="tool")
    loop.set_default_executor(threads)  # where sync tools and LLM callers run
    address = await sidecar.start()
    print(f"cleveragents-sidecar listening on {address}", flush=True)
    if sidecar.metrics_port is not None:
        host = sidecar.config.metrics_listen.rpartition(":")[0]
        print(f"metrics at http://{host}:{sidecar.metrics_port}/metrics", flush=True)
    await stop.wait()
    await sidecar.stop()
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
