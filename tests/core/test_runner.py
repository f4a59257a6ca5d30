"""ToolRunner: resolve, validate (and thread the context), execute, record."""

import asyncio
import enum
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from cleveragents.tool import (
    ErrorKind,
    ToolActorContext,
    ToolCall,
    ToolCallRecord,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)


class Shade(enum.Enum):
    LIGHT = "light"
    DARK = "dark"


CONTEXT = ToolActorContext(
    plan_id="plan-1",
    phase="execute",
    sandbox_root="/tmp/sandbox",
    resource_bindings={"repo": "git://example/repo"},
)
CONTEXT_KEYS = {"sandbox_root": "/tmp/sandbox", "resource_bindings": {"repo": "git://example/repo"}}


async def run_one(
    registry: ToolRegistry,
    call: ToolCall,
    *,
    context: ToolActorContext | None = None,
    iteration: int = 1,
    default_timeout_s: float | None = None,
) -> ToolCallRecord:
    runner = ToolRunner(registry, default_timeout_s=default_timeout_s)
    return await runner.run(call, iteration=iteration, context=context)


# -- construction ------------------------------------------------------------------------------


def test_runner_needs_a_tool_registry() -> None:
    with pytest.raises(TypeError, match="registry must be a ToolRegistry, got dict"):
        ToolRunner({})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_default_timeout_must_be_a_positive_finite_number(bad: float) -> None:
    with pytest.raises(ValueError, match="default_timeout_s must be a positive number"):
        ToolRunner(ToolRegistry(), default_timeout_s=bad)


# -- stage 1: resolve --------------------------------------------------------------------------


async def test_unknown_tool_becomes_a_failed_record_naming_the_tool(
    registry: ToolRegistry,
) -> None:
    record = await run_one(registry, ToolCall("c1", "nope", {"x": 1}), iteration=3)

    assert record.success is False
    assert record.error_kind is ErrorKind.UNKNOWN_TOOL
    assert record.error is not None
    assert "'nope'" in record.error
    assert "add, echo, boom" in record.error
    assert record.output == {}
    assert record.tool_name == "nope"
    assert record.call_id == "c1"
    assert record.iteration == 3


# -- stage 2: validate -------------------------------------------------------------------------


async def test_invalid_arguments_become_a_failed_record_naming_the_field() -> None:
    registry = ToolRegistry()
    ran: list[int] = []

    @registry.tool
    def repeat(text: str, count: int) -> str:
        ran.append(count)
        return text * count

    record = await run_one(registry, ToolCall("c1", "repeat", {"text": "a", "count": "three"}))

    assert record.success is False
    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert record.error is not None
    assert "'repeat'" in record.error
    assert "count" in record.error
    assert "integer" in record.error
    assert record.output == {}
    assert ran == []


async def test_missing_required_field_is_named_in_the_error() -> None:
    registry = ToolRegistry()

    @registry.tool
    def repeat(text: str, count: int) -> str:
        return text * count

    record = await run_one(registry, ToolCall("c1", "repeat", {"text": "a"}))

    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert record.error is not None
    assert '"count" is a required property' in record.error


async def test_unexpected_field_is_rejected_by_a_derived_schema() -> None:
    registry = ToolRegistry()

    @registry.tool
    def ping() -> str:
        return "pong"

    record = await run_one(registry, ToolCall("c1", "ping", {"loud": True}))

    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert record.error is not None
    assert "loud" in record.error


async def test_values_outside_an_enum_are_invalid_arguments() -> None:
    registry = ToolRegistry()

    @registry.tool
    def paint(shade: Shade) -> str:
        return "ok"

    record = await run_one(registry, ToolCall("c1", "paint", {"shade": "purple"}))

    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert record.error is not None
    assert "purple" in record.error


async def test_arguments_error_becomes_invalid_arguments_without_running_the_handler(
    registry: ToolRegistry,
) -> None:
    call = ToolCall("c1", "echo", {}, arguments_error="arguments are not valid JSON")

    record = await run_one(registry, call)

    assert record.success is False
    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert record.error == "invalid arguments for tool 'echo': arguments are not valid JSON"
    assert record.output == {}


async def test_call_with_unparseable_arguments_still_records_the_context_keys(
    registry: ToolRegistry,
) -> None:
    call = ToolCall("c1", "echo", {}, arguments_error="arguments are not valid JSON")

    record = await run_one(registry, call, context=CONTEXT)

    assert record.inputs == CONTEXT_KEYS


async def test_arguments_that_are_not_json_values_become_a_failed_record(
    registry: ToolRegistry,
) -> None:
    record = await run_one(registry, ToolCall("c1", "add", {"a": {1, 2}, "b": 1}))

    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS


