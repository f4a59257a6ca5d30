"""Prometheus metrics of the sidecar's runs, served over HTTP (``metrics_listen``).

``MetricsObserver`` counts from the runs' events as they happen (runs by outcome, tool calls by
tool and outcome, tool and LLM latency, tokens) and reads the gauges (live runs, watchers,
dropped watchers) from the run manager when scraped. Each sidecar has its own
``CollectorRegistry``, never the process-wide default one, so two sidecars in one process (the
tests) do not mix their numbers. ``MetricsServer`` serves that registry from the event loop
itself, so a scrape reads the manager's state on the thread that changes it.

This module imports ``prometheus_client``; the sidecar imports it only when metrics are on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, assert_never

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    ErrorKind,
    IterationStarted,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunResumed,
    RunStarted,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)

if TYPE_CHECKING:
    from cleveragents.sidecar.runs import Run, RunManager

__all__ = ["MetricsObserver", "MetricsServer", "Rejected", "parse_listen"]

log = structlog.get_logger("cleveragents.sidecar.metrics")


class Rejected(Protocol):
    """The calls refused for their credentials (the transport counts them)."""

    @property
    def count(self) -> int:
        """How many since start-up."""
        ...


#: Tool calls take from microseconds (echo) to minutes (a build); LLM calls up to minutes.
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
LLM_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
#: The ``tool`` label of calls to tools that do not exist: the model names those, so their
#: names would make the label's cardinality unbounded.
UNKNOWN_TOOL_LABEL = "_unknown"
_STATE_OF = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}
_REQUEST_TIMEOUT_S = 10.0


class MetricsObserver:
    """A ``RunObserver`` that keeps the sidecar's Prometheus metrics in ``registry``.

    Call :meth:`track` with the run manager to also expose its gauges.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.runs = Counter(
            "cleveragents_runs",
            "Runs that ended, by final state and stop reason.",
            ("state", "stop_reason"),
            registry=r,
        )
        self.tool_calls = Counter(
            "cleveragents_tool_calls",
            "Tool calls that ended, by tool and outcome (success or the error kind).",
            ("tool", "outcome"),
            registry=r,
        )
        self.tool_duration = Histogram(
            "cleveragents_tool_call_duration_seconds",
            "How long tool calls took (the records' duration), by tool.",
            ("tool",),
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self.llm_duration = Histogram(
            "cleveragents_llm_call_duration_seconds",
            "How long LLM calls took, from iteration start to the response, by LLM profile.",
            ("profile",),
            buckets=LLM_BUCKETS,
            registry=r,
        )
        self.llm_tokens = Counter(
            "cleveragents_llm_tokens",
            "Tokens the LLM calls reported, by LLM profile and type (input or output).",
            ("profile", "type"),
            registry=r,
        )
        # Children by label values: labels() takes a lock and builds a key on every call.
        self._tool_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._llm_children: dict[str, tuple[Histogram, Counter, Counter]] = {}
        self._llm_started: dict[Run, float] = {}

    def track(self, manager: RunManager, rejections: Rejected | None = None) -> None:
        """Expose the gauges read from ``manager`` (and the count of calls refused for their
        credentials, from ``rejections``) at scrape time."""
        self.registry.register(_ManagerCollector(manager, rejections))

    def track_mcp(self, states: Callable[[], Iterable[tuple[str, bool, int]]]) -> None:
        """Expose each MCP server's state, read from ``states`` (name, up, failures so far) at
        scrape time."""
        self.registry.register(_McpCollector(states))

    def track_fleet(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        """Expose a shared store's lease figures, read from ``counts`` (lease renewals that
        failed, runs adopted from expired sidecars, runs other sidecars took over) when
        scraped."""
        self.registry.register(_FleetCollector(counts))

    def run_started(self, run: Run, metadata: Mapping[str, str]) -> None:
        """Nothing to count yet: live runs are read from the manager when scraped."""

    def run_event(self, run: Run, event: RunEvent) -> None:
        """Count ``event``."""
        match event:
            case ToolCallCompleted():
                record = event.record
                kind = record.error_kind
                outcome = "success" if record.success else str(kind or ErrorKind.EXCEPTION)
                tool = UNKNOWN_TOOL_LABEL if kind is ErrorKind.UNKNOWN_TOOL else record.tool_name
                children = self._tool_children.get((tool, outcome))
                if children is None:
                    children = (
                        self.tool_calls.labels(tool, outcome),
                        self.tool_duration.labels(tool),
                    )
                    self._tool_children[(tool, outcome)] = children
                children[0].inc()
                children[1].observe(record.duration_ms / 1000.0)
            case IterationStarted():
                self._llm_started[run] = time.perf_counter()
            case LLMResponded():
                self._llm_responded(run, event)
            case RunCompleted() | RunFailed() | RunCancelled():
                self._llm_started.pop(run, None)
                self.runs.labels(_STATE_OF[type(event)], str(event.result.stop_reason)).inc()
            case (
                RunStarted()
                | RunResumed()
                | ToolCallStarted()
                | ToolCallProgress()
                | ApprovalRequested()
                | ApprovalDecided()
                | LLMDelta()
            ):
                pass  # live runs are read from the manager; tool calls count when they end
            case _:  # pragma: no cover - mypy checks that every event type is handled
                assert_never(event)

    def _llm_responded(self, run: Run, event: LLMResponded) -> None:
        started = self._llm_started.pop(run, None)
        profile = run.request.llm.profile
        llm = self._llm_children.get(profile)
        if llm is None:
            llm = (
                self.llm_duration.labels(profile),
                self.llm_tokens.labels(profile, "input"),
                self.llm_tokens.labels(profile, "output"),
            )
            self._llm_children[profile] = llm
        if started is not None:
            llm[0].observe(time.perf_counter() - started)
        if event.usage is not None:
            llm[1].inc(event.usage.input_tokens)
            llm[2].inc(event.usage.output_tokens)


class _ManagerCollector:
    """The gauges that are the manager's state, read when Prometheus scrapes."""

    def __init__(self, manager: RunManager, rejections: Rejected | None = None) -> None:
        self.manager = manager
        self.rejections = rejections

    def describe(self) -> Iterable[Metric]:
        """The metric names, so the registry can refuse a clash at registration."""
        return self._families(0, 0, 0, 0, 0)

    def collect(self) -> Iterable[Metric]:
        """The current values."""
        live = self.manager.live_runs()
        streams = sum(len(run.log.sinks) + len(run.log.cursors) for run in live)
        stats = self.manager.stats
        rejected = self.rejections.count if self.rejections is not None else 0
        return self._families(
            len(live), streams, stats.dropped_watchers, stats.refused_runs, rejected
        )

    @staticmethod
    def _families(
        live: int, streams: int, dropped: int, refused: int, rejected: int
    ) -> list[Metric]:
        return [
            GaugeMetricFamily("cleveragents_live_runs", "Runs in flight.", value=live),
            GaugeMetricFamily(
                "cleveragents_watchers",
                "Streams following live runs: WatchRun watchers and the streams that started "
                "runs (StreamToolLoop, Session).",
                value=streams,
            ),
            CounterMetricFamily(
                "cleveragents_dropped_watchers",
                "WatchRun watchers dropped: too far behind, or their client stopped reading.",
                value=dropped,
            ),
            CounterMetricFamily(
                "cleveragents_refused_runs",
                "Runs refused with RESOURCE_EXHAUSTED because max_concurrent_runs were in flight.",
                value=refused,
            ),
            CounterMetricFamily(
                "cleveragents_auth_rejected",
                "Calls refused with UNAUTHENTICATED: no token, an unknown token, or a client "
                "certificate whose subject no identity lists.",
                value=rejected,
            ),
        ]


class _McpCollector:
    """Whether each MCP server is connected, and how often its connection was lost."""

    def __init__(self, states: Callable[[], Iterable[tuple[str, bool, int]]]) -> None:
        self.states = states

    def describe(self) -> Iterable[Metric]:
        """The metric names, so the registry can refuse a clash at registration."""
        return self._families([])

    def collect(self) -> Iterable[Metric]:
        """The current values."""
        return self._families(list(self.states()))

    @staticmethod
    def _families(states: list[tuple[str, bool, int]]) -> list[Metric]:
        up = GaugeMetricFamily(
            "cleveragents_mcp_server_up",
            "1 while the MCP server is connected; 0 while it is down (its calls fail at once).",
            labels=["server"],
        )
        failures = CounterMetricFamily(
            "cleveragents_mcp_server_failures",
            "Times the MCP server could not be started or its connection was lost.",
            labels=["server"],
        )
        for name, is_up, count in states:
            up.add_metric([name], 1.0 if is_up else 0.0)
            failures.add_metric([name], count)
        return [up, failures]


class _FleetCollector:
    """This sidecar's lease on a store several sidecars share (Redis)."""

    def __init__(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        self.counts = counts

    def describe(self) -> Iterable[Metric]:
        """The metric names, so the registry can refuse a clash at registration."""
        return self._families((0, 0, 0))

    def collect(self) -> Iterable[Metric]:
        """The current values."""
        return self._families(self.counts())

    @staticmethod
    def _families(counts: tuple[int, int, int]) -> list[Metric]:
        failures, adopted, lost = counts
        return [
            CounterMetricFamily(
                "cleveragents_store_lease_renewal_failures",
                "Renewals of this sidecar's lease on the shared run store that failed: Redis "
                "unreachable, or the lease had expired (other sidecars may adopt its runs).",
                value=failures,
            ),
            CounterMetricFamily(
                "cleveragents_store_adopted_runs",
                "Live runs this sidecar adopted from sidecars whose leases expired.",
                value=adopted,
            ),
            CounterMetricFamily(
                "cleveragents_store_runs_taken_over",
                "Runs this sidecar stopped because another sidecar took them over while its "
                "lease was expired.",
                value=lost,
            ),
        ]


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too; port 0 picks a free one) as a host and a port."""
    host, sep, port = listen.rpartition(":")
    if sep and host and port.isdigit() and int(port) > 65535:
        raise ConfigError(
            f"metrics_listen {listen!r}: port {int(port)} is out of range: a port is 0 to 65535 "
            "(0 picks a free one)"
        )
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"metrics_listen must be host:port, got {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


class MetricsServer:
    """Serves ``registry`` at ``GET /metrics`` over plain HTTP/1.1 on the running event loop.

    Scrapes are collected on the loop, so the gauges read the run manager without locks; a
    scrape of a sidecar with thousands of label sets takes a few milliseconds of it.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        listen: str,
        *,
        authorized: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.registry = registry
        self.listen = listen
        #: With it, a scrape's ``Authorization`` header (``Bearer <token>``) must pass (else 401).
        self._authorized = authorized
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Bind and serve; returns the port bound."""
        host, port = parse_listen(self.listen)
        try:
            self._server = await asyncio.start_server(self._handle, host, port)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {self.listen!r}: {exc}") from None
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        """Stop accepting scrapes."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status, content_type, body = self._respond(head)
            method = head.split(b" ", 1)[0]
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            )
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # a client that sent nothing sensible, or left: nothing to answer
        finally:
            writer.close()

    def _respond(self, head: bytes) -> tuple[str, str, bytes]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"malformed request line\n"
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n"
        if target.split("?", 1)[0] not in ("/metrics", "/"):
            return "404 Not Found", "text/plain", b"metrics are at /metrics\n"
        accept, presented = "", ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "accept":
                accept = value.strip()
            elif name.strip().lower() == "authorization":
                presented = value.strip()
        authorized = self._authorized
        if authorized is not None and not authorized(presented.encode("latin-1")):
            return "401 Unauthorized", "text/plain", b"send 'Authorization: Bearer <token>'\n"
        encoder, content_type = choose_encoder(accept)
        return "200 OK", content_type, encoder(self.registry)
