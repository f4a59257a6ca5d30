"""Whatever a client sends, only the API's statuses come back and nothing is left running."""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleveragents.toolruntime.v1 import service_pb2, session_pb2, types_pb2

from .conftest import LiveSidecar

C = grpc.StatusCode
#: API.md's table, plus UNAVAILABLE (or FAILED_PRECONDITION) for a run whose LLM fails, the unary
#: RunToolLoop's way of reporting run_failed, DEADLINE_EXCEEDED from the client's deadline,
#: and PERMISSION_DENIED for what a governance policy does not allow.
ALLOWED = {
    C.OK, C.INVALID_ARGUMENT, C.NOT_FOUND, C.ALREADY_EXISTS, C.RESOURCE_EXHAUSTED,
    C.FAILED_PRECONDITION, C.UNAVAILABLE, C.DEADLINE_EXCEEDED,
    C.PERMISSION_DENIED,  # a governance rule: a client tool named like a server tool, say
}  # fmt: skip

PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
json_text = st.one_of(json_values.map(json.dumps), st.text(max_size=20), st.just(""), st.just("{}"))
tool_call = st.fixed_dictionaries(
    {"name": st.sampled_from(["echo", "sleep", "nope", "client_tool", ""])},
    optional={
        "id": st.text(max_size=6),
        "arguments": st.one_of(json_values, st.just({"text": "x"}), st.just({"seconds": 0})),
    },
)
turn = st.fixed_dictionaries(
    {},
    optional={
        "content": st.one_of(st.text(max_size=10), st.integers()),
        "tool_calls": st.lists(tool_call, max_size=3),
        "usage": st.one_of(
            st.fixed_dictionaries({"input_tokens": st.integers(-1, 9)}), st.just("x")
        ),
        "extra": st.just(1),
    },
)
scripts = st.one_of(st.lists(turn, max_size=4).map(json.dumps), st.text(max_size=12), st.just(""))
contexts = st.builds(
    types_pb2.ToolActorContext,
    plan_id=st.text(max_size=5),
    sandbox_root=st.text(max_size=10),
    resource_bindings=json_text,
    project_resources=json_text,
)
specs = st.builds(
    types_pb2.RunSpec,
    prompt=st.one_of(st.text(max_size=20), st.just("  "), st.just("go")),
    context=contexts,
    max_iterations=st.integers(-3, 60),
    llm=st.builds(
        types_pb2.LlmSelection,
        profile=st.sampled_from(["", "scripted", "client", "nope"]),
        model=st.text(max_size=5),
        script=scripts,
    ),
    tool_names=st.lists(st.sampled_from(["echo", "sleep", "nope", "client_tool"]), max_size=3),
    run_id=st.one_of(st.just(""), st.text(max_size=6), st.just("x" * 200)),
    detach=st.booleans(),
)
tool_specs = st.builds(
    types_pb2.ToolSpec,
    name=st.one_of(st.sampled_from(["client_tool", "echo"]), st.text(max_size=8)),
    input_schema=st.one_of(json_text, st.just('{"type": "object"}')),
)
session_messages = st.one_of(
    st.builds(
        lambda spec, tools, client_llm: session_pb2.SessionRequest(
            start=session_pb2.SessionStart(spec=spec, tools=tools, client_llm=client_llm)
        ),
        specs, st.lists(tool_specs, max_size=2), st.booleans(),
    ),
    st.builds(
        lambda call_id, output, error: session_pb2.SessionRequest(
            tool_result=session_pb2.ToolResult(call_id=call_id, output=output)
            if error is None
            else session_pb2.ToolResult(call_id=call_id, error=error)
        ),
        st.sampled_from(["c1", "call_1_1", "", "zzz"]), json_text, st.none() | st.text(max_size=5),
    ),
    st.builds(
        lambda request_id, content: session_pb2.SessionRequest(
            llm_result=session_pb2.LlmResult(request_id=request_id, content=content)
        ),
        st.sampled_from(["llm_1", "llm_2", "x"]), st.text(max_size=5),
    ),
    st.builds(
        lambda reason: session_pb2.SessionRequest(cancel=session_pb2.SessionCancel(reason=reason)),
        st.text(max_size=5),
    ),
    st.just(session_pb2.SessionRequest()),
)  # fmt: skip


def _settle(live: LiveSidecar, baseline_tasks: int) -> None:
    """Wait (bounded) until no run is live and the server's task count is back to baseline."""
    limit = time.monotonic() + 10
    while time.monotonic() < limit:
        if live.live_runs() == 0 and live.tasks() <= baseline_tasks:
            return
        time.sleep(0.01)
    raise AssertionError(
        f"the server kept {live.live_runs()} runs and {live.tasks()} tasks "
        f"(baseline {baseline_tasks})"
    )


@PROPERTY_SETTINGS
@given(spec=specs)
def test_any_run_spec_gets_an_api_status_and_leaves_nothing_running(
    live: LiveSidecar, spec: types_pb2.RunSpec
) -> None:
    baseline = live.tasks()
    details: str | None = "ok"
    try:
        live.stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec), timeout=10)
        code = C.OK
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details()
    assert code in ALLOWED
    assert details, "every refusal says why"
    _settle(live, baseline)


@PROPERTY_SETTINGS
@given(messages=st.lists(session_messages, min_size=0, max_size=5))
def test_any_session_message_sequence_gets_an_api_status_and_leaves_nothing_running(
    live: LiveSidecar, messages: list[session_pb2.SessionRequest]
) -> None:
    baseline = live.tasks()
    responses: Any = live.stub.Session(iter(messages), timeout=10)
    try:
        for _ in responses:
            pass
        code = C.OK
    except grpc.RpcError as exc:
        code = exc.code()
    assert code in ALLOWED | {C.CANCELLED}
    _settle(live, baseline)


@PROPERTY_SETTINGS
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_as_a_request_are_refused_cleanly(live: LiveSidecar, data: bytes) -> None:
    raw: Any = live.channel.unary_unary(
        "/cleveragents.toolruntime.v1.ToolRuntimeService/RunToolLoop",
        request_serializer=None,
        response_deserializer=None,
    )
    try:
        raw(data, timeout=10)
        code = C.OK
    except grpc.RpcError as exc:
        code = exc.code()
    assert code in ALLOWED | {C.INTERNAL}  # INTERNAL: grpc's own "failed to deserialize"
    assert live.live_runs() == 0 or code is C.OK
