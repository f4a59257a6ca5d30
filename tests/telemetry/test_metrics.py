"""Prometheus metrics on a real sidecar, scraped over HTTP from its metrics port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, RunFailedError, SidecarRpcError, StreamedEvent
from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import RunStarted, ToolCallStarted

from .conftest import WAIT_S, SidecarFactory, Tools, call, sample, samples, scrape, turn


async def test_counters_and_histograms_after_runs(sidecar: Sidecar) -> None:
    assert sidecar.metrics_port
    script = [
        turn("", call("c1", "echo", text="a"), call("c2", "fail"), usage=(10, 2)),
        turn("", call("c3", "echo", text="b"), call("c4", "invented"), usage=(20, 3)),
        turn("done", usage=(30, 4)),
    ]
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("go", script=script)
        await client.run_tool_loop("go", script=[turn("done")])
        with pytest.raises(RunFailedError):  # the script runs out: the run fails
            await client.run_tool_loop("go", script=[turn("", call("c1", "echo", text="x"))])
        await client.run_tool_loop("go", script=[turn("", call("c1", "echo"))], max_iterations=1)
    status, text = await scrape(sidecar.metrics_port)
    assert status == 200
    values = samples(text)

    def runs(state: str, stop_reason: str) -> float:
        return sample(values, "cleveragents_runs_total", state=state, stop_reason=stop_reason)

    assert runs("completed", "final_answer") == 2
    assert runs("completed", "max_iterations") == 1
    assert runs("failed", "error") == 1

    def calls(tool: str, outcome: str) -> float:
        return sample(values, "cleveragents_tool_calls_total", tool=tool, outcome=outcome)

    assert calls("echo", "success") == 3
    assert calls("fail", "exception") == 1
    assert calls("echo", "invalid_arguments") == 1  # echo without its text
    # A tool the model made up is counted, but its name does not become a label value.
    assert calls("_unknown", "unknown_tool") == 1
    assert not any("invented" in str(labels) for _, labels in values)

    tool_count = "cleveragents_tool_call_duration_seconds_count"
    assert sample(values, tool_count, tool="echo") == 4
    assert sample(values, tool_count, tool="fail") == 1
    buckets = "cleveragents_tool_call_duration_seconds_bucket"
    assert sample(values, buckets, tool="echo", le="+Inf") == 4
    # Every LLM call that answered: 3 + 1 + 1 (the failed one never answered) + 1.
    llm_count = "cleveragents_llm_call_duration_seconds_count"
    assert sample(values, llm_count, profile="scripted") == 6
    tokens = "cleveragents_llm_tokens_total"
    assert sample(values, tokens, profile="scripted", type="input") == 60
    assert sample(values, tokens, profile="scripted", type="output") == 9
    assert sample(values, "cleveragents_live_runs") == 0
    assert sample(values, "cleveragents_watchers") == 0
    assert sample(values, "cleveragents_dropped_watchers_total") == 0


async def _until(stream: AsyncIterator[StreamedEvent], kind: type) -> None:
    """Read ``stream`` until an event of ``kind``."""
    async with asyncio.timeout(WAIT_S):
        async for streamed in stream:
            if isinstance(streamed.event, kind):
                return
    raise AssertionError(f"no {kind.__name__}")


async def _drain(stream: AsyncIterator[StreamedEvent]) -> None:
    """Read ``stream`` to its end."""
    async with asyncio.timeout(WAIT_S):
        async for _ in stream:
            pass


async def test_gauges_show_live_runs_and_their_watchers(sidecar: Sidecar, tools: Tools) -> None:
    assert sidecar.metrics_port
    script = [turn("", call("g1", "gate")), turn("done")]
    async with AsyncSidecarClient(sidecar.address) as client:
        started = client.stream_tool_loop("go", script=script, run_id="live")
        await _until(started, ToolCallStarted)
        watchers = [client.watch("live"), client.watch("live")]
        for watcher in watchers:
            await _until(watcher, RunStarted)  # replayed: the watcher is subscribed
        values = samples((await scrape(sidecar.metrics_port))[1])
        assert sample(values, "cleveragents_live_runs") == 1
        # The two watchers and the stream that started the run.
        assert sample(values, "cleveragents_watchers") == 3
        tools.release.set()
        for stream in (started, *watchers):
            await _drain(stream)
    values = samples((await scrape(sidecar.metrics_port))[1])
    assert sample(values, "cleveragents_live_runs") == 0
    assert sample(values, "cleveragents_watchers") == 0
    assert (
        sample(values, "cleveragents_runs_total", state="completed", stop_reason="final_answer")
        == 1
    )


async def test_a_dropped_watcher_is_counted(make_sidecar: SidecarFactory, tools: Tools) -> None:
    sidecar = await make_sidecar(watcher_queue_size=1)
    assert sidecar.metrics_port
    # After the gate, the rest of the run is logged in one go: far more than one event ahead
    # of any watcher.
    script = (
        [turn("", call("g1", "gate"))]
        + [turn("", call(f"e{i}", "echo", text="x")) for i in range(20)]
        + [turn("done")]
    )
    async with AsyncSidecarClient(sidecar.address) as client:
        started = client.stream_tool_loop("go", script=script, run_id="burst", detach=True)
        await _until(started, ToolCallStarted)
        await started.aclose()
        watcher = client.watch("burst")
        await _until(watcher, RunStarted)
        tools.release.set()
        with pytest.raises(SidecarRpcError) as raised:
            await _drain(watcher)
        assert raised.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        async with asyncio.timeout(WAIT_S):
            await sidecar.manager.require("burst").wait()
    values = samples((await scrape(sidecar.metrics_port))[1])
    assert sample(values, "cleveragents_dropped_watchers_total") == 1


async def test_the_endpoint_speaks_http(sidecar: Sidecar) -> None:
    assert sidecar.metrics_port
    assert (await scrape(sidecar.metrics_port, "/"))[0] == 200
    assert (await scrape(sidecar.metrics_port, "/nope"))[0] == 404
    assert (await scrape(sidecar.metrics_port, "/metrics", method="POST"))[0] == 405
    status, body = await scrape(sidecar.metrics_port, method="HEAD")
    assert (status, body) == (200, "")


async def test_two_sidecars_keep_separate_numbers(make_sidecar: SidecarFactory) -> None:
    first, second = await make_sidecar(), await make_sidecar()
    assert first.metrics_port
    assert second.metrics_port
    assert first.metrics_port != second.metrics_port
    async with AsyncSidecarClient(first.address) as client:
        await client.run_tool_loop("go", script=[turn("done")])
    name = "cleveragents_runs_total"
    labels = {"state": "completed", "stop_reason": "final_answer"}
    assert sample(samples((await scrape(first.metrics_port))[1]), name, **labels) == 1
    assert sample(samples((await scrape(second.metrics_port))[1]), name, **labels) == 0


async def test_bad_metrics_addresses_are_configuration_errors(
    make_sidecar: SidecarFactory, tools: Tools
) -> None:
    with pytest.raises(ConfigError, match="metrics_listen"):
        Sidecar(SidecarConfig(listen="127.0.0.1:0", metrics_listen="9090"))
    taken = await make_sidecar()
    busy = Sidecar(
        SidecarConfig(listen="127.0.0.1:0", metrics_listen=f"127.0.0.1:{taken.metrics_port}"),
        registry=tools.registry,
    )
    with pytest.raises(ConfigError, match="cannot serve metrics"):
        await busy.start()
    # The gRPC server it had started is stopped again.
    async with AsyncSidecarClient(busy.address) as client:
        with pytest.raises(SidecarRpcError) as raised:
            await client.list_tools()
    assert raised.value.code is grpc.StatusCode.UNAVAILABLE
