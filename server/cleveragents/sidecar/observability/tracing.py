"""OpenTelemetry tracing of runs, built from their events (``tracing = true``).

A run becomes one ``invoke_agent`` span; each LLM call of it a ``chat {model}`` span and each
tool call an ``execute_tool {tool}`` span, both children of the run's span, following the
GenAI semantic conventions. The run's span continues the W3C trace context (``traceparent``)
that the starting call carried in its gRPC metadata, so a caller's trace goes on through the
sidecar whatever language it is written in.

Spans are built from the run's events, not by wrapping the loop: the observer sees each event
synchronously as the run produces it, so a span starts and ends at the instant of the events
that bound it. Tool inputs and outputs, prompts and answers never go into a span; neither do
tool error messages, which often quote the inputs (``error.type`` names the kind of failure).

This module imports OpenTelemetry; the sidecar imports it only when tracing is on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import metadata as importlib_metadata
from typing import TYPE_CHECKING, assert_never

import structlog
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    IterationStarted,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunResumed,
    RunStarted,
    StopReason,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

    from cleveragents.sidecar.config import ProfileConfig
    from cleveragents.sidecar.runs import Run

__all__ = ["TracingObserver", "sdk_tracer_provider"]

log = structlog.get_logger("cleveragents.sidecar.telemetry")

SCOPE = "cleveragents.sidecar"
SERVICE_NAME = "cleveragents-sidecar"

#: ``gen_ai.provider.name`` per profile kind: the well-known values for the vendors, custom
#: ones (as the conventions allow) for a script and for an LLM hosted by the client.
PROVIDER_BY_KIND = {
    "openai": "openai",
    "anthropic": "anthropic",
    "scripted": "cleveragents.scripted",
    "client": "cleveragents.client",
}


class _RunTrace:
    """The spans of one run still open, and what its LLM-call spans share."""

    __slots__ = (
        "chat_attrs",
        "chat_kind",
        "chat_name",
        "context",
        "llm",
        "overflow",
        "span",
        "tools",
    )

    def __init__(self, span: Span, model: str, provider: str, chat_kind: SpanKind) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span)
        self.chat_name = f"chat {model}" if model else "chat"
        self.chat_kind = chat_kind
        self.chat_attrs: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
        }
        if model:
            self.chat_attrs["gen_ai.request.model"] = model
        self.llm: Span | None = None
        self.tools: dict[tuple[str, int], Span] = {}
        #: Calls whose (call_id, iteration) was already open: a model may repeat an id.
        self.overflow: list[tuple[tuple[str, int], Span]] = []


class TracingObserver:
    """A ``RunObserver`` that turns every run's events into spans.

    ``tracer_provider``: where the spans go; by default the global one. ``profiles``: the
    sidecar's LLM profiles, for ``gen_ai.provider.name`` and the model a run uses when its
    spec names none.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        profiles: Mapping[str, ProfileConfig] | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, _version(), tracer_provider)
        self.profiles = dict(profiles or {})
        self._runs: dict[Run, _RunTrace] = {}

    @property
    def open_runs(self) -> int:
        """How many runs have a span still open (for tests: 0 once every run has ended)."""
        return len(self._runs)

    def run_started(self, run: Run, metadata: Mapping[str, str]) -> None:
        """Open the run's span, parented on the ``traceparent`` the starting call carried."""
        try:
            self._start(run, metadata)
        except Exception:  # pragma: no cover - telemetry must never break a run
            log.exception("tracing failed", run_id=run.run_id)

    def run_event(self, run: Run, event: RunEvent) -> None:
        """Open or close the spans that ``event`` bounds."""
        state = self._runs.get(run)
        if state is None:
            return
        try:
            self._event(run, state, event)
        except Exception:  # pragma: no cover - telemetry must never break a run
            log.exception("tracing failed", run_id=run.run_id)

    def _start(self, run: Run, metadata: Mapping[str, str]) -> None:
        spec = run.request
        profile = self.profiles.get(spec.llm.profile)
        model = spec.llm.model or (profile.model if profile is not None else "")
        provider = PROVIDER_BY_KIND.get(profile.kind, "_OTHER") if profile is not None else "_OTHER"
        # The caller's context when it sent one, else whatever is current (a gRPC server
        # instrumentation's span, say), else a new trace.
        parent = propagate.extract(metadata, context=otel_context.get_current())
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.conversation.id": run.run_id,
            "cleveragents.run_id": run.run_id,
            "cleveragents.llm.profile": spec.llm.profile,
            "cleveragents.max_iterations": spec.max_iterations,
        }
        if model:
            attributes["gen_ai.request.model"] = model
        span = self.tracer.start_span(
            "invoke_agent", context=parent, kind=SpanKind.INTERNAL, attributes=attributes
        )
        if not span.is_recording():  # not sampled: its children would not be either
            return
        # A script plays the model in this process; any other model is called out (a provider
        # over HTTP, or the client over its session).
        scripted = profile is not None and profile.kind == "scripted"
        chat_kind = SpanKind.INTERNAL if scripted else SpanKind.CLIENT
        self._runs[run] = _RunTrace(span, model, provider, chat_kind)

    def _event(self, run: Run, state: _RunTrace, event: RunEvent) -> None:
        # Child spans carry only their own attributes (the SDK spends microseconds on each
        # one): the run's id and LLM profile are on the run's span, their parent.
        match event:
            case ToolCallStarted():
                self._tool_started(state, event)
            case ToolCallCompleted():
                self._tool_completed(state, event)
            case IterationStarted():
                attributes = {**state.chat_attrs, "cleveragents.iteration": event.iteration}
                state.llm = self.tracer.start_span(
                    state.chat_name,
                    context=state.context,
                    kind=state.chat_kind,
                    attributes=attributes,
                )
            case LLMResponded():
                _llm_responded(state, event)
            case RunCompleted() | RunFailed() | RunCancelled():
                del self._runs[run]
                self._end(state, event)
            case (
                RunStarted()
                | RunResumed()
                | ApprovalRequested()
                | ApprovalDecided()
                | ToolCallProgress()
                | LLMDelta()
            ):
                pass  # the run's span opened in run_started(); approvals are not spans
            case _:  # pragma: no cover - mypy checks that every event type is handled
                assert_never(event)

    def _tool_started(self, state: _RunTrace, event: ToolCallStarted) -> None:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            "cleveragents.iteration": event.iteration,
        }
        span = self.tracer.start_span(
            f"execute_tool {event.tool_name}",
            context=state.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        key = (event.call_id, event.iteration)
        if key in state.tools:
            state.overflow.append((key, span))
        else:
            state.tools[key] = span

    @staticmethod
    def _tool_completed(state: _RunTrace, event: ToolCallCompleted) -> None:
        record = event.record
        key = (record.call_id, record.iteration)
        tool_span = state.tools.pop(key, None)
        if tool_span is None:
            return
        for index, (other, waiting) in enumerate(state.overflow):
            if other == key:
                state.tools[key] = waiting
                del state.overflow[index]
                break
        if not record.success:
            kind = str(record.error_kind or "exception")
            tool_span.set_attribute("error.type", kind)
            tool_span.set_status(Status(StatusCode.ERROR, f"the tool call failed: {kind}"))
        tool_span.end()

    def _end(self, state: _RunTrace, event: RunCompleted | RunFailed | RunCancelled) -> None:
        result = event.result
        failure: tuple[str, str] | None = None
        if isinstance(event, RunFailed):
            # The error is the LLM caller's own exception (ProviderError, say), or None.
            error_type = type(event.error).__name__ if event.error is not None else "_OTHER"
            failure = (error_type, event.message)
        elif isinstance(event, RunCancelled) and result.stop_reason is StopReason.DEADLINE:
            failure = ("deadline", event.reason)
        interrupted = failure[0] if failure is not None else "cancelled"
        # Spans the terminal event interrupts: normally only an LLM call still waiting (the
        # loop closes tool calls in flight with records of their own first).
        for span in [
            *([state.llm] if state.llm is not None else []),
            *state.tools.values(),
            *(span for _, span in state.overflow),
        ]:
            span.set_attribute("error.type", interrupted)
            span.set_status(Status(StatusCode.ERROR, f"interrupted: the run ended ({interrupted})"))
            span.end()
        span = state.span
        failed = sum(1 for record in result.tool_call_history if not record.success)
        span.set_attributes(
            {
                "cleveragents.stop_reason": str(result.stop_reason),
                "cleveragents.iterations": result.iterations,
                "cleveragents.tool_calls": len(result.tool_call_history),
                "cleveragents.tool_calls.failed": failed,
                "gen_ai.usage.input_tokens": result.usage.input_tokens,
                "gen_ai.usage.output_tokens": result.usage.output_tokens,
            }
        )
        if failure is not None:
            span.set_attribute("error.type", failure[0])
            span.set_status(Status(StatusCode.ERROR, failure[1]))
        span.end()


def _llm_responded(state: _RunTrace, event: LLMResponded) -> None:
    llm = state.llm
    if llm is None:
        return
    state.llm = None
    usage = event.usage
    if usage is not None:
        llm.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
        )
    llm.end()


