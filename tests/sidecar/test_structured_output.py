"""Structured output over gRPC: a run's output schema, its validated JSON answer in the
result and the terminal event, retries with the error shown to the model, refusals, and
hostile schemas refused without stalling the sidecar. The Python client's types: a dataclass,
a TypedDict, a pydantic model and a plain schema dict."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
from typing import Any, TypedDict

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, OutputType, SidecarRpcError, TypedResult
from cleveragents.sidecar import Sidecar
from cleveragents.tool import (
    LLMDelta,
    LLMRefusal,
    LLMRequest,
    LLMResponded,
    LLMResponse,
    OutputSchema,
    Role,
    RunCompleted,
    StopReason,
    ToolCall,
)
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

from .conftest import SidecarFactory, call, recording_llm, turn


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Line:
    item: str
    quantity: int


@dataclasses.dataclass(frozen=True)
class Invoice:
    """An invoice read from a text."""

    customer: str
    lines: list[Line]
    total: float
    colour: Colour
    note: str | None = None


INVOICE = {
    "customer": "ACME",
    "lines": [{"item": "bolt", "quantity": 3}],
    "total": 12,
    "colour": "blue",
}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


class City(TypedDict):
    city: str
    population: int


def spec_dict(output: Any) -> list[dict[str, Any]]:
    return [{"output": output}]


# -- a scripted run ---------------------------------------------------------------------------


async def test_a_scripted_run_returns_the_validated_answer_as_a_dataclass(
    client: AsyncSidecarClient,
) -> None:
    result = await client.run_tool_loop(
        "Read the invoice.", script=spec_dict(INVOICE), output_type=Invoice
    )
    assert isinstance(result, TypedResult)
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.output == Invoice("ACME", [Line("bolt", 3)], 12.0, Colour.BLUE)
    assert json.loads(result.output_json) == INVOICE
    assert result.content == result.output_json


async def test_the_dataclass_becomes_the_schema_the_run_started_with(
    client: AsyncSidecarClient,
) -> None:
    events = [
        e
        async for e in client.stream_tool_loop(
            "Read.", script=spec_dict(INVOICE), output_type=Invoice
        )
    ]
    spec = await client.get_run(events[0].run_id)
    assert spec.result is not None
    assert OutputType(Invoice).schema.schema["required"] == ["customer", "lines", "total", "colour"]
    assert OutputType(Invoice).schema.description == "An invoice read from a text."
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    assert isinstance(last.result, TypedResult)
    assert last.result.output == Invoice("ACME", [Line("bolt", 3)], 12.0, Colour.BLUE)


async def test_a_typed_dict_output_is_the_parsed_object(client: AsyncSidecarClient) -> None:
    result = await client.run_tool_loop(
        "Which city?", script=spec_dict({"city": "Lyon", "population": 522000}), output_type=City
    )
    assert result.output == {"city": "Lyon", "population": 522000}


async def test_a_schema_dict_output_is_the_parsed_json(client: AsyncSidecarClient) -> None:
    result = await client.run_tool_loop(
        "Which city?", script=spec_dict({"city": "Oslo", "population": 709000}), output_type=SCHEMA
    )
    assert result.output == {"city": "Oslo", "population": 709000}


async def test_a_pydantic_model_output_is_an_instance_of_it(client: AsyncSidecarClient) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Town(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        city: str
        population: int

    result = await client.run_tool_loop(
        "Which city?", script=spec_dict({"city": "Bergen", "population": 291000}), output_type=Town
    )
    assert result.output == Town(city="Bergen", population=291000)


async def test_tools_run_first_and_the_answer_follows(client: AsyncSidecarClient) -> None:
    script = [
        turn("Echoing first.", call("c1", "echo", text="ACME")),
        {"output": INVOICE},
    ]
    result = await client.run_tool_loop("Read.", script=script, output_type=Invoice)
    assert [r.tool_name for r in result.tool_call_history] == ["echo"]
    assert result.iterations == 2
    assert result.output is not None


async def test_the_terminal_event_carries_the_output(client: AsyncSidecarClient) -> None:
    events = [
        e
        async for e in client.stream_tool_loop("x", script=spec_dict(INVOICE), output_type=Invoice)
    ]
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    assert json.loads(terminal.result.output_json) == INVOICE


# -- retries ----------------------------------------------------------------------------------


async def test_an_invalid_answer_is_retried_with_the_error_shown_to_the_model(
    client: AsyncSidecarClient,
) -> None:
    llm = recording_llm(
        [
            LLMResponse("not JSON at all"),
            LLMResponse('{"city": "Rome"}'),
            LLMResponse('{"city": "Rome", "population": 2800000}'),
        ]
    )
    events = [e async for e in client.session("Which city?", llm=llm, output_type=SCHEMA)]
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    assert terminal.result.output_json == '{"city": "Rome", "population": 2800000}'
    shown = [m.content for m in llm.requests[-1].messages if m.role is Role.USER][1:]
    assert "the answer is not JSON" in shown[0]
    assert '"population" is a required property' in shown[1]
    assert [r.iteration for r in llm.requests] == [1, 2, 3]


async def test_past_max_output_retries_the_run_ends_with_its_stop_reason_and_last_text(
    client: AsyncSidecarClient,
) -> None:
    script = [{"content": "nope"}, {"content": '{"city": 3, "population": 1}'}]
    result = await client.run_tool_loop(
        "Which city?", script=script, output_type=SCHEMA, max_output_retries=1
    )
    assert result.stop_reason is StopReason.MAX_OUTPUT_RETRIES
    assert result.terminated_by_limit
    assert result.content == '{"city": 3, "population": 1}'
    assert result.output is None
    assert result.output_json == ""
    assert result.output_error == "at '/city': 3 is not of type \"string\""


async def test_zero_retries_ends_at_the_first_invalid_answer(client: AsyncSidecarClient) -> None:
    result = await client.run_tool_loop(
        "x", script=[{"content": "{}"}], output_type=SCHEMA, max_output_retries=0
    )
    assert result.stop_reason is StopReason.MAX_OUTPUT_RETRIES
    assert result.iterations == 1


async def test_negative_max_output_retries_is_invalid(client: AsyncSidecarClient) -> None:
    with pytest.raises(SidecarRpcError) as raised:
        await client.run_tool_loop("x", script=[{}], output_type=SCHEMA, max_output_retries=-1)
    assert raised.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_output_retries" in str(raised.value)


async def test_a_scripted_refusal_ends_the_run_with_its_stop_reason(
    client: AsyncSidecarClient,
) -> None:
    result = await client.run_tool_loop(
        "x", script=[{"refusal": "I will not read that."}], output_type=SCHEMA
    )
    assert result.stop_reason is StopReason.REFUSAL
    assert result.content == "I will not read that."
    assert not result.terminated_by_limit
    assert result.output is None


# -- a client-hosted LLM ----------------------------------------------------------------------


async def test_a_client_hosted_llm_gets_the_schema_and_its_answer_is_validated(
    client: AsyncSidecarClient,
) -> None:
    seen: list[OutputSchema | None] = []

    async def llm_call(request: LLMRequest) -> LLMResponse:
        seen.append(request.output)
        if request.iteration == 1:
            return LLMResponse("", [ToolCall("c1", "echo", {"text": "Lyon"})])
        return LLMResponse('{"city": "Lyon", "population": 522000}')

    class Hosted:
        call = staticmethod(llm_call)

    events = [
        e
        async for e in client.session(
            "Which city?", llm=Hosted(), output_type=City, tool_names=["echo"]
        )
    ]
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    assert isinstance(terminal.result, TypedResult)
    assert terminal.result.output == {"city": "Lyon", "population": 522000}
    assert seen[0] is not None
    assert seen[0].name == "City"
    assert seen[0].schema == OutputType(City).schema.schema


async def test_a_client_hosted_refusal_ends_the_run(client: AsyncSidecarClient) -> None:
    class Refusing:
        async def call(self, request: LLMRequest) -> LLMResponse:
            return LLMRefusal(refusal="Not this one.")

    events = [e async for e in client.session("x", llm=Refusing(), output_type=SCHEMA)]
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    assert terminal.result.stop_reason is StopReason.REFUSAL
    assert terminal.result.content == "Not this one."
    responded = [e.event for e in events if isinstance(e.event, LLMResponded)]
    assert responded[0].refusal == "Not this one."


# -- streaming --------------------------------------------------------------------------------


async def test_streamed_deltas_join_to_the_json_answer(make_sidecar: SidecarFactory) -> None:
    from cleveragents.sidecar import ProfileConfig

    sidecar = await make_sidecar(
        profiles={"streamed": ProfileConfig(name="streamed", kind="scripted", stream_delay_s=0.0)}
    )
    async with AsyncSidecarClient(sidecar.address) as client:
        events = [
            e
            async for e in client.stream_tool_loop(
                "x", script=spec_dict(INVOICE), output_type=Invoice, profile="streamed",
                stream_deltas=True,
            )
        ]  # fmt: skip
    deltas = [e.event for e in events if isinstance(e.event, LLMDelta)]
    terminal = events[-1].event
    assert isinstance(terminal, RunCompleted)
    assert deltas
    assert "".join(d.text for d in deltas) == terminal.result.output_json


# -- hostile and malformed schemas ------------------------------------------------------------


def doubling_schema(levels: int) -> dict[str, Any]:
    """A small schema whose references double at each level: 2**levels subschemas."""
    defs: dict[str, Any] = {"d0": {"type": "string"}}
    for n in range(1, levels + 1):
        defs[f"d{n}"] = {"allOf": [{"$ref": f"#/$defs/d{n - 1}"}, {"$ref": f"#/$defs/d{n - 1}"}]}
    return {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{levels}"}}, "$defs": defs}


def raw_spec(schema_text: str, name: str = "answer") -> types_pb2.RunSpec:
    return types_pb2.RunSpec(
        prompt="x",
        llm=types_pb2.LlmSelection(script='[{"output": {}}]'),
        output_schema=types_pb2.OutputSchema(name=name, schema=schema_text),
    )


async def refused(sidecar: Sidecar, spec: types_pb2.RunSpec) -> tuple[grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec), timeout=30)
    return raised.value.code(), str(raised.value.details())


@pytest.mark.parametrize(
    ("schema", "names"),
    [
        (doubling_schema(40), "max_schema_expansion"),
        (
            {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
            "outside",
        ),
        ({"type": "object", "properties": {"x": {"type": "string", "pattern": "(a+)+\\1"}}}, "RE2"),
        ({"type": "array"}, '"type": "object"'),
        ({"type": "object", "properties": {"x": {"type": 5}}}, "not a valid JSON Schema"),
    ],
    ids=["doubling-refs", "remote-ref", "backtracking-pattern", "not-an-object", "invalid"],
)
async def test_a_hostile_or_bad_schema_is_refused_invalid_argument(
    sidecar: Sidecar, schema: dict[str, Any], names: str
) -> None:
    code, details = await refused(sidecar, raw_spec(json.dumps(schema)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert names in details


async def test_a_deep_schema_is_refused_naming_max_schema_depth(sidecar: Sidecar) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        schema = {"type": "object", "properties": {"x": schema}}
    code, details = await refused(sidecar, raw_spec(json.dumps(schema)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_schema_depth" in details


async def test_a_schema_over_max_schema_bytes_is_refused_unparsed(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_schema_bytes=4096)
    code, details = await refused(sidecar, raw_spec("{" + " " * 5000 + "}"))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_schema_bytes of 4096" in details


async def test_a_bad_schema_name_is_refused(sidecar: Sidecar) -> None:
    code, details = await refused(sidecar, raw_spec(json.dumps(SCHEMA), name="a name"))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "output schema name" in details


async def test_hostile_schemas_do_not_stall_other_runs(sidecar: Sidecar) -> None:
    """Large hostile schemas are read off the event loop: a run started meanwhile answers
    while they are being refused."""
    big = doubling_schema(30)
    big["description"] = "x" * 200_000  # large enough to be read in a worker thread
    hostile = [asyncio.ensure_future(refused(sidecar, raw_spec(json.dumps(big)))) for _ in range(6)]
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop(
            "x", script=spec_dict({"city": "a", "population": 1}), output_type=City
        )
    assert result.output == {"city": "a", "population": 1}
    outcomes = await asyncio.gather(*hostile)
    assert {code for code, _ in outcomes} == {grpc.StatusCode.INVALID_ARGUMENT}


async def test_an_answer_with_too_many_values_for_a_costly_schema_is_invalid(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(max_validation_steps=10_000)
    schema = doubling_schema(8)  # 2**8 + a few subschemas: at most ~39 values an answer
    schema["properties"]["y"] = {"type": "array"}
    answer = {"x": "s", "y": list(range(100))}
    async with AsyncSidecarClient(sidecar.address) as client:
        result = await client.run_tool_loop(
            "x", script=spec_dict(answer), output_type=schema, max_output_retries=0
        )
    assert result.stop_reason is StopReason.MAX_OUTPUT_RETRIES
    assert "JSON values" in result.output_error


def test_the_same_schema_is_prepared_once_for_run_after_run() -> None:
    from cleveragents.sidecar import SidecarConfig
    from cleveragents.sidecar.output_schemas import CACHED_SCHEMAS
    from cleveragents.sidecar.transport.run_specs import checked_request

    config = SidecarConfig()
    first = checked_request(raw_spec(json.dumps(SCHEMA)), config).output
    again = checked_request(raw_spec(json.dumps(SCHEMA)), config).output
    assert first is not None
    assert again is first
    stricter = checked_request(raw_spec(json.dumps(SCHEMA)), SidecarConfig(max_schema_depth=8))
    assert stricter.output is not first  # measured again against other limits
    for n in range(CACHED_SCHEMAS):
        checked_request(raw_spec(json.dumps(SCHEMA), name=f"other_{n}"), config)
    assert checked_request(raw_spec(json.dumps(SCHEMA)), config).output is not first
