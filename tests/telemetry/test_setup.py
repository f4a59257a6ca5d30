"""How tracing and metrics are switched on, configured and left out."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.observability.tracing import sdk_tracer_provider

from .conftest import PARENT_SPAN_ID, TRACE_ID, TRACEPARENT, WAIT_S, scrape, turn

PROCESS_WAIT_S = 30.0


def _python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT_S,
        env={**os.environ, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_off_by_default_and_nothing_imported() -> None:
    out = _python(
        f"""
        import asyncio, sys
        from cleveragents.client import AsyncSidecarClient
        from cleveragents.sidecar import Sidecar, SidecarConfig, configure_logging

        async def main():
            configure_logging("console", "error")
            sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0"))
            assert sidecar.tracing is None and sidecar.metrics is None
            assert sidecar.manager.observers == [] and sidecar.metrics_port is None
            address = await sidecar.start()
            client = AsyncSidecarClient(address, metadata=[("traceparent", {TRACEPARENT!r})])
            async with client:
                await client.run_tool_loop("go", script=[{{"content": "ok"}}])
            await sidecar.stop(0.1)

        asyncio.run(main())
        print(sorted(m for m in sys.modules if m.split(".")[0] in
                     ("opentelemetry", "prometheus_client")))
        """
    )
    assert out.strip() == "[]"


def test_the_global_tracer_provider_is_used_when_the_application_set_one() -> None:
    out = _python(
        """
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from cleveragents.client import AsyncSidecarClient
        from cleveragents.sidecar import Sidecar, SidecarConfig, configure_logging

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

        async def main():
            configure_logging("console", "error")
            sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", tracing=True))
            assert sidecar._owned_tracer_provider is None
            address = await sidecar.start()
            async with AsyncSidecarClient(address) as client:
                await client.run_tool_loop("go", script=[{"content": "ok"}])
            await sidecar.stop(0.1)

        asyncio.run(main())
        print(sorted(span.name for span in exporter.get_finished_spans()))
        """,
        OTEL_TRACES_EXPORTER="otlp",  # would fail: proves no SDK provider of its own was made
    )
    assert out.strip() == "['chat', 'invoke_agent']"


async def test_serve_traces_with_the_exporter_the_environment_names(tmp_path: Path) -> None:
    """``serve --tracing`` with ``OTEL_TRACES_EXPORTER=console``; spans flush at SIGTERM."""
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "sidecar-test"}
    command = [
        sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0",
        "--tracing", "--metrics-listen", "127.0.0.1:0", "--log-level", "error",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        first = (await asyncio.wait_for(process.stdout.readline(), PROCESS_WAIT_S)).decode()
        address = first.strip().rsplit(" ", 1)[1]
        second = (await asyncio.wait_for(process.stdout.readline(), PROCESS_WAIT_S)).decode()
        assert second.startswith("metrics at http://127.0.0.1:")
        port = int(second.strip().rsplit(":", 1)[1].removesuffix("/metrics"))
        async with AsyncSidecarClient(address, metadata=[("traceparent", TRACEPARENT)]) as c:
            await c.run_tool_loop("go", script=[turn("done")], timeout=WAIT_S)
        status, text = await scrape(port)
        assert status == 200
        assert 'cleveragents_runs_total{state="completed",stop_reason="final_answer"} 1.0' in text
        process.terminate()
        out, err = await asyncio.wait_for(process.communicate(), PROCESS_WAIT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    spans = out.decode()
    assert '"name": "invoke_agent"' in spans
    assert f'"trace_id": "0x{TRACE_ID}"' in spans
    assert f'"parent_id": "0x{PARENT_SPAN_ID}"' in spans
    assert '"service.name": "sidecar-test"' in spans


def test_sdk_provider_from_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider = sdk_tracer_provider({"OTEL_TRACES_EXPORTER": "none"})
    assert provider.resource.attributes["service.name"] == "cleveragents-sidecar"
    provider.shutdown()
    sdk_tracer_provider({"OTEL_TRACES_EXPORTER": "console"}).shutdown()
    with pytest.raises(ConfigError, match="no installed span exporter: check the name"):
        sdk_tracer_provider({"OTEL_TRACES_EXPORTER": "carrier-pigeon"})
    if not list(entry_points(group="opentelemetry_traces_exporter", name="otlp_proto_grpc")):
        # The default, OTLP, needs an exporter package this project does not depend on.
        with pytest.raises(ConfigError, match="install opentelemetry-exporter-otlp"):
            sdk_tracer_provider({})
        with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER='otlp'"):
            Sidecar(SidecarConfig(listen="127.0.0.1:0", tracing=True))