# -- stage 2b: sandbox threading ---------------------------------------------------------------


async def test_context_keys_are_added_to_a_dict_handler_inputs() -> None:
    registry = ToolRegistry()
    seen: list[dict[str, Any]] = []

    def look(inputs: Mapping[str, Any]) -> None:
        seen.append(dict(inputs))

    registry.register(ToolSpec("look"), look)

    record = await run_one(registry, ToolCall("c1", "look", {"path": "a.txt"}), context=CONTEXT)

    assert seen == [{"path": "a.txt", **CONTEXT_KEYS}]
    assert record.inputs == {"path": "a.txt", **CONTEXT_KEYS}


async def test_decorated_handler_declaring_context_parameters_receives_them() -> None:
    registry = ToolRegistry()
    seen: list[tuple[str, str | None, dict[str, Any] | None]] = []

    @registry.tool
    def look(
        path: str, sandbox_root: str | None = None, resource_bindings: dict[str, Any] | None = None
    ) -> None:
        seen.append((path, sandbox_root, resource_bindings))

    record = await run_one(registry, ToolCall("c1", "look", {"path": "a.txt"}), context=CONTEXT)

    assert record.success is True
    assert seen == [("a.txt", "/tmp/sandbox", {"repo": "git://example/repo"})]


async def test_decorated_handler_without_context_parameters_is_called_without_them() -> None:
    registry = ToolRegistry()
    seen: list[str] = []

    @registry.tool
    def look(path: str) -> None:
        seen.append(path)

    record = await run_one(registry, ToolCall("c1", "look", {"path": "a.txt"}), context=CONTEXT)

    assert record.success is True
    assert record.error is None
    assert seen == ["a.txt"]
    assert record.inputs == {"path": "a.txt", **CONTEXT_KEYS}


async def test_decorated_handler_taking_var_keywords_receives_the_context_keys() -> None:
    registry = ToolRegistry()
    seen: list[dict[str, Any]] = []

    @registry.tool
    def look(path: str, **extra: Any) -> None:
        seen.append({"path": path, **extra})

    await run_one(registry, ToolCall("c1", "look", {"path": "a.txt"}), context=CONTEXT)

    assert seen == [{"path": "a.txt", **CONTEXT_KEYS}]


@pytest.mark.parametrize("key", ["sandbox_root", "resource_bindings"])
async def test_model_cannot_override_a_context_key(key: str) -> None:
    registry = ToolRegistry()
    seen: list[dict[str, Any]] = []

    def look(inputs: Mapping[str, Any]) -> None:
        seen.append(dict(inputs))

    registry.register(ToolSpec("look"), look)
    call = ToolCall("c1", "look", {"path": "a.txt", key: "/etc"})

    record = await run_one(registry, call, context=CONTEXT)

    assert seen[0][key] == CONTEXT_KEYS[key]
    assert record.inputs[key] == CONTEXT_KEYS[key]


async def test_model_override_of_a_declared_context_parameter_is_replaced() -> None:
    registry = ToolRegistry()
    seen: list[str | None] = []

    @registry.tool
    def look(path: str, sandbox_root: str | None = None) -> None:
        seen.append(sandbox_root)

    call = ToolCall("c1", "look", {"path": "a.txt", "sandbox_root": "/"})

    record = await run_one(registry, call, context=CONTEXT)

    assert record.success is True
    assert seen == ["/tmp/sandbox"]


async def test_context_keys_are_absent_when_the_context_has_none() -> None:
    registry = ToolRegistry()
    seen: list[dict[str, Any]] = []

    def look(inputs: Mapping[str, Any]) -> None:
        seen.append(dict(inputs))

    registry.register(ToolSpec("look"), look)
    call = ToolCall("c1", "look", {"path": "a.txt", "sandbox_root": "/etc"})

    record = await run_one(registry, call, context=ToolActorContext(plan_id="p"))

    assert seen == [{"path": "a.txt"}]
    assert record.inputs == {"path": "a.txt"}


async def test_unknown_tool_record_inputs_include_the_context_keys(
    registry: ToolRegistry,
) -> None:
    record = await run_one(registry, ToolCall("c1", "nope", {"x": 1}), context=CONTEXT)

    assert record.inputs == {"x": 1, **CONTEXT_KEYS}


# -- stage 3: execute --------------------------------------------------------------------------


async def test_async_handler_is_awaited() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    record = await run_one(registry, ToolCall("c1", "double", {"n": 21}))

    assert record.output == {"result": 42}


