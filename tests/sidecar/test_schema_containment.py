"""No JSON Schema a client sends holds up another run: costly schemas are refused at Session
start naming the limit, and the largest accepted one validates while other runs go on."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import ConfigError, SidecarConfig, load_config
from cleveragents.tool import ToolCallCompleted
from cleveragents.tool.execution.schemacost import SchemaCostError, measure_schema
from cleveragents.toolruntime.v1 import service_pb2_grpc, types_pb2

from .conftest import (
    call,
    cli_sidecar,
    drain_session,
    read_to_status,
    read_until_invocation,
    run_spec,
    session_start,
    tool_result,
    turn,
)

if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub as Stub
else:
    Stub = Any

#: How long each step of the steady run waits, and how far behind its events may fall. The
#: attacks this guards against stalled every run for 2.5 to 25 s; a loaded 2-core machine
#: delays a health check or an event by a few hundred milliseconds on its own (a 0.1 s bound
#: failed so), so the bound is generous: the speed itself is measured by `make bench`.
STEP_S = 0.01
BOUND_S = 2.0
DEFAULTS = SidecarConfig()


def doubling(levels: int, *, items: bool = False) -> dict[str, Any]:
    """Each definition is all of the previous one, twice; ``x`` is one, or an array of them."""
    defs: dict[str, Any] = {"a0": {"type": "string"}}
    for i in range(1, levels + 1):
        defs[f"a{i}"] = {"allOf": [{"$ref": f"#/$defs/a{i - 1}"}, {"$ref": f"#/$defs/a{i - 1}"}]}
    x: dict[str, Any] = {"$ref": f"#/$defs/a{levels}"}
    if items:
        x = {"type": "array", "items": x}
    return {"type": "object", "properties": {"x": x}, "$defs": defs}


def largest_accepted() -> int:
    """The most doubling levels the default limits accept."""
    levels = 1
    while True:
        try:
            measure_schema(
                doubling(levels + 1, items=True),
                max_depth=DEFAULTS.limits.max_schema_depth,
                max_expansion=DEFAULTS.limits.max_schema_expansion,
            )
        except SchemaCostError:
            return levels
        levels += 1


def tool(name: str, schema: dict[str, Any]) -> types_pb2.ToolSpec:
    return types_pb2.ToolSpec(name=name, input_schema=json.dumps(schema))


async def refused_at_31_levels(stub: Stub) -> str:
    """A session declaring the 31-level schema (and a call of it): the status details."""
    script = [turn("", call("d1", "deep", x="a")), turn("done")]
    session = stub.Session()
    await session.write(session_start(run_spec(script), tool("deep", doubling(31))))
    _, code, details = await read_to_status(session)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    return details


async def validated_at_the_limit(stub: Stub, levels: int) -> list[Any]:
    """A session with the largest accepted schema, called with arguments it validates, and
    with arguments too many to validate: the records."""
    fits = ["a"] * 150
    too_many = ["a"] * 5000
    script = [
        turn("", call("w1", "wide", x=fits), call("w2", "wide", x=too_many)),
        turn("done"),
    ]
    session = stub.Session()
    await session.write(session_start(run_spec(script), tool("wide", doubling(levels, items=True))))
    events: list[Any] = []
    invocation = await read_until_invocation(session, events)
    assert invocation.call_id == "w1"
    await session.write(tool_result("w1", output='{"ok": true}'))
    events += await drain_session(session)
    assert await session.code() == grpc.StatusCode.OK
    records = [e.tool_call_completed.record for e in events if e.HasField("tool_call_completed")]
    return sorted(records, key=lambda r: str(r.call_id))


async def test_no_schema_a_client_sends_holds_up_another_run_or_the_health_check() -> None:
    levels = largest_accepted()
    steps = [turn("", call(f"s{i}", "sleep", seconds=STEP_S)) for i in range(990)]
    async with (
        cli_sidecar("--log-level", "warning") as (_, address),
        AsyncSidecarClient(address) as client,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        health: Any = health_pb2_grpc.HealthStub(channel)
        first_event = asyncio.Event()
        attacked = asyncio.Event()
        gaps: list[float] = []
        checks: list[float] = []

        async def steady() -> None:
            last, event = None, None
            stream = client.stream_tool_loop(
                "tick", script=[*steps, turn("done")], max_iterations=1000
            )
            async for event in stream:
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now
                first_event.set()
                if attacked.is_set() and isinstance(event.event, ToolCallCompleted):
                    await stream.aclose()
                    return
            raise AssertionError(f"the steady run ended before the attack did: {event}")

        async def probe() -> None:
            while not attacked.is_set():
                began = time.perf_counter()
                await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                checks.append(time.perf_counter() - began)

        async def attack() -> tuple[str, list[Any]]:
            await first_event.wait()
            try:
                for _ in range(3):
                    details = await refused_at_31_levels(stub)
                    records = await validated_at_the_limit(stub, levels)
                return details, records
            finally:
                attacked.set()

        async with asyncio.timeout(60), asyncio.TaskGroup() as group:
            group.create_task(steady())
            group.create_task(probe())
            attacking = group.create_task(attack())
        details, records = attacking.result()

    assert details == (
        "start.tools[0] ('deep') has an input_schema that expands to more than 10000 "
        "subschemas when its references are followed (this sidecar's max_schema_expansion "
        "is 10000)"
    )
    fits, too_many = records
    assert fits.success
    assert not too_many.success
    assert too_many.error_kind == types_pb2.ERROR_KIND_INVALID_ARGUMENTS
    assert "the arguments hold more than" in too_many.error
    assert len(gaps) > 10
    assert checks
    assert max(gaps) < STEP_S + BOUND_S, sorted(gaps)[-5:]
    assert max(checks) < BOUND_S, sorted(checks)[-5:]


async def _refusal(stub: Any, schema_text: str) -> str:
    session = stub.Session()
    spec = types_pb2.ToolSpec(name="t", input_schema=schema_text)
    await session.write(session_start(run_spec([turn("done")]), spec))
    _, code, details = await read_to_status(session)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    return str(details)


async def test_a_schema_over_max_schema_bytes_is_refused_unparsed(stub: Any) -> None:
    cap = DEFAULTS.limits.max_schema_bytes
    padding = "x" * cap
    details = await _refusal(stub, json.dumps({"type": "object", "description": padding}))
    assert details == (
        f"start.tools[0] ('t') has an input_schema of {cap + 37} bytes, "
        f"more than this sidecar's max_schema_bytes of {cap}"
    )


async def test_a_schema_nested_past_max_schema_depth_is_refused(stub: Any) -> None:
    text = '{"items": ' * 70 + "{}" + "}" * 70
    details = await _refusal(stub, text)
    assert details == (
        "start.tools[0] ('t') has an input_schema that nests more than 64 levels deep "
        "(this sidecar's max_schema_depth is 64)"
    )


async def test_a_schema_referring_to_a_url_is_refused_before_anything_fetches_it(
    stub: Any,
) -> None:
    details = await _refusal(stub, '{"$ref": "http://192.0.2.1/schema.json"}')
    assert details.startswith(
        "start.tools[0] ('t') has an input_schema that has a $ref "
        "'http://192.0.2.1/schema.json' that points outside the schema"
    )


def test_the_schema_limits_are_settings_checked_when_built() -> None:
    for name in ("max_schema_bytes", "max_schema_depth", "max_schema_expansion"):
        zero: dict[str, Any] = {name: 0}
        with pytest.raises(ConfigError, match=f"{name} must be at least 1"):
            dataclasses.replace(DEFAULTS, **zero)
    with pytest.raises(ConfigError, match="max_validation_steps must be at least 1"):
        SidecarConfig(max_validation_steps=0)
    env = {
        "CLEVERAGENTS_SIDECAR_MAX_SCHEMA_EXPANSION": "50",
        "CLEVERAGENTS_SIDECAR_MAX_VALIDATION_STEPS": "500",
    }
    config = load_config(env=env)
    assert (config.limits.max_schema_expansion, config.limits.max_validation_steps) == (50, 500)


async def test_configured_limits_apply_to_schemas_and_arguments(make_sidecar: Any) -> None:
    sidecar = await make_sidecar(max_schema_expansion=50, max_validation_steps=500)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        details = await _refusal(stub, json.dumps(doubling(4)))
        assert details.endswith("(this sidecar's max_schema_expansion is 50)")
        script = [turn("", call("w1", "wide", x=["a"] * 20)), turn("done")]
        session = stub.Session()
        await session.write(session_start(run_spec(script), tool("wide", doubling(3, items=True))))
        events = await drain_session(session)
    (record,) = [e.tool_call_completed.record for e in events if e.HasField("tool_call_completed")]
    assert record.error_kind == types_pb2.ERROR_KIND_INVALID_ARGUMENTS
    assert "the arguments hold more than 12 JSON values" in record.error


async def test_a_backtracking_pattern_is_refused_before_it_can_stall_validation(
    stub: Any,
) -> None:
    # With 100 different strings to check, this pattern held the event loop for 1.2 s.
    schema = {"type": "array", "items": {"type": "string", "pattern": "^(a|a)+(?=b)$"}}
    details = await _refusal(stub, json.dumps({"properties": {"x": schema}}))
    assert details.startswith(
        "start.tools[0] ('t') has an input_schema that has a pattern '^(a|a)+(?=b)$' that is "
        "not RE2 syntax (invalid perl operator: (?=)"
    )
