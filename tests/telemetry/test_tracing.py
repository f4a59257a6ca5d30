"""Tracing on a real sidecar: the caller's trace continues through runs, LLM and tool calls."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from cleveragents.client import AsyncSidecarClient, RunFailedError, SidecarRpcError
from cleveragents.sidecar import Sidecar
from cleveragents.tool import StopReason, ToolCallStarted

from .conftest import (
    PARENT_SPAN_ID,
    SECRET_INPUT,
    TRACE_ID,
    TRACEPARENT,
    WAIT_S,
    attrs,
    call,
    spans_by_name,
    turn,
)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _run_span(spans: tuple[ReadableSpan, ...]) -> ReadableSpan:
    (run,) = [s for s in spans if s.name == "invoke_agent"]
    return run


async def test_run_span_continues_the_callers_traceparent(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    async with AsyncSidecarClient(sidecar.address, metadata=[("traceparent", TRACEPARENT)]) as c:
        result = await c.run_tool_loop("go", script=[turn("done")], run_id="traced")
    assert result.stop_reason is StopReason.FINAL_ANSWER
    run = _run_span(exporter.get_finished_spans())
    assert run.context is not None
    assert run.parent is not None
    assert _hex(run.context.trace_id, 32) == TRACE_ID
    assert _hex(run.parent.span_id, 16) == PARENT_SPAN_ID
    assert run.parent.is_remote
    assert attrs(run)["cleveragents.run_id"] == "traced"
    assert attrs(run)["gen_ai.conversation.id"] == "traced"
    assert sidecar.tracing is not None
    assert sidecar.tracing.open_runs == 0


async def test_without_traceparent_a_run_starts_its_own_trace(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("go", script=[turn("done")])
    run = _run_span(exporter.get_finished_spans())
    assert run.parent is None
    assert run.context is not None
    assert _hex(run.context.trace_id, 32) != TRACE_ID


async def test_an_unsampled_caller_gets_no_spans(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    unsampled = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-00"
    async with AsyncSidecarClient(sidecar.address, metadata=[("traceparent", unsampled)]) as c:
        await c.run_tool_loop("go", script=[turn("", call("c1", "echo", text="x")), turn("ok")])
    assert exporter.get_finished_spans() == ()
    assert sidecar.tracing is not None
    assert sidecar.tracing.open_runs == 0


async def test_span_tree_follows_the_genai_conventions(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    script = [
        turn(
            "two calls",
            call("c1", "echo", text=SECRET_INPUT),
            call("c2", "fail", text=SECRET_INPUT),
            usage=(100, 20),
        ),
        turn(SECRET_INPUT, usage=(150, 7)),
    ]
    async with AsyncSidecarClient(sidecar.address, metadata=[("traceparent", TRACEPARENT)]) as c:
        await c.run_tool_loop("go", script=script, model="test-model", run_id="tree")
    spans = exporter.get_finished_spans()
    assert len(spans) == 5
    by_name = spans_by_name(spans)
    run = _run_span(spans)
    assert run.context is not None
    # Every LLM and tool call is a child of the run's span, in the caller's trace.
    for span in spans:
        assert span.context is not None
        assert _hex(span.context.trace_id, 32) == TRACE_ID
        if span is not run:
            assert span.parent is not None
            assert span.parent.span_id == run.context.span_id

    assert run.kind is SpanKind.INTERNAL
    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "cleveragents.scripted",
        "gen_ai.request.model": "test-model",
        "gen_ai.conversation.id": "tree",
        "cleveragents.run_id": "tree",
        "cleveragents.llm.profile": "scripted",
        "cleveragents.max_iterations": 25,
        "cleveragents.stop_reason": "final_answer",
        "cleveragents.iterations": 2,
        "cleveragents.tool_calls": 2,
        "cleveragents.tool_calls.failed": 1,
        "gen_ai.usage.input_tokens": 250,
        "gen_ai.usage.output_tokens": 27,
    }
    assert run.status.status_code is StatusCode.UNSET

    chats = by_name["chat test-model"]
    assert [attrs(s)["cleveragents.iteration"] for s in chats] == [1, 2]
    assert [attrs(s)["gen_ai.usage.input_tokens"] for s in chats] == [100, 150]
    assert [attrs(s)["gen_ai.usage.output_tokens"] for s in chats] == [20, 7]
    for chat in chats:
        assert attrs(chat).keys() == {
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "cleveragents.iteration",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
        }
        assert attrs(chat)["gen_ai.operation.name"] == "chat"
        assert attrs(chat)["gen_ai.provider.name"] == "cleveragents.scripted"
        assert attrs(chat)["gen_ai.request.model"] == "test-model"
        assert chat.kind is SpanKind.INTERNAL  # a script plays the model in-process

    (echo,) = by_name["execute_tool echo"]
    (fail,) = by_name["execute_tool fail"]
    assert attrs(echo) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "cleveragents.iteration": 1,
    }
    assert echo.status.status_code is StatusCode.UNSET
    assert fail.status.status_code is StatusCode.ERROR
    assert attrs(fail)["error.type"] == "exception"
    assert attrs(fail)["gen_ai.tool.call.id"] == "c2"
    # The tools ran between the two LLM calls.
    assert chats[0].end_time is not None
    assert chats[1].start_time is not None
    for tool in (echo, fail):
        assert tool.start_time is not None
        assert tool.end_time is not None
        assert chats[0].end_time <= tool.start_time <= tool.end_time <= chats[1].start_time

    # Tool inputs, outputs and the model's text stay out of every span.
    for span in spans:
        for value in attrs(span).values():
            assert SECRET_INPUT not in str(value)
        assert SECRET_INPUT not in (span.status.description or "")


async def test_parallel_tool_calls_have_overlapping_spans(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    script = [turn("", call("a", "nap", seconds=0.05), call("b", "nap", seconds=0.05)), turn("ok")]
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop("go", script=script)
    naps = spans_by_name(exporter.get_finished_spans())["execute_tool nap"]
    assert sorted(attrs(s)["gen_ai.tool.call.id"] for s in naps) == ["a", "b"]
    first, second = naps
    assert first.start_time is not None
    assert first.end_time is not None
    assert second.start_time is not None
    assert second.end_time is not None
    assert first.start_time < second.end_time
    assert second.start_time < first.end_time


async def test_a_failed_run_marks_its_span_and_the_interrupted_llm_call(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    # The script holds one turn; the second LLM call finds it exhausted and the run fails.
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(RunFailedError):
            await client.run_tool_loop("go", script=[turn("", call("c1", "echo", text="x"))])
    spans = exporter.get_finished_spans()
    run = _run_span(spans)
    assert run.status.status_code is StatusCode.ERROR
    assert "script" in (run.status.description or "")
    assert attrs(run)["error.type"] == "ScriptExhaustedError"
    assert attrs(run)["cleveragents.stop_reason"] == "error"
    first, second = spans_by_name(spans)["chat"]
    assert first.status.status_code is StatusCode.UNSET
    assert second.status.status_code is StatusCode.ERROR
    assert attrs(second)["error.type"] == "ScriptExhaustedError"
    assert sidecar.tracing is not None
    assert sidecar.tracing.open_runs == 0


async def test_a_cancelled_run_closes_its_tool_call_as_cancelled(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    script = [turn("", call("g1", "gate")), turn("never")]
    async with AsyncSidecarClient(sidecar.address, metadata=[("traceparent", TRACEPARENT)]) as c:
        stream = c.stream_tool_loop("go", script=script, run_id="to-cancel", detach=True)
        async with asyncio.timeout(WAIT_S):
            async for streamed in stream:
                if isinstance(streamed.event, ToolCallStarted):
                    break
        await stream.aclose()
        assert await c.cancel_run("to-cancel", reason="enough") == "cancelled"
    spans = exporter.get_finished_spans()
    run = _run_span(spans)
    assert attrs(run)["cleveragents.stop_reason"] == "cancelled"
    assert run.status.status_code is StatusCode.UNSET  # asked for, not an error
    (gate,) = spans_by_name(spans)["execute_tool gate"]
    assert gate.status.status_code is StatusCode.ERROR
    assert attrs(gate)["error.type"] == "cancelled"
    assert gate.end_time is not None
    assert run.end_time is not None
    assert gate.end_time <= run.end_time


async def test_a_run_past_its_deadline_is_an_error(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    script = [turn("", call("g1", "gate")), turn("never")]
    async with AsyncSidecarClient(sidecar.address) as client:
        # The run's budget is the call's deadline: the answer (a result stopped by the
        # deadline) and the client's own DEADLINE_EXCEEDED race; either is right.
        outcome: object
        try:
            result = await client.run_tool_loop("go", script=script, run_id="late", timeout=0.3)
            outcome = result.stop_reason
        except SidecarRpcError as exc:
            outcome = exc.code
    assert outcome in (StopReason.DEADLINE, grpc.StatusCode.DEADLINE_EXCEEDED)
    # The run ends at the same deadline, by its own timer; its span closes before it is logged.
    async with asyncio.timeout(WAIT_S):
        await sidecar.manager.require("late").wait()
    run = _run_span(exporter.get_finished_spans())
    assert attrs(run)["cleveragents.stop_reason"] == "deadline"
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["error.type"] == "deadline"


async def test_session_tools_hosted_by_the_client_are_traced(
    sidecar: Sidecar, exporter: InMemorySpanExporter
) -> None:
    def shout(text: str) -> str:
        """Upper-case the text.

        Args:
            text: What to shout.
        """
        return text.upper()

    script = [turn("", call("s1", "shout", text="hi")), turn("done")]
    async with AsyncSidecarClient(sidecar.address, metadata=[("traceparent", TRACEPARENT)]) as c:
        async with asyncio.timeout(WAIT_S):
            async for _ in c.session("go", tools=[shout], script=script):
                pass
    spans = exporter.get_finished_spans()
    (tool,) = spans_by_name(spans)["execute_tool shout"]
    run = _run_span(spans)
    assert run.parent is not None
    assert _hex(run.parent.span_id, 16) == PARENT_SPAN_ID
    assert tool.parent is not None
    assert run.context is not None
    assert tool.parent.span_id == run.context.span_id
    assert tool.status.status_code is StatusCode.UNSET
