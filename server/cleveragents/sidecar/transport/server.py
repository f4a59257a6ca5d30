"""The grpc.aio server: the service, health checking, reflection and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import running_loop_name
from cleveragents.sidecar.fleet.setup import directory_for, store_for
from cleveragents.sidecar.gateway import NO_LAZY_TOOLS, Gateway
from cleveragents.sidecar.llm_profiles import close_provider_clients
from cleveragents.sidecar.runs import RunManager, RunObserver
from cleveragents.sidecar.secrets import known_secrets
from cleveragents.sidecar.tool_sources import default_registry
from cleveragents.sidecar.transport.access import (
    check_console_policy,
    check_listen_policy,
    console_tls,
    refuse_live_unix_socket,
    server_credentials,
)
from cleveragents.sidecar.transport.auth import AuthInterceptor
from cleveragents.sidecar.transport.credentials import Credentials, read_credentials, token_values
from cleveragents.sidecar.transport.handlers import SERVICE_NAME, generic_handler
from cleveragents.sidecar.transport.health import BoundedHealthServicer
from cleveragents.sidecar.transport.reflection import enable_reflection
from cleveragents.sidecar.transport.rejections import Rejections
from cleveragents.sidecar.transport.service import ToolRuntimeService
from cleveragents.tool import ToolRegistry
from cleveragents.wire import event_limit

if TYPE_CHECKING:  # imported at run time only when tracing or metrics are on
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import TracerProvider

    from cleveragents.sidecar.console import Console
    from cleveragents.sidecar.mcp import McpServers
    from cleveragents.sidecar.observability.metrics import MetricsObserver
    from cleveragents.sidecar.observability.tracing import TracingObserver

__all__ = ["Sidecar"]

log = structlog.get_logger("cleveragents.sidecar.server")

#: How long a new call may wait for the server to pick it up (the client's deadline still
#: applies).
_ACCEPT_WAIT_S = 300
#: How many new calls gRPC may hold before the server picks them up (its default: 1,000).
_PENDING_CALLS = 100_000


class Sidecar:
    """A configured sidecar: ``await start()`` binds and serves, ``await stop()`` drains.

    ``registry`` holds the server-side tools; by default the built-in ones plus those of the
    configured ``tool_modules``.

    With ``config.tracing``, runs are traced (``observability.tracing``) into
    ``tracer_provider``, else the global provider if the application set one, else an SDK
    provider configured by the standard ``OTEL_*`` variables, which the sidecar then owns and
    shuts down (flushing its spans) in :meth:`stop`. With ``config.metrics.listen``, Prometheus
    metrics (``observability.metrics``) are served there (behind the auth token, when there is
    one and ``metrics_require_token``); ``metrics_port`` is the port bound. With
    ``config.console.listen``, the run console (``console``) is served there, over the gateway,
    to the same identities; ``console_url`` is its address once started.
    Neither OpenTelemetry, prometheus_client nor aiohttp is imported when they are off.
    """

    def __init__(
        self,
        config: SidecarConfig,
        registry: ToolRegistry | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.config = config
        self.registry = registry if registry is not None else default_registry(config)
        self.tracing: TracingObserver | None = None
        self.metrics: MetricsObserver | None = None
        self.metrics_port: int | None = None
        self.console: Console | None = None
        #: The run console's address once serving (``""``: off).
        self.console_url = ""
        self._owned_tracer_provider: SdkTracerProvider | None = None
        observers: list[RunObserver] = []
        if config.tracing:
            from cleveragents.sidecar.observability import tracing as telemetry

            if tracer_provider is None and not telemetry.global_provider_configured():
                tracer_provider = self._owned_tracer_provider = telemetry.sdk_tracer_provider()
            self.tracing = telemetry.TracingObserver(tracer_provider, config.all_profiles())
            observers.append(self.tracing)
        if config.metrics.listen:
            from cleveragents.sidecar.observability import metrics

            metrics.parse_listen(config.metrics.listen)  # a bad address fails here, not later
            self.metrics = metrics.MetricsObserver()
            observers.append(self.metrics)
        self.manager = RunManager(
            max_concurrent_runs=config.limits.max_concurrent_runs,
            max_finished_runs=config.retention.max_runs,
            finished_run_ttl_s=config.retention.ttl_s,
            max_finished_run_bytes=config.retention.max_bytes,
            watcher_queue_size=config.watching.queue_size,
            store=store_for(config),
            observers=observers,
            frame_limit=event_limit(config.limits.max_message_bytes),
            session_reattach_s=config.session_reattach_s,
            policy_of=lambda name: config.policies.get(name) if name else config.policy,
        )
        #: Where each run lives: here, or (a fleet) on another sidecar sharing the store.
        self.directory = directory_for(config, self.manager)
        #: Calls refused for their credentials (counted, and logged at most once an interval).
        self.rejections = Rejections(config.auth.reject_log_interval_s)
        if self.metrics is not None:
            self.metrics.track(self.manager, self.rejections)
            if (lease := getattr(self.manager.store, "lease", None)) is not None:  # a fleet
                self.metrics.track_fleet(lease.counts)
        #: The MCP servers' connections; the ``mcp`` SDK is imported only when one is set.
        self.mcp: McpServers | None = None
        if config.mcp_servers:
            from cleveragents.sidecar.mcp import McpServers

            self.mcp = McpServers(config, self.registry)
            if self.metrics is not None:
                self.metrics.track_mcp(self.mcp.states)
        #: What the sidecar does for a caller, in plain values: the RPCs call it.
        self.gateway = Gateway(
            config, self.registry, self.manager, self.directory, self.mcp or NO_LAZY_TOOLS
        )
        self.service = ToolRuntimeService(config, self.gateway)
        self.health = BoundedHealthServicer(config.limits.max_health_watchers)
        self.address = ""
        self._server: grpc.aio.Server | None = None
        #: What the start began, undone in reverse by ``stop`` (``None``: not serving).
        self._running: contextlib.AsyncExitStack | None = None
        #: The grace period of the stop under way.
        self._grace = config.process.shutdown_grace_s

    async def start(self) -> str:
        """Bind the configured address and start serving; returns the address bound.

        The eager MCP servers are connected first: one that cannot start is a ``ConfigError``
        before anything listens. Each step that starts something puts its undo on one exit
        stack: a start that fails undoes what it began (in reverse), and ``stop`` unwinds the
        same stack. The runs a failed start took back are left as a crash leaves them: not
        ended, to be taken back again (with a fleet: adopted at once, its lease gone).
        """
        async with contextlib.AsyncExitStack() as stack:
            await self._start(stack)
            self._running = stack.pop_all()
        return self.address

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        config = self.config
        if self.mcp is not None:
            await self.mcp.start()
            stack.push_async_callback(self.mcp.stop)
        refuse_live_unix_socket(config.listen)
        identities = read_credentials(config)
        credentials = server_credentials(config)
        check_listen_policy(
            config.listen, authenticated=identities.required, encrypted=credentials is not None
        )
        self.gateway.assembler.secrets = known_secrets(config, token_values(config))
        resumer = self.gateway if config.store.resume_runs and config.store.url else None
        restored = self.manager.open(resumer)
        stack.push_async_callback(self._close_runs)
        await self.manager.settle()
        await stack.enter_async_context(self.directory.serving())
        self._server = await self._serve(identities, credentials)
        stack.push_async_callback(self._stop_serving)
        if self.metrics is not None:
            from cleveragents.sidecar.observability.metrics import MetricsServer

            guarded = identities.required and config.metrics.require_token
            metrics_server = MetricsServer(
                self.metrics.registry,
                config.metrics.listen,
                authorized=(lambda h: identities.by_token(h) is not None) if guarded else None,
            )
            self.metrics_port = await metrics_server.start()
            stack.push_async_callback(metrics_server.stop)
        if config.console.listen:  # stopped after the drain: its pages see the runs end
            await self._start_console(stack, identities)
        stack.push_async_callback(self._drain)
        await self._set_health()
        for task in (
            asyncio.create_task(self._follow_store(), name="store-health"),
            asyncio.create_task(self._drop_stalled(), name="stalled-watchers"),
        ):
            stack.push_async_callback(_cancelled, task)
        log.info(
            "sidecar listening",
            address=self.address,
            tools=self.registry.names(),
            runs=restored,
            tracing=self.tracing is not None,
            metrics_port=self.metrics_port,
            console=self.console_url or None,
            event_loop=running_loop_name(),
            **_access_summary(config, identities, tls=credentials is not None),
        )

    async def _start_console(
        self, stack: contextlib.AsyncExitStack, identities: Credentials
    ) -> None:
        """Serve the run console (aiohttp is imported here, and only here)."""
        listen = self.config.console.listen
        check_console_policy(listen, authenticated=identities.required)
        from cleveragents.sidecar.console import Console

        console = Console(
            self.gateway, self.config, identities, self.rejections, console_tls(self.config)
        )
        self.console_url = await console.start()
        self.console = console
        stack.push_async_callback(self._stop_console)

    async def _stop_console(self) -> None:
        console, self.console = self.console, None
        if console is not None:
            await console.stop()

    async def _serve(
        self, identities: Credentials, credentials: grpc.ServerCredentials | None
    ) -> grpc.aio.Server:
        """The gRPC server, bound to ``listen`` and serving; ``ConfigError`` if it cannot."""
        size, listen = self.config.limits.max_message_bytes, self.config.listen
        server = grpc.aio.server(
            interceptors=(
                [AuthInterceptor(identities, self.rejections)] if identities.required else None
            ),
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.so_reuseport", 0),
                # gRPC cancels a call the server has not picked up within 30 s by default. A
                # busy event loop picks up one new call per turn, so a burst of sessions on a
                # loaded sidecar could lose its last calls before they started; they wait now.
                ("grpc.server_max_unrequested_time_in_server", _ACCEPT_WAIT_S),
                # gRPC also drops calls at random once 1,000 wait to be picked up (all past
                # 3,000), with INTERNAL and no trace here: 4-8 % of a 3,000-session burst.
                # Admission is the run manager's, which refuses with a reason, a log line
                # and a count; this only guards against a flood far beyond any burst.
                ("grpc.server.max_pending_requests", _PENDING_CALLS),
                ("grpc.server.max_pending_requests_hard_limit", _PENDING_CALLS),
            ],
        )
        server.add_generic_rpc_handlers((generic_handler(self.service),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        enable_reflection((SERVICE_NAME, health.SERVICE_NAME), server)
        unix = listen.startswith("unix:")
        # The socket file must never be reachable by others, not even for an instant.
        previous_umask = os.umask(0o177) if unix else None
        try:
            if credentials is not None:
                port = server.add_secure_port(listen, credentials)
            else:
                port = server.add_insecure_port(listen)
            await server.start()
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on {listen!r}: {exc}") from None
        finally:
            if previous_umask is not None:
                os.umask(previous_umask)
        if unix:
            path = listen.removeprefix("unix:").removeprefix("//")
            os.chmod(path, 0o600)
            self.address = listen
        else:
            host = listen.rsplit(":", 1)[0]
            self.address = f"{host}:{port}"
        return server

    def hurry(self) -> None:
        """Cut short the grace period of a :meth:`stop` under way: live runs are cancelled
        now (their store is still flushed before ``stop`` returns)."""
        self.manager.hurry()

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting runs, let live ones finish within the grace period, cancel the rest.

        Every run ends with its terminal event; streams get a moment to deliver it. Then
        what the sidecar holds from its construction goes too (provider clients, the tracer
        provider it owns).
        """
        self._grace = self.config.process.shutdown_grace_s if grace_s is None else grace_s
        running, self._running = self._running, None
        if running is not None:
            await running.aclose()
        self.service.close()
        await close_provider_clients()
        if self._owned_tracer_provider is not None:
            # Flushes the spans still batched; blocking (an export), so off the event loop.
            await asyncio.to_thread(self._owned_tracer_provider.shutdown)
            self._owned_tracer_provider = None
        log.info("sidecar stopped")

    async def _drain(self) -> None:
        """The start of a stop: health says so, runs finish within the grace period (the
        rest are cancelled), and each ends with its terminal event."""
        await self.health.enter_graceful_shutdown()
        log.info("sidecar stopping", live_runs=self.manager.live_count, grace_s=self._grace)
        await self.manager.drain(self._grace)

    async def _stop_serving(self) -> None:
        """Stop the gRPC server, giving its streams a moment to deliver their last events."""
        if self._server is not None:
            await self._server.stop(min(self._grace, 2.0))

    async def _close_runs(self) -> None:
        """Close the run store: cleanly once every run ended; after a failed start, the runs
        it took back are left live, as a crash leaves them."""
        left = await self.manager.abandon(
            "the sidecar failed to start; the run waits for a restart"
        )
        await self.manager.close(clean=left == 0)

    async def _set_health(self) -> None:
        """``SERVING`` while the run store writes, ``NOT_SERVING`` while it fails."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.manager.store_failure is None
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def _follow_store(self) -> None:
        """Keep health checking in step with the run store, until ``stop``."""
        changed = self.manager.store_changed
        while True:
            await changed.wait()
            changed.clear()
            try:
                await self._set_health()
            except Exception:  # a bug here must not stop health from following the store
                log.exception("could not update health from the run store")

    async def _drop_stalled(self) -> None:
        """Drop, every so often, the watchers stuck in a write for ``watcher_stall_s``."""
        stall_s = self.config.watching.stall_s
        while True:
            await asyncio.sleep(min(1.0, stall_s / 4))
            try:
                self.manager.watchers.drop_stalled(stall_s)
            except Exception:  # a bug here must not end the sweeps for good
                log.exception("could not drop stalled watchers")

    async def wait_for_termination(self) -> None:
        """Wait until the server has stopped."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> Sidecar:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def _access_summary(config: SidecarConfig, identities: Credentials, *, tls: bool) -> dict[str, Any]:
    """Who may do what, for the start-up line: whether callers must authenticate (and how),
    the identities with their roles, and the directories runs may name as ``sandbox_root``."""
    ways = [
        way
        for way, on in (("token", identities.tokens), ("certificate", identities.subjects))
        if on
    ]
    return {
        "auth": " and ".join(ways) if ways else "off (every caller is 'default', with every role)",
        "identities": identities.identities(),
        "tls": ("mutual" if config.tls.client_ca_file else "on") if tls else "off",
        "sandbox_roots": list(config.sandbox_roots) or "none (no run may name a sandbox_root)",
    }


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
