"""Fixtures for the tracing, metrics and CLI tests: real sidecars on 127.0.0.1:0.

Tracing goes to an SDK ``TracerProvider`` with an ``InMemorySpanExporter`` handed to the
sidecar (never the global provider, which a process can set only once). Server-side tools are
steered with ``asyncio.Event``s of the test's own loop, so nothing waits on a clock.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from cleveragents.sidecar import Sidecar, SidecarConfig, configure_logging
from cleveragents.tool import ToolError, ToolRegistry, ToolSpec

SidecarFactory = Callable[..., Awaitable[Sidecar]]
#: How long a test waits for something that should happen promptly.
WAIT_S = 5.0
#: The caller's trace context, as a Go or Node.js client would send it.
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"
#: A tool input and output that must never reach a span.
SECRET_INPUT = "input-that-must-stay-out-of-spans"


class Tools:
    """The server's tools for one test.

    ``echo`` returns its (required) text; ``fail`` raises ``ToolError``; ``gate`` sets
    ``gate_started`` and waits for ``release``; ``nap`` waits ``seconds`` (a workload, for
    overlapping calls).
    """

    def __init__(self) -> None:
        self.registry = ToolRegistry()
        self.gate_started = asyncio.Event()
        self.release = asyncio.Event()
        text = {"type": "object", "properties": {"text": {"type": "string"}}}
        required = {**text, "required": ["text"]}
        self.registry.register(ToolSpec("echo", "Return the text.", required), self._echo)
        self.registry.register(ToolSpec("fail", "Always fails.", text), self._fail)
        self.registry.register(ToolSpec("gate", "Returns once released."), self._gate)
        seconds = {"type": "object", "properties": {"seconds": {"type": "number"}}}
        self.registry.register(ToolSpec("nap", "Waits a moment.", seconds), self._nap)

    async def _echo(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {"text": str(inputs.get("text", ""))}

    async def _fail(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        raise ToolError("it failed")

    async def _gate(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        self.gate_started.set()
        await self.release.wait()
        return {"released": True}

    async def _nap(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(float(inputs.get("seconds", 0)))
        return {}


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted tool call."""
    return {"id": call_id, "name": name, "arguments": arguments}


def turn(
    content: str = "", *calls: dict[str, Any], usage: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    """One scripted LLM turn."""
    out: dict[str, Any] = {
        "content": content,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }
    if calls:
        out["tool_calls"] = list(calls)
    return out


def spans_by_name(
    spans: tuple[ReadableSpan, ...] | list[ReadableSpan],
) -> dict[str, list[ReadableSpan]]:
    """Finished spans grouped by name, in the order they ended."""
    grouped: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        grouped.setdefault(span.name, []).append(span)
    return grouped


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A span's attributes as a plain dict."""
    return dict(span.attributes or {})


async def scrape(
    port: int,
    path: str = "/metrics",
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """GET (or ``method``) ``path`` on the metrics port over real HTTP, off the event loop."""

    def fetch() -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", method=method, headers=dict(headers or {})
        )
        try:
            with urllib.request.urlopen(request, timeout=WAIT_S) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    return await asyncio.to_thread(fetch)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition: (name, labels) -> value."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def sample(
    values: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """One sample's value (0 when absent)."""
    return values.get((name, frozenset(labels.items())), 0.0)


def script_json(*turns: dict[str, Any]) -> str:
    """A script as JSON (for ``LlmSelection.script``)."""
    return json.dumps(list(turns))


@pytest.fixture(scope="session", autouse=True)
def _quiet_logs() -> None:
    configure_logging("console", "error")


@pytest.fixture
def tools() -> Tools:
    """Fresh server-side tools (their events belong to the test's loop)."""
    return Tools()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """Where the test's spans end up."""
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    """An SDK provider exporting synchronously to ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
async def make_sidecar(tools: Tools, provider: TracerProvider) -> AsyncIterator[SidecarFactory]:
    """Start sidecars (tracing and metrics on unless overridden); all stop after the test."""
    started: list[Sidecar] = []

    async def make(**settings: Any) -> Sidecar:
        settings.setdefault("listen", "127.0.0.1:0")
        settings.setdefault("log_format", "console")
        settings.setdefault("tracing", True)
        settings.setdefault("metrics_listen", "127.0.0.1:0")
        sidecar = Sidecar(
            SidecarConfig(**settings), registry=tools.registry, tracer_provider=provider
        )
        await sidecar.start()
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in started:
        await sidecar.stop(0.2)


@pytest.fixture
async def sidecar(make_sidecar: SidecarFactory) -> Sidecar:
    """A sidecar with tracing and metrics on and the test tools."""
    return await make_sidecar()
