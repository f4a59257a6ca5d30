"""``cleveragents-sidecar``: run the sidecar, watch its runs, list them.

``serve`` runs the sidecar. ``watch RUN_ID`` follows one run live in the terminal: a line per
tool call as its record arrives, a progress line kept up to date in place (on a terminal), then
a table of the records and the result. ``runs`` lists the recent runs (``ListRuns``), or shows
the runs it is given by id (``GetRun``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from cleveragents.sidecar.config import ENV_PREFIX, load_config
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import EVENT_LOOPS, loop_factory
from cleveragents.sidecar.logs import configure_logging
from cleveragents.sidecar.server import Sidecar

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import RunInfo, RunSummary, SidecarClient, StreamedEvent
    from cleveragents.tool import ToolCallRecord, ToolCallRunResult

__all__ = ["WatchView", "list_runs", "main", "show_runs", "watch"]

DEFAULT_TARGET = "127.0.0.1:50051"
TOKEN_ENV = ENV_PREFIX + "TOKEN"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cleveragents-sidecar",
        description="A gRPC sidecar that runs an LLM tool-calling loop.",
        epilog=f"Every setting can also come from {ENV_PREFIX}<SETTING> environment variables.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the ToolRuntimeService until SIGTERM/SIGINT")
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

    watch = commands.add_parser(
        "watch",
        help="follow a run live: its tool calls as they end, then its records and result",
        description="Follow a run live. Exit status: 0 when it completed, 1 when it failed or "
        "was cancelled, 2 when the sidecar could not be asked.",
    )
    watch.add_argument("run_id", metavar="RUN_ID", help="the run to follow")
    watch.add_argument(
        "--after", type=int, default=0, metavar="N", help="start after event N (default: 0)"
    )
    _client_arguments(watch)

    runs = commands.add_parser("runs", help="show runs: their state, iterations and tool calls")
    runs.add_argument(
        "run_ids", nargs="*", metavar="RUN_ID", help="the runs to show (default: recent runs)"
    )
    runs.add_argument("--limit", type=int, default=20, help="recent runs to list (default: 20)")
    _client_arguments(runs)
    return parser


def _client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=DEFAULT_TARGET,
        metavar="HOST:PORT",
        help=f"the sidecar's address, or unix:/path (default: {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"the sidecar's auth token (default: ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--tls-ca-file", metavar="PEM", help="connect over TLS, trusting this CA certificate"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    if args.command in ("watch", "runs"):
        try:
            client = _connect(args)
        except OSError as exc:
            print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
            return 2
        with client:
            if args.command == "watch":
                return watch(client, args.run_id, args.after, sys.stdout)
            return show_runs(client, args.run_ids, args.limit, sys.stdout)
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
    address = await sidecar.start()
    print(f"cleveragents-sidecar listening on {address}", flush=True)
    if sidecar.metrics_port is not None:
        host = sidecar.config.metrics_listen.rpartition(":")[0]
        print(f"metrics at http://{host}:{sidecar.metrics_port}/metrics", flush=True)
    await stop.wait()
    await sidecar.stop()


# -- watch and runs ----------------------------------------------------------------------------


def _connect(args: argparse.Namespace) -> SidecarClient:
    import grpc

    from cleveragents.client import SidecarClient

    credentials = None
    if args.tls_ca_file:
        with open(args.tls_ca_file, "rb") as fh:
            credentials = grpc.ssl_channel_credentials(root_certificates=fh.read())
    return SidecarClient(args.target, token=args.token or None, credentials=credentials)


def watch(client: SidecarClient, run_id: str, after: int, out: TextIO) -> int:
    """Follow ``run_id`` with ``client``, drawing it on ``out``; returns the exit status."""
    from cleveragents.client import SidecarRpcError

    view = WatchView(out, live=out.isatty())
    stop = threading.Event()
    if view.live:  # keep the clocks of the progress line moving between events
        threading.Thread(target=_tick, args=(view, stop), daemon=True).start()
    try:
        for streamed in client.watch(run_id, after_sequence=after):
            view.show(streamed)
    except SidecarRpcError as exc:
        view.clear_progress()
        print(f"cleveragents-sidecar: cannot watch run {run_id!r}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        view.clear_progress()
        return 130
    finally:
        stop.set()
    return view.finish()


def _tick(view: WatchView, stop: threading.Event) -> None:
    while not stop.wait(_TICK_S):
        view.redraw()


_TICK_S = 0.5
#: Calls in flight named on the progress line, at most.
_RUNNING_SHOWN = 3


class WatchView:
    """Draws a run's events as they arrive: a line per ended tool call, and (when ``live``,
    on a terminal) a progress line rewritten in place with ``\\r`` and ANSI erase-line; at the
    end a table of the records and the result. Thread-safe: a ticker may ``redraw``."""

    def __init__(self, out: TextIO, *, live: bool) -> None:
        self.out = out
        self.live = live
        self.run_id = ""
        self.max_iterations = 0
        self.iteration = 0
        #: Calls in flight: (call_id, iteration) -> (tool name, when it started, monotonic).
        self.running: dict[tuple[str, int], tuple[str, float]] = {}
        self.records: list[ToolCallRecord] = []
        self.failed = 0
        self.outcome = ""
        self.detail = ""
        self.result: ToolCallRunResult | None = None
        self._started = time.monotonic()
        self._progress_shown = False
        self._lock = threading.Lock()

    def show(self, streamed: StreamedEvent) -> None:
        """Take one event into account and redraw."""
        from cleveragents.tool import (
            IterationStarted,
            RunCancelled,
            RunCompleted,
            RunFailed,
            RunStarted,
            ToolCallCompleted,
            ToolCallStarted,
        )

        event = streamed.event
        # When the event happened, on this process's monotonic clock (by the sidecar's wall
        # clock, which is close enough): replayed events happened a while ago.
        at = time.monotonic() - max(0.0, time.time() - streamed.time)
        with self._lock:
            self.run_id = streamed.run_id
            if isinstance(event, RunStarted):
                self.max_iterations = event.max_iterations
                self._started = at
                tools = ", ".join(event.tool_names) or "none"
                self._line(
                    f"run {event.run_id}: up to {event.max_iterations} iterations, tools: {tools}"
                )
            elif isinstance(event, IterationStarted):
                self.iteration = event.iteration
            elif isinstance(event, ToolCallStarted):
                self.iteration = max(self.iteration, event.iteration)
                key = (event.call_id, event.iteration)
                self.running[key] = (event.tool_name, at)
            elif isinstance(event, ToolCallCompleted):
                record = event.record
                self.running.pop((record.call_id, record.iteration), None)
                self.records.append(record)
                self.failed += not record.success
                self._line(_record_line(record))
            elif isinstance(event, RunCompleted | RunFailed | RunCancelled):
                self.result = event.result
                self.running.clear()
                if isinstance(event, RunCompleted):
                    self.outcome = "completed"
                elif isinstance(event, RunFailed):
                    self.outcome, self.detail = "failed", event.message
                else:
                    self.outcome, self.detail = "cancelled", event.reason
            self._progress()

    def redraw(self) -> None:
        """Redraw the progress line (its clocks move on)."""
        with self._lock:
            if self._progress_shown:
                self._progress()

    def finish(self) -> int:
        """Print the table and the result; the exit status (0: the run completed)."""
        with self._lock:
            self._clear()
            records = list(self.result.tool_call_history) if self.result else self.records
            self.out.write("\n" + records_table(records) + "\n")
            if self.result is None:
                self.out.write(f"\nrun {self.run_id}: the stream ended before the run did\n")
                self.out.flush()
                return 1
            self.out.write("\n" + result_summary(self.outcome, self.result, self.detail) + "\n")
            self.out.flush()
            return 0 if self.outcome == "completed" else 1

    def clear_progress(self) -> None:
        """Erase the progress line, if one is shown."""
        with self._lock:
            self._clear()

    def progress_text(self) -> str:
        """What the progress line says now."""
        now = time.monotonic()
        limit = f"/{self.max_iterations}" if self.max_iterations else ""
        text = (
            f"iteration {self.iteration}{limit} | {len(self.records)} tool calls, "
            f"{self.failed} failed | {now - self._started:.1f} s"
        )
        if self.running:
            calls = sorted(self.running.values(), key=lambda item: item[1])
            shown = ", ".join(
                f"{name} {now - since:.1f} s" for name, since in calls[:_RUNNING_SHOWN]
            )
            more = len(calls) - _RUNNING_SHOWN
            text += f" | running: {shown}" + (f" (+{more})" if more > 0 else "")
        return text

    def _clear(self) -> None:
        if self._progress_shown:
            self.out.write("\r\x1b[2K")
            self.out.flush()
            self._progress_shown = False

    def _line(self, text: str) -> None:
        self._clear()
        self.out.write(text + "\n")
        self.out.flush()

    def _progress(self) -> None:
        if not self.live or self.result is not None:
            return
        self.out.write("\r\x1b[2K" + self.progress_text())
        self.out.flush()
        self._progress_shown = True


def _record_line(record: ToolCallRecord) -> str:
    status = "ok" if record.success else f"FAILED {record.error_kind or 'exception'}"
    iteration = f"[{record.iteration}]"
    line = f"  {iteration:<5} {record.tool_name:<20} {record.duration_ms:>10.2f} ms  {status}"
    if record.error:
        line += f"  {_one_line(record.error, 100)}"
    return line


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def records_table(records: Sequence[ToolCallRecord]) -> str:
    """The records as a fixed-width table, in order."""
    if not records:
        return "no tool calls"
    rows = [("#", "iter", "tool", "call id", "duration", "status", "error")]
    for index, r in enumerate(records, 1):
        status = "ok" if r.success else f"FAILED {r.error_kind or 'exception'}"
        rows.append(
            (
                str(index),
                str(r.iteration),
                r.tool_name,
                r.call_id,
                f"{r.duration_ms:.2f} ms",
                status,
                _one_line(r.error or "", 60),
            )
        )
    return _table(rows, right={0, 1, 4})


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def result_summary(state: str, result: ToolCallRunResult, detail: str = "") -> str:
    """How a run ended, in two or three lines."""
    failed = sum(1 for r in result.tool_call_history if not r.success)
    lines = [
        f"{state}: stop_reason={result.stop_reason}, iterations={result.iterations}, "
        f"tool calls={len(result.tool_call_history)} ({failed} failed), "
        f"tokens in/out={result.usage.input_tokens}/{result.usage.output_tokens}"
    ]
    if detail:
        lines.append(f"reason: {_one_line(detail, 200)}")
    if result.content:
        lines.append(f"answer: {_one_line(result.content, 200)}")
    return "\n".join(lines)


def list_runs(client: SidecarClient, limit: int) -> list[RunSummary]:
    """The sidecar's most recent runs, newest first: live ones and the finished ones it keeps
    (the ``ListRuns`` RPC)."""
    return client.list_runs(limit=limit)


def show_runs(client: SidecarClient, run_ids: Sequence[str], limit: int, out: TextIO) -> int:
    """Print a table of runs: those named (``GetRun``), else the ``limit`` most recent
    (``ListRuns``); returns the exit status."""
    from cleveragents.client import SidecarRpcError

    try:
        if not run_ids:
            summaries = list_runs(client, limit)
            out.write((summaries_table(summaries) if summaries else "no runs") + "\n")
            return 0
        infos: list[RunInfo] = []
        missing = 0
        for run_id in run_ids:
            try:
                infos.append(client.get_run(run_id))
            except SidecarRpcError as exc:
                if exc.code.name != "NOT_FOUND":
                    raise
                print(
                    f"cleveragents-sidecar: no run {run_id!r} (unknown, or expired)",
                    file=sys.stderr,
                )
                missing += 1
    except SidecarRpcError as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    if infos:
        out.write(runs_table(infos) + "\n")
    return 1 if missing else 0


def summaries_table(summaries: Sequence[RunSummary], now: float | None = None) -> str:
    """``ListRuns`` summaries as a fixed-width table: when each started (local time), how long
    it ran (or has been running) and the start of its prompt."""
    now = time.time() if now is None else now
    rows = [("run id", "state", "stop reason", "iterations", "tool calls", "started", "took",
             "prompt")]  # fmt: skip
    for run in summaries:
        started = time.localtime(run.started_at)
        same_day = time.localtime(now)[:3] == started[:3]
        took = (run.finished_at if run.finished_at is not None else now) - run.started_at
        rows.append(
            (
                run.run_id,
                run.state,
                str(run.stop_reason) if run.stop_reason is not None else "",
                str(run.iterations),
                str(run.tool_calls),
                time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", started),
                f"{max(0.0, took):.1f} s",
                _one_line(run.prompt, 40),
            )
        )
    return _table(rows, right={3, 4, 6})


def runs_table(infos: Sequence[RunInfo]) -> str:
    """Runs as a fixed-width table."""
    rows = [("run id", "state", "stop reason", "iterations", "tool calls", "failed", "events")]
    for info in infos:
        result = info.result
        history = result.tool_call_history if result is not None else ()
        rows.append(
            (
                info.run_id,
                info.state,
                str(result.stop_reason) if result is not None else "",
                str(result.iterations) if result is not None else "",
                str(len(history)) if result is not None else "",
                str(sum(1 for r in history if not r.success)) if result is not None else "",
                str(info.last_sequence),
            )
        )
    return _table(rows, right={3, 4, 5, 6})


if __name__ == "__main__":
    sys.exit(main())