async def test_async_callable_object_is_awaited() -> None:
    class Counter:
        async def __call__(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
            return {"seen": inputs["n"]}

    registry = ToolRegistry()
    registry.register(ToolSpec("count"), Counter())

    record = await run_one(registry, ToolCall("c1", "count", {"n": 5}))

    assert record.output == {"seen": 5}


async def test_sync_handler_runs_off_the_event_loop_thread() -> None:
    registry = ToolRegistry()
    thread_ids: list[int] = []

    @registry.tool
    def where() -> str:
        thread_ids.append(threading.get_ident())
        return "here"

    record = await run_one(registry, ToolCall("c1", "where", {}))

    assert record.output == {"result": "here"}
    assert len(thread_ids) == 1
    assert thread_ids[0] != threading.get_ident()


async def test_handler_exception_becomes_a_failed_record_with_the_error(
    registry: ToolRegistry,
) -> None:
    record = await run_one(registry, ToolCall("c1", "boom", {}))

    assert record.success is False
    assert record.error == "RuntimeError: kaboom"
    assert record.error_kind is ErrorKind.EXCEPTION
    assert record.output == {}


async def test_exception_without_message_is_described_by_its_type() -> None:
    registry = ToolRegistry()

    def bare(inputs: Mapping[str, Any]) -> None:
        raise KeyError

    registry.register(ToolSpec("bare"), bare)

    record = await run_one(registry, ToolCall("c1", "bare", {}))

    assert record.error == "KeyError"


async def test_spec_timeout_turns_a_slow_handler_into_a_timeout_record() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout_s=0.05)
    async def slow() -> str:
        await asyncio.Event().wait()  # never answers: only the timeout ends the call
        return "late"

    started = time.perf_counter()
    record = await run_one(registry, ToolCall("c1", "slow", {}))
    took_ms = (time.perf_counter() - started) * 1000

    assert record.success is False
    assert record.error_kind is ErrorKind.TIMEOUT
    assert record.error == "tool 'slow' timed out after 0.05s"
    assert record.output == {}
    assert 45 <= record.duration_ms <= took_ms


async def test_runner_default_timeout_applies_to_tools_without_their_own() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    record = await run_one(registry, ToolCall("c1", "slow", {}), default_timeout_s=0.05)

    assert record.error_kind is ErrorKind.TIMEOUT
    assert record.error == "tool 'slow' timed out after 0.05s"


async def test_spec_timeout_overrides_a_shorter_runner_default() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout_s=2.0)
    async def patient() -> str:
        await asyncio.sleep(0.1)
        return "finished"

    record = await run_one(registry, ToolCall("c1", "patient", {}), default_timeout_s=0.05)

    assert record.success is True
    assert record.output == {"result": "finished"}


async def test_spec_timeout_overrides_a_longer_runner_default() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout_s=0.05)
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    record = await run_one(registry, ToolCall("c1", "slow", {}), default_timeout_s=30)

    assert record.error == "tool 'slow' timed out after 0.05s"


async def test_sync_handler_is_bounded_by_its_timeout_too() -> None:
    registry = ToolRegistry()
    release, returned = threading.Event(), threading.Event()

    @registry.tool(timeout_s=0.05)
    def slow_sync() -> str:
        release.wait(60)
        returned.set()
        return "late"

    try:
        record = await run_one(registry, ToolCall("c1", "slow_sync", {}))
        still_running = not returned.is_set()
    finally:
        release.set()  # let the worker thread go

    assert record.error_kind is ErrorKind.TIMEOUT
    assert still_running  # the record came at the timeout, not when the handler returned


@pytest.mark.parametrize("timeout_s", [None, 5.0])
async def test_handler_raising_timeout_error_itself_is_an_exception_not_a_timeout(
    timeout_s: float | None,
) -> None:
    registry = ToolRegistry()

    @registry.tool(timeout_s=timeout_s)
    async def fetch() -> str:
        raise TimeoutError("upstream took too long")

    record = await run_one(registry, ToolCall("c1", "fetch", {}))

    assert record.error_kind is ErrorKind.EXCEPTION
    assert record.error == "TimeoutError: upstream took too long"


async def test_decorated_handler_annotated_with_an_enum_receives_the_member() -> None:
    registry = ToolRegistry()
    seen: list[object] = []

    @registry.tool
    def paint(shade: Shade) -> None:
        seen.append(shade)

    await run_one(registry, ToolCall("c1", "paint", {"shade": "dark"}))

    assert seen == [Shade.DARK]


