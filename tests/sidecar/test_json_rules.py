"""JSON text fields carry standard JSON only: what is not standard is ``INVALID_ARGUMENT`` in a
client's request and a failed record (that the model sees) in a tool call, never a crashed run
or non-JSON text in a record."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import LLMRequest, LLMResponse, RunFailed, ToolCall, ToolCallStarted
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, session_pb2, types_pb2

from .conftest import (
    WAIT_S,
    call,
    drain_session,
    next_response,
    read_until_invocation,
    rpc_code,
    run_spec,
    session_start,
    tool_result,
    turn,
)

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub
else:
    Stub = Any


def _strict(text: str) -> Any:
    """Parse ``text`` as standard JSON only (the stdlib alone accepts NaN)."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in a record")

    return json.loads(text, parse_constant=refuse)


async def _unary(stub: Stub, spec: types_pb2.RunSpec) -> tuple[grpc.StatusCode, str]:
    return await rpc_code(stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec)))


def _script_spec(text: str) -> types_pb2.RunSpec:
    spec = run_spec(prompt="go")
    spec.llm.script = text
    return spec


async def test_a_5000_digit_integer_in_llm_script_is_invalid_argument(stub: Stub) -> None:
    text = '[{"tool_calls": [{"name": "echo", "arguments": {"text": ' + "7" * 5000 + "}}]}]"
    code, details = await _unary(stub, _script_spec(text))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == (
        "llm.script is not valid JSON (an integer has more than 4300 digits at position 56)"
    )


async def test_usage_beyond_int64_in_llm_script_is_invalid_argument(stub: Stub) -> None:
    usage = {"input_tokens": 10**30, "output_tokens": 1}
    code, details = await _unary(stub, run_spec([{"content": "done", "usage": usage}]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "llm.script[0]: usage token counts must be at most 9223372036854775807" in details


async def test_nan_and_infinity_in_llm_script_are_invalid_argument(stub: Stub) -> None:
    for token in ("NaN", "Infinity", "-Infinity", "1e999"):
        text = '[{"tool_calls": [{"name": "echo", "arguments": {"n": ' + token + "}}]}]"
        code, details = await _unary(stub, _script_spec(text))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, token
        assert details.startswith("llm.script is not valid JSON (")
        assert "at position 53)" in details


async def test_a_lone_surrogate_in_a_scripted_file_path_is_invalid_argument(stub: Stub) -> None:
    text = '[{"tool_calls": [{"name": "read_file", "arguments": {"path": "a\\ud83d.txt"}}]}]'
    code, details = await _unary(stub, _script_spec(text))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(
        "llm.script is not valid JSON (a string holds a lone surrogate \\ud83d (half of a character"
    )


async def test_nan_in_a_context_field_is_invalid_argument_naming_the_field(stub: Stub) -> None:
    spec = run_spec([turn("done")])
    spec.context.resource_bindings = '{"budget": NaN}'
    code, details = await _unary(stub, spec)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("context.resource_bindings is not valid JSON (NaN is not a JSON")


async def _completed(call_: Any, events: list[events_pb2.RunEvent]) -> list[Any]:
    return [e.tool_call_completed.record for e in events if e.HasField("tool_call_completed")]


async def test_nan_arguments_from_a_client_llm_are_a_failed_record_the_model_sees(
    stub: Stub,
) -> None:
    session = stub.Session(timeout=WAIT_S)
    await session.write(session_start(run_spec(prompt="go"), client_llm=True))
    events: list[events_pb2.RunEvent] = []
    first = await _llm_invocation(session, events)
    bad = types_pb2.ToolCall(id="c1", name="echo", arguments='{"text": NaN}')
    result = session_pb2.LlmResult(request_id=first.request_id, tool_calls=[bad])
    await session.write(session_pb2.SessionRequest(llm_result=result))
    second = await _llm_invocation(session, events)
    answer = second.messages[-1]
    assert (answer.role, answer.tool_call_id, answer.is_error) == (types_pb2.ROLE_TOOL, "c1", True)
    assert "NaN is not a JSON number" in answer.content
    done = session_pb2.LlmResult(request_id=second.request_id, content="done")
    await session.write(session_pb2.SessionRequest(llm_result=done))
    events += await drain_session(session)
    assert await session.code() == grpc.StatusCode.OK
    (record,) = await _completed(session, events)
    assert not record.success
    assert record.error_kind == types_pb2.ERROR_KIND_INVALID_ARGUMENTS
    assert record.error.startswith("invalid arguments for tool 'echo': arguments are not valid")
    assert _strict(record.inputs) == {}
    assert _strict(record.output) == {}
    assert events[-1].HasField("run_completed")


async def test_a_client_tool_output_with_a_lone_surrogate_is_a_failed_record(stub: Stub) -> None:
    tool = types_pb2.ToolSpec(name="cut", input_schema='{"type": "object"}')
    script = [turn("", call("c1", "cut"), call("c2", "echo", text="ok")), turn("done")]
    session = stub.Session(timeout=WAIT_S)
    await session.write(session_start(run_spec(script), tool))
    events: list[events_pb2.RunEvent] = []
    invocation = await read_until_invocation(session, events)
    assert invocation.call_id == "c1"
    # What JavaScript's JSON.stringify writes for '🙂🙂🙂'.slice(0, 5).
    await session.write(tool_result("c1", output='"\U0001f642\U0001f642\\ud83d"'))
    events += await drain_session(session)
    assert await session.code() == grpc.StatusCode.OK
    started = [e.tool_call_started.call_id for e in events if e.HasField("tool_call_started")]
    records = await _completed(session, events)
    assert sorted(started) == sorted(r.call_id for r in records) == ["c1", "c2"]
    cut = next(r for r in records if r.call_id == "c1")
    assert not cut.success
    assert cut.error_kind == types_pb2.ERROR_KIND_EXCEPTION
    assert "output of 'cut' is not valid JSON (a string holds a lone surrogate \\ud83d" in cut.error
    assert events[-1].HasField("run_completed")


async def _llm_invocation(
    session: Any, events: list[events_pb2.RunEvent]
) -> session_pb2.LlmInvocation:
    while True:
        response = await next_response(session)
        if response.HasField("llm_invocation"):
            return response.llm_invocation
        if response.HasField("event"):
            events.append(response.event)


async def test_a_python_client_llm_answer_the_wire_cannot_carry_fails_the_run_clearly(
    client: AsyncSidecarClient,
) -> None:
    answers = {
        "content": LLMResponse(content="cut \ud83d"),
        "arguments": LLMResponse(tool_calls=[ToolCall("c1", "echo", {"text": float("nan")})]),
    }
    for what, answer in answers.items():

        class Unsendable:
            async def call(self, request: LLMRequest, answer: LLMResponse = answer) -> LLMResponse:
                return answer

        events = [e async for e in client.session("go", llm=Unsendable())]
        failed = events[-1].event
        assert isinstance(failed, RunFailed), what
        assert "the client's LLM failed: " in failed.message
        assert ("UnicodeEncodeError" if what == "content" else "not JSON compliant") in (
            failed.message
        )
        assert not any(isinstance(e.event, ToolCallStarted) for e in events)
