"""A run's output schema in the core loop: what ends the run, what goes back to the model,
refusals, the closing summary, and a run resumed from its log counting its retries as the
live one did."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from cleveragents.tool import (
    LLMResponded,
    LLMResponse,
    OutputSchema,
    Resumption,
    Role,
    RunBudget,
    RunCompleted,
    RunEvent,
    ScriptedLLMCaller,
    StopReason,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)
from cleveragents.tool.execution.schema import schema_for_type

SCHEMA = OutputSchema(
    "city",
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "people": {"type": "integer"}},
        "required": ["name", "people"],
        "additionalProperties": False,
    },
)
VALID = '{"name": "Lyon", "people": 522000}'


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def lookup(name: str) -> str:
        """Look a city up."""
        return name

    return reg


def runtime(llm: Any, **options: Any) -> ToolCallingRuntime:
    reg = registry()
    options.setdefault("output", SCHEMA)
    return ToolCallingRuntime(reg, ToolRunner(reg), llm, **options)


async def run(script: list[Any], **options: Any) -> tuple[Any, ScriptedLLMCaller, list[RunEvent]]:
    llm = ScriptedLLMCaller(script, record=True)
    events: list[RunEvent] = []
    result = await runtime(llm, **options).arun_tool_loop("Which city?", on_event=events.append)
    return result, llm, events


# -- the value --------------------------------------------------------------------------------


def test_a_name_providers_cannot_take_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid output schema name 'a b'"):
        OutputSchema("a b", {"type": "object"})


def test_a_root_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match='root has "type": "object"'):
        OutputSchema("x", {"type": "array", "items": {}})


def test_a_schema_that_does_not_compile_is_refused_when_prepared() -> None:
    bad = OutputSchema("x", {"type": "object", "properties": {"a": {"type": 3}}})
    with pytest.raises(ValueError, match="is not a valid JSON Schema"):
        bad.prepare()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "the answer is empty: it must be a JSON object"),
        ("Lyon", "the answer is not JSON (Expecting value at position 0)"),
        ('{"name": "Lyon", "people": NaN}', "the answer is not JSON"),
        ('{"name": "Lyon"}', '"people" is a required property'),
        ('{"name": 1, "people": 2}', "at '/name': 1 is not of type \"string\""),
    ],
)
def test_an_answer_is_checked_as_standard_json_then_against_the_schema(
    text: str, error: str
) -> None:
    check = SCHEMA.check(text)
    assert check.error is not None
    assert check.error.startswith(error)


def test_a_valid_answer_gives_its_value() -> None:
    check = SCHEMA.check(VALID)
    assert check.valid
    assert check.value == {"name": "Lyon", "people": 522000}


def test_an_answer_with_more_values_than_its_bound_is_not_validated() -> None:
    bounded = OutputSchema("b", {"type": "object"}).prepare(max_values=3)
    check = bounded.check('{"a": [1, 2, 3]}')
    assert check.error == (
        "the answer holds more than 3 JSON values, the most this output schema may be "
        "checked against"
    )


# -- the loop ---------------------------------------------------------------------------------


async def test_a_valid_answer_ends_the_run_with_its_json_as_output() -> None:
    result, _, _ = await run([{"content": VALID}])
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.output_json == result.content == VALID


async def test_tools_first_then_the_structured_answer() -> None:
    script = [
        {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"name": "Lyon"}}]},
        {"output": {"name": "Lyon", "people": 1}},
    ]
    result, llm, _ = await run(script)
    assert result.output_json == '{"name":"Lyon","people":1}'
    assert [r.tool_name for r in result.tool_call_history] == ["lookup"]
    assert all(r.tools for r in llm.requests)  # tools stay offered beside the schema


async def test_an_invalid_answer_goes_back_as_the_assistant_turn_and_the_error() -> None:
    result, llm, _ = await run([{"content": "Lyon"}, {"content": VALID}])
    assert result.output_json == VALID
    assert result.iterations == 2
    second = llm.requests[1].messages
    assert [(m.role, m.content) for m in second[-2:]] == [
        (Role.ASSISTANT, "Lyon"),
        (
            Role.USER,
            "Your answer does not match the output schema 'city': the answer is not JSON "
            "(Expecting value at position 0). Answer again with only a JSON object that "
            "matches the schema.",
        ),
    ]


async def test_past_the_retries_the_run_completes_with_the_limit_and_the_last_text() -> None:
    result, _, events = await run(
        [{"content": "a"}, {"content": "b"}, {"content": "c"}], max_output_retries=2
    )
    assert result.stop_reason is StopReason.MAX_OUTPUT_RETRIES
    assert result.terminated_by_limit
    assert (result.content, result.output_json) == ("c", "")
    assert result.output_error.startswith("the answer is not JSON")
    assert isinstance(events[-1], RunCompleted)


async def test_retries_count_against_max_iterations() -> None:
    result, _, _ = await run([{"content": "a"}, {"content": "b"}], max_iterations=2)
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.iterations == 2


async def test_a_negative_max_output_retries_is_refused() -> None:
    with pytest.raises(ValueError, match="max_output_retries must be 0 or more"):
        runtime(ScriptedLLMCaller([]), max_output_retries=-1)


async def test_a_refusal_ends_a_run_without_a_schema_too() -> None:
    result, _, events = await run([{"refusal": "No."}], output=None)
    assert (result.stop_reason, result.content) == (StopReason.REFUSAL, "No.")
    responded = [e for e in events if isinstance(e, LLMResponded)]
    assert responded[0].refusal == "No."


async def test_a_refusal_with_a_schema_is_not_retried() -> None:
    result, llm, _ = await run([{"refusal": "No."}, {"content": VALID}])
    assert result.stop_reason is StopReason.REFUSAL
    assert llm.calls == 1


async def test_the_request_carries_the_schema_to_the_caller() -> None:
    seen: list[OutputSchema | None] = []

    class Llm:
        async def call(self, request: Any) -> LLMResponse:
            seen.append(request.output)
            return LLMResponse(VALID)

    await runtime(Llm()).arun_tool_loop("x")
    assert seen == [SCHEMA]


async def test_a_closing_summary_that_validates_is_the_output() -> None:
    ask = {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"name": "a"}}]}
    script = [
        ask,
        {**ask, "tool_calls": [{**ask["tool_calls"][0], "id": "c2"}]},
        {"content": VALID},
    ]
    budget = RunBudget(max_tool_calls=1, summarize_on_stop=True)
    result, _, _ = await run(script, budget=budget)
    assert result.stop_reason is StopReason.TOOL_CALL_BUDGET
    assert result.output_json == VALID


# -- resuming ---------------------------------------------------------------------------------


async def logged_until_retry(script: list[Any]) -> list[RunEvent]:
    """The events logged up to the second LLM response, as a log holds them when its sidecar
    stops there."""
    seen: list[RunEvent] = []
    done = asyncio.Event()

    def sink(event: RunEvent) -> None:
        if not done.is_set():
            seen.append(event)
            if isinstance(event, LLMResponded) and event.iteration == 2:
                done.set()

    task = asyncio.create_task(
        runtime(ScriptedLLMCaller(script)).arun_tool_loop("Which city?", on_event=sink)
    )
    async with asyncio.timeout(5):
        await done.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return seen


async def test_a_resumed_run_counts_the_retries_its_log_holds() -> None:
    script = [{"content": "a"}, {"content": "b"}, {"content": VALID}]
    logged = await logged_until_retry(script)
    llm = ScriptedLLMCaller(script[2:], record=True)
    events: list[RunEvent] = []

    result = await runtime(llm, max_output_retries=2).arun_tool_loop(
        "Which city?", on_event=events.append, resume=Resumption(logged, len(logged))
    )

    assert result.output_json == VALID
    feedback = [m for m in llm.requests[0].messages if m.role is Role.USER][1:]
    assert len(feedback) == 2  # both invalid answers went back, as in the live run


async def test_a_resumed_run_past_its_retries_ends_with_the_limit() -> None:
    logged = await logged_until_retry([{"content": "a"}, {"content": "b"}, {"content": VALID}])

    result = await runtime(ScriptedLLMCaller([]), max_output_retries=1).arun_tool_loop(
        "Which city?", resume=Resumption(logged, len(logged))
    )

    assert result.stop_reason is StopReason.MAX_OUTPUT_RETRIES
    assert result.content == "b"


async def test_a_resumed_refusal_ends_with_the_refusal() -> None:
    events: list[RunEvent] = [
        *await logged_until_retry([{"content": "a"}, {"refusal": "No."}]),
    ]
    result = await runtime(ScriptedLLMCaller([])).arun_tool_loop(
        "Which city?", resume=Resumption(events, len(events))
    )
    assert (result.stop_reason, result.content) == (StopReason.REFUSAL, "No.")


# -- types as schemas -------------------------------------------------------------------------


@dataclasses.dataclass
class Node:
    children: list[Node]


def test_a_dataclass_that_contains_itself_needs_a_schema_by_hand() -> None:
    with pytest.raises(TypeError, match="contains itself"):
        schema_for_type(Node)