# -- stage 4: record ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "output"),
    [
        (3, {"result": 3}),
        ("text", {"result": "text"}),
        (None, {"result": None}),
        ([1, (2, 3)], {"result": [1, [2, 3]]}),
        ({"a": 1, "nested": {"b": (True,)}}, {"a": 1, "nested": {"b": [True]}}),
    ],
)
async def test_output_is_normalised_to_a_json_object(returned: object, output: object) -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("give"), lambda inputs: returned)

    record = await run_one(registry, ToolCall("c1", "give", {}))

    assert record.success is True
    assert record.output == output


async def test_output_that_is_not_json_serialisable_becomes_an_exception_record() -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("give"), lambda inputs: object())

    record = await run_one(registry, ToolCall("c1", "give", {}))

    assert record.success is False
    assert record.error_kind is ErrorKind.EXCEPTION
    assert record.error == "TypeError: tool output is not JSON-serialisable: object"
    assert record.output == {}


async def test_successful_record_carries_every_field() -> None:
    registry = ToolRegistry()

    @registry.tool
    async def nap(label: str) -> dict[str, str]:
        await asyncio.sleep(0.05)
        return {"label": label}

    before = time.time()
    record = await run_one(
        registry, ToolCall("llm-id-7", "nap", {"label": "x"}), context=CONTEXT, iteration=4
    )
    after = time.time()

    assert record.tool_name == "nap"
    assert record.inputs == {"label": "x", **CONTEXT_KEYS}
    assert record.output == {"label": "x"}
    assert 45 <= record.duration_ms <= (after - before) * 1000
    assert record.success is True
    assert record.error is None
    assert record.iteration == 4
    assert record.call_id == "llm-id-7"
    assert before <= record.started_at <= after
    assert record.error_kind is None


async def test_on_started_sees_the_threaded_inputs_before_execution() -> None:
    registry = ToolRegistry()
    order: list[str] = []

    def work(inputs: Mapping[str, Any]) -> None:
        order.append("executed")

    registry.register(ToolSpec("work"), work)
    started: list[tuple[str, dict[str, Any]]] = []

    def on_started(call: ToolCall, inputs: Mapping[str, Any]) -> None:
        order.append("started")
        started.append((call.id, dict(inputs)))

    runner = ToolRunner(registry)
    await runner.run(
        ToolCall("c1", "work", {"n": 1}), iteration=1, context=CONTEXT, on_started=on_started
    )

    assert order == ["started", "executed"]
    assert started == [("c1", {"n": 1, **CONTEXT_KEYS})]


@pytest.mark.parametrize(
    "call",
    [
        ToolCall("c1", "nope", {}),
        ToolCall("c1", "add", {"a": "x", "b": 1}),
        ToolCall("c1", "add", {}, arguments_error="bad JSON"),
    ],
    ids=["unknown_tool", "invalid_arguments", "arguments_error"],
)
async def test_on_started_is_called_once_for_early_failures_too(
    registry: ToolRegistry, call: ToolCall
) -> None:
    started: list[str] = []

    def on_started(started_call: ToolCall, inputs: Mapping[str, Any]) -> None:
        started.append(started_call.id)

    record = await ToolRunner(registry).run(call, iteration=1, on_started=on_started)

    assert started == ["c1"]
    assert record.success is False


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (float("nan"), "tool output has the number nan, which JSON cannot carry"),
        ({"x": [float("inf")]}, "tool output has the number inf"),
        ("🙂🙂🙂"[:2] + "\ud83d", "tool output has a string with a lone surrogate \\ud83d"),
        ({"k\udcff": 1}, "tool output has a string with a lone surrogate \\udcff"),
    ],
)
async def test_an_output_json_cannot_carry_is_a_failed_record(output: Any, problem: str) -> None:
    registry = ToolRegistry()
    registry.register(ToolSpec("bad", "", {"type": "object"}), lambda inputs: output)

    record = await ToolRunner(registry).run(ToolCall("c1", "bad", {}), iteration=1)

    assert not record.success
    assert record.error_kind is ErrorKind.EXCEPTION
    assert record.error == f"ValueError: {problem}" or problem in (record.error or "")
    assert record.output == {}


async def test_an_error_text_with_a_lone_surrogate_is_escaped_in_the_record() -> None:
    def fails(inputs: Mapping[str, Any]) -> None:
        raise FileNotFoundError("no such file: 'a\udcff'")  # a name os.listdir gave

    registry = ToolRegistry()
    registry.register(ToolSpec("fails", "", {"type": "object"}), fails)

    record = await ToolRunner(registry).run(ToolCall("c1", "fails", {}), iteration=1)

    assert record.error == "FileNotFoundError: no such file: 'a\\udcff'"
    assert record.error is not None
    assert record.error.encode("utf-8")