def _version() -> str:
    try:
        return importlib_metadata.version("cleveragents-sidecar")
    except importlib_metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return ""


def global_provider_configured() -> bool:
    """Whether the application set a global tracer provider (else it is OTel's proxy)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}


def sdk_tracer_provider(env: Mapping[str, str] | None = None) -> SdkTracerProvider:
    """An SDK ``TracerProvider`` exporting as the standard ``OTEL_*`` variables say.

    ``OTEL_TRACES_EXPORTER`` (default ``otlp``; ``console``; ``none``; several, comma
    separated) picks the exporters by their entry points, so ``otlp`` needs an OTLP exporter
    package installed (``opentelemetry-exporter-otlp``); ``OTEL_EXPORTER_OTLP_*`` configure it,
    ``OTEL_TRACES_SAMPLER`` the sampler, and ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES``
    the resource (``service.name`` defaults to ``cleveragents-sidecar``). Spans leave through a
    ``BatchSpanProcessor``, off the event loop. A ``ConfigError`` names an exporter that is
    not installed, rather than tracing into the void.
    """
    from importlib.metadata import entry_points

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    env = os.environ if env is None else env
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    if names == ["none"]:
        names = []
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    ) or "grpc"
    exporters = []
    for name in names:
        entry = _OTLP_BY_PROTOCOL.get(protocol.strip(), "") if name == "otlp" else name
        found = list(entry_points(group="opentelemetry_traces_exporter", name=entry))
        if not entry or not found:
            hint = (
                "install opentelemetry-exporter-otlp"
                if name.startswith("otlp")
                else "check the name"
            )
            raise ConfigError(
                f"tracing is on but OTEL_TRACES_EXPORTER={name!r} (protocol {protocol!r}) names "
                f"no installed span exporter: {hint}, or set OTEL_TRACES_EXPORTER to console "
                "or none"
            )
        exporters.append(found[0].load())
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    return provider
