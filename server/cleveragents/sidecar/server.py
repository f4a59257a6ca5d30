"""The grpc.aio server: the service, health checking, reflection and graceful shutdown."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import structlog
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cleveragents.sandbox import file_tools
from cleveragents.sidecar.access import check_listen_policy, read_token, server_credentials
from cleveragents.sidecar.auth import TokenAuthInterceptor
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import running_loop_name
from cleveragents.sidecar.profiles import close_provider_clients
from cleveragents.sidecar.runs import RunManager, RunObserver
from cleveragents.sidecar.service import ToolRuntimeService
from cleveragents.sidecar.store import SqliteEventStore
from cleveragents.sidecar.tools import builtin_registry
from cleveragents.tool import ToolRegistry
from cleveragents.toolruntime.v1 import service_pb2, session_pb2

if TYPE_CHECKING:  # imported at run time only when tracing or metrics are on
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import TracerProvider

    from cleveragents.sidecar.metrics import MetricsObserver, MetricsServer
    from cleveragents.sidecar.telemetry import TracingObserver

__all__ = ["SERVICE_NAME", "Sidecar", "default_registry", "load_tool_module"]

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["ToolRuntimeService"].full_name
log = structlog.get_logger("cleveragents.sidecar.server")


def _identity(data: bytes) -> bytes:
    return data


class Malformed:
    """Stands in for a request that did not parse, so the handler can answer
    ``INVALID_ARGUMENT`` instead of gRPC's generic ``UNKNOWN``."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


#: How long a new call may wait for the server to pick it up (the client's deadline still
#: applies).
_ACCEPT_WAIT_S = 300


def _lenient(message_type: Any) -> Callable[[bytes], Any]:
    name = message_type.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            return Malformed(f"malformed {name}: {exc}")

    return parse


def _guarded(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await method(request, context)

    return handler


class Sidecar:
    """A configured sidecar: ``await start()`` binds and serves, ``await stop()`` drains.

    ``registry`` holds the server-side tools; by default the built-in ones plus those of the
    configured ``tool_modules``.

    With ``config.tracing``, runs are traced (:mod:`cleveragents.sidecar.telemetry`) into
    ``tracer_provider``, else the global provider if the application set one, else an SDK
    provider configured by the standard ``OTEL_*`` variables, which the sidecar then owns and
    shuts down (flushing its spans) in :meth:`stop`. With ``config.metrics_listen``, Prometheus
    metrics (:mod:`cleveragents.sidecar.metrics`) are served there; ``metrics_port`` is the
    port bound. Neither OpenTelemetry nor prometheus_client is imported when they are off.
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
        self._metrics_server: MetricsServer | None = None
        self._owned_tracer_provider: SdkTracerProvider | None = None
        observers: list[RunObserver] = []
        if config.tracing:
            from cleveragents.sidecar import telemetry

            if tracer_provider is None and not telemetry.global_provider_configured():
                tracer_provider = self._owned_tracer_provider = telemetry.sdk_tracer_provider()
            self.tracing = telemetry.TracingObserver(tracer_provider, config.all_profiles())
            observers.append(self.tracing)
        if config.metrics_listen:
            from cleveragents.sidecar import metrics

            metrics.parse_listen(config.metrics_listen)  # a bad address fails here, not later
            self.metrics = metrics.MetricsObserver()
            observers.append(self.metrics)
        self.manager = RunManager(
            max_concurrent_runs=config.max_concurrent_runs,
            max_finished_runs=config.max_finished_runs,
            finished_run_ttl_s=config.finished_run_ttl_s,
            watcher_queue_size=config.watcher_queue_size,
            store=SqliteEventStore(config.event_store) if config.event_store else None,
            observers=observers,
        )
        if self.metrics is not None:
            self.metrics.track(self.manager)
        self.service = ToolRuntimeService(config, self.registry, self.manager)
        self.health = health.aio.HealthServicer()
        self.address = ""
        self._server: grpc.aio.Server | None = None

    async def start(self) -> str:
        """Bind the configured address and start serving; returns the address bound."""
        size = self.config.max_message_bytes
        token = read_token(self.config)
        restored = self.manager.open()
        await self.manager.settle()
        credentials = server_credentials(self.config)
        listen = self.config.listen
        check_listen_policy(
            listen, authenticated=token is not None, encrypted=credentials is not None
        )
        server = grpc.aio.server(
            interceptors=[TokenAuthInterceptor(token)] if token is not None else None,
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.so_reuseport", 0),
                # gRPC cancels a call the server has not picked up within 30 s by default. A
                # busy event loop picks up one new call per turn, so a burst of sessions on a
                # loaded sidecar could lose its last calls before they started; they wait now.
                ("grpc.server_max_unrequested_time_in_server", _ACCEPT_WAIT_S),
            ],
        )
        server.add_generic_rpc_handlers((_handlers(self.service),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
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
        self._server = server
        if unix:
            path = listen.removeprefix("unix:").removeprefix("//")
            os.chmod(path, 0o600)
            self.address = listen
        else:
            host = listen.rsplit(":", 1)[0]
            self.address = f"{host}:{port}"
        if self.metrics is not None:
            from cleveragents.sidecar.metrics import MetricsServer

            metrics_server = MetricsServer(self.metrics.registry, self.config.metrics_listen)
            try:
                self.metrics_port = await metrics_server.start()
            except ConfigError:
                await server.stop(None)
                raise
            self._metrics_server = metrics_server
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "sidecar listening",
            address=self.address,
            tools=self.registry.names(),
            runs=restored,
            tracing=self.tracing is not None,
            metrics_port=self.metrics_port,
            event_loop=running_loop_name(),
        )
        return self.address

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting runs, let live ones finish within the grace period, cancel the rest.

        Every run ends with its terminal event; streams get a moment to deliver it.
        """
        grace = self.config.shutdown_grace_s if grace_s is None else grace_s
        await self.health.enter_graceful_shutdown()
        log.info("sidecar stopping", live_runs=self.manager.live_count, grace_s=grace)
        await self.manager.drain(grace)
        if self._server is not None:
            await self._server.stop(min(grace, 2.0))
        await self.manager.close()
        await close_provider_clients()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None
        if self._owned_tracer_provider is not None:
            # Flushes the spans still batched; blocking (an export), so off the event loop.
            await asyncio.to_thread(self._owned_tracer_provider.shutdown)
            self._owned_tracer_provider = None
        log.info("sidecar stopped")

    async def wait_for_termination(self) -> None:
        """Wait until the server has stopped."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> Sidecar:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def default_registry(config: SidecarConfig) -> ToolRegistry:
    """The built-in and file tools (unless disabled) and those of the configured modules."""
    registry = builtin_registry() if config.builtin_tools else ToolRegistry()
    if config.file_tools:
        registry.include(file_tools())
    for reference in config.tool_modules:
        try:
            registry.include(load_tool_module(reference))
        except ValueError as exc:
            raise ConfigError(f"tool module {reference!r}: {exc}") from None
    return registry


def load_tool_module(reference: str) -> ToolRegistry:
    """The ``ToolRegistry`` named by ``module:attribute`` (attribute defaults to ``registry``)."""
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"tool module {reference!r}: {exc}") from None
    registry = getattr(module, attribute or "registry", None)
    if not isinstance(registry, ToolRegistry):
        raise ConfigError(f"tool module {reference!r} does not name a ToolRegistry")
    return registry


#: Unary RPCs: the handler's name is the RPC's, its messages are ``<Name>Request/Response``.
_UNARY = ("RunToolLoop", "GetRun", "CancelRun", "DecideApproval", "ListRuns", "ListTools")
#: Server-streaming RPCs, which send pre-encoded frames.
_STREAMING = ("StreamToolLoop", "WatchRun")


def _handlers(service: ToolRuntimeService) -> grpc.GenericRpcHandler:
    pb = service_pb2
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        name: grpc.unary_unary_rpc_method_handler(
            _guarded(getattr(service, name)),
            request_deserializer=_lenient(getattr(pb, f"{name}Request")),
            response_serializer=getattr(pb, f"{name}Response").SerializeToString,
        )
        for name in _UNARY
    }
    for name in _STREAMING:
        handlers[name] = grpc.unary_stream_rpc_method_handler(
            _guarded(getattr(service, name)),
            request_deserializer=_lenient(getattr(pb, f"{name}Request")),
            response_serializer=_identity,
        )
    handlers["Session"] = grpc.stream_stream_rpc_method_handler(
        service.Session,
        request_deserializer=_lenient(session_pb2.SessionRequest),
        response_serializer=_identity,
    )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
