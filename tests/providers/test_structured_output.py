"""Structured output through each provider adapter, against loopback servers: the exact
request bytes each sends for a run's output schema, and the structured answer (or refusal)
each reads back, whole and streamed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cleveragents.providers import (
    AnthropicMessagesCaller,
    HTTPCaller,
    OpenAIChatCaller,
    OpenAIResponsesCaller,
    anthropic_has_structured_outputs,
    strict_problem,
)
from cleveragents.tool import (
    LLMDelta,
    Message,
    OutputSchema,
    Role,
    RunCompleted,
    RunEvent,
    StopReason,
    StructuredRequest,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
)

from .conftest import (
    NO_WAIT,
    SECRET,
    FakeProvider,
    anthropic_message,
    ok,
    openai_completion,
    sse,
)
from .streams import (
    anthropic_tool_stream,
    openai_refusal_stream,
    openai_stream,
    responses_body,
    responses_stream,
)

#: A schema that meets OpenAI's strict-mode rules.
STRICT = OutputSchema(
    "invoice",
    {
        "type": "object",
        "properties": {"customer": {"type": "string"}, "total": {"type": "number", "minimum": 0}},
        "required": ["customer", "total"],
        "additionalProperties": False,
    },
    "An invoice.",
)
#: One that does not: ``note`` is optional, and objects are left open.
LOOSE = OutputSchema(
    "invoice",
    {
        "type": "object",
        "properties": {"customer": {"type": "string"}, "note": {"type": "string"}},
        "required": ["customer"],
    },
)
ANSWER = '{"customer":"ACME","total":12.5}'


@pytest.fixture
async def callers() -> AsyncIterator[list[HTTPCaller]]:
    made: list[HTTPCaller] = []
    yield made
    for caller in made:
        await caller.aclose()


def chat(provider: FakeProvider, callers: list[HTTPCaller], **kwargs: Any) -> OpenAIChatCaller:
    caller = OpenAIChatCaller(
        "gpt-test", base_url=f"{provider.url}/v1", api_key=SECRET, retry=NO_WAIT, **kwargs
    )
    callers.append(caller)
    return caller


def responses(
    provider: FakeProvider, callers: list[HTTPCaller], **kwargs: Any
) -> OpenAIResponsesCaller:
    caller = OpenAIResponsesCaller(
        "o4-mini", base_url=f"{provider.url}/v1", api_key=SECRET, retry=NO_WAIT, **kwargs
    )
    callers.append(caller)
    return caller


def anthropic(
    provider: FakeProvider, callers: list[HTTPCaller], model: str, **kwargs: Any
) -> AnthropicMessagesCaller:
    caller = AnthropicMessagesCaller(
        model, base_url=provider.url, api_key=SECRET, retry=NO_WAIT, **kwargs
    )
    callers.append(caller)
    return caller


def asking(output: OutputSchema, text: str = "Read it.") -> StructuredRequest:
    return StructuredRequest([Message(Role.USER, text)], [], 1, output=output)


def echo_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def lookup(name: str) -> str:
        """Look a customer up."""
        return name.upper()

    return registry


async def run(
    caller: HTTPCaller, output: OutputSchema, registry: ToolRegistry | None = None, **kw: Any
) -> tuple[Any, list[RunEvent]]:
    registry = registry if registry is not None else ToolRegistry()
    runtime = ToolCallingRuntime(
        registry, ToolRunner(registry), caller, router=caller.router, output=output, **kw
    )
    events: list[RunEvent] = []
    result = await runtime.arun_tool_loop("Read the invoice.", on_event=events.append)
    return result, events


# -- OpenAI Chat Completions ------------------------------------------------------------------


async def test_chat_sends_the_schema_as_a_strict_response_format(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(openai_completion(ANSWER)))

    response = await chat(provider, callers).call(asking(STRICT))

    assert provider.requests[0].raw == (
        b'{"model":"gpt-test","messages":[{"role":"user","content":"Read it."}],'
        b'"response_format":{"type":"json_schema","json_schema":{"name":"invoice",'
        b'"description":"An invoice.","schema":{"type":"object","properties":{"customer":'
        b'{"type":"string"},"total":{"type":"number","minimum":0}},"required":["customer",'
        b'"total"],"additionalProperties":false},"strict":true}}}'
    )
    assert response.content == ANSWER


async def test_chat_sends_a_schema_strict_mode_refuses_without_strict_and_says_why(
    provider: FakeProvider, callers: list[HTTPCaller], captured_logs: Any
) -> None:
    provider.queue(ok(openai_completion('{"customer":"ACME"}')))

    await chat(provider, callers).call(asking(LOOSE))

    assert provider.requests[0].raw.endswith(
        b'"response_format":{"type":"json_schema","json_schema":{"name":"invoice","schema":'
        b'{"type":"object","properties":{"customer":{"type":"string"},"note":{"type":"string"}},'
        b'"required":["customer"]},"strict":false}}}'
    )
    logged = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    (said,) = [e for e in logged if e["event"] == "output schema sent without strict mode"]
    assert said["output_schema"] == "invoice"
    assert said["url"] == f"{provider.url}/v1/chat/completions"
    assert said["problem"] == "the root does not set additionalProperties to false"


async def test_chat_answers_after_a_tool_call_with_the_validated_json(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(
        ok(openai_completion(None, [("call_1", "lookup", '{"name": "acme"}')])),
        ok(openai_completion(ANSWER)),
    )

    result, _ = await run(chat(provider, callers), STRICT, echo_registry())

    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert result.output_json == ANSWER
    first, second = provider.bodies()
    assert first["response_format"] == second["response_format"]  # tools and schema together
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup"]


async def test_chat_streams_the_answer_as_text_deltas_that_join_to_the_json(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(sse(openai_stream(ANSWER), at=[40, 200, 333]))

    result, events = await run(chat(provider, callers, stream=True), STRICT)

    # As many deltas as reads brought text (the two pieces may come in one read, joined).
    deltas = [e.text for e in events if isinstance(e, LLMDelta) and e.text]
    assert deltas
    assert "".join(deltas) == result.output_json == ANSWER


async def test_chat_sends_an_invalid_answer_back_with_the_error(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(
        ok(openai_completion('{"customer":"ACME","total":-3}')),
        ok(openai_completion(ANSWER)),
    )

    result, _ = await run(chat(provider, callers), STRICT)

    assert result.output_json == ANSWER
    messages = provider.bodies()[1]["messages"]
    assert messages[1:] == [
        {"role": "assistant", "content": '{"customer":"ACME","total":-3}'},
        {
            "role": "user",
            "content": "Your answer does not match the output schema 'invoice': at '/total': "
            "-3 is less than the minimum of 0. Answer again with only a JSON object that "
            "matches the schema.",
        },
    ]


async def test_chat_refusal_ends_the_run_with_the_refusal_stop_reason(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(openai_completion(None, refusal="I can't help with that.")))

    result, events = await run(chat(provider, callers), STRICT)

    assert result.stop_reason is StopReason.REFUSAL
    assert result.content == "I can't help with that."
    assert isinstance(events[-1], RunCompleted)


async def test_chat_streamed_refusal_ends_the_run_with_the_refusal_stop_reason(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(sse(openai_refusal_stream("I can't help with that.")))

    result, _ = await run(chat(provider, callers, stream=True), STRICT)

    assert (result.stop_reason, result.content) == (StopReason.REFUSAL, "I can't help with that.")


# -- OpenAI Responses API ---------------------------------------------------------------------


async def test_responses_sends_the_schema_as_text_format(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(responses_body(ANSWER)))

    response = await responses(provider, callers, params={"text": {"verbosity": "low"}}).call(
        asking(STRICT)
    )

    assert provider.requests[0].raw == (
        b'{"model":"o4-mini","text":{"verbosity":"low","format":{"type":"json_schema",'
        b'"name":"invoice","description":"An invoice.","schema":{"type":"object","properties":'
        b'{"customer":{"type":"string"},"total":{"type":"number","minimum":0}},"required":'
        b'["customer","total"],"additionalProperties":false},"strict":true}},'
        b'"input":[{"role":"user","content":"Read it."}]}'
    )
    assert response.content == ANSWER


async def test_responses_streams_the_answer_as_text_deltas(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(sse(responses_stream(responses_body(ANSWER))))

    result, events = await run(responses(provider, callers, stream=True), STRICT)

    deltas = [e.text for e in events if isinstance(e, LLMDelta) and e.text]
    assert "".join(deltas) == result.output_json == ANSWER


async def test_responses_refusal_part_ends_the_run_with_its_text(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    body = responses_body(ANSWER)
    body["output"][0]["content"] = [{"type": "refusal", "refusal": "No."}]
    provider.queue(ok(body))

    result, _ = await run(responses(provider, callers), STRICT)

    assert (result.stop_reason, result.content) == (StopReason.REFUSAL, "No.")


# -- Anthropic Messages -----------------------------------------------------------------------


async def test_anthropic_sends_output_config_on_a_model_with_structured_outputs(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(anthropic_message(ANSWER)))

    caller = anthropic(provider, callers, "claude-sonnet-4-5-20250929")
    response = await caller.call(asking(LOOSE))

    # Objects closed, the constraints it does not take left out (the loop still checks them).
    assert provider.requests[0].raw == (
        b'{"model":"claude-sonnet-4-5-20250929","max_tokens":4096,"messages":[{"role":"user",'
        b'"content":[{"type":"text","text":"Read it."}]}],"output_config":{"format":{"type":'
        b'"json_schema","schema":{"type":"object","properties":{"customer":{"type":"string"},'
        b'"note":{"type":"string"}},"required":["customer"],"additionalProperties":false}}}}'
    )
    assert response.content == ANSWER


async def test_anthropic_native_schema_leaves_out_numeric_bounds(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(anthropic_message(ANSWER)))

    await anthropic(provider, callers, "claude-opus-4-5").call(asking(STRICT))

    schema = provider.bodies()[0]["output_config"]["format"]["schema"]
    assert schema["properties"]["total"] == {"type": "number"}


async def test_anthropic_forces_the_answer_tool_on_an_older_model(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(anthropic_message("", [("toolu_1", "answer", json.loads(ANSWER))])))

    caller = anthropic(provider, callers, "claude-3-5-haiku-20241022")
    response = await caller.call(asking(STRICT))

    assert provider.requests[0].raw == (
        b'{"model":"claude-3-5-haiku-20241022","max_tokens":4096,"messages":[{"role":"user",'
        b'"content":[{"type":"text","text":"Read it."}]}],"tool_choice":{"type":"tool",'
        b'"name":"answer"},"tools":[{"name":"answer","description":"Give your final answer '
        b"(invoice): call this tool once, when you are done, with the answer as its input. The "
        b'answer: An invoice.","input_schema":{"type":"object","properties":{"customer":'
        b'{"type":"string"},"total":{"type":"number","minimum":0}},"required":["customer",'
        b'"total"],"additionalProperties":false}}]}'
    )
    assert (response.content, list(response.tool_calls)) == (ANSWER, [])


async def test_anthropic_answer_tool_goes_beside_the_run_tools_with_any_choice(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(
        ok(anthropic_message("", [("toolu_1", "lookup", {"name": "acme"})])),
        ok(anthropic_message("", [("toolu_2", "answer", json.loads(ANSWER))])),
    )
    caller = anthropic(provider, callers, "claude-sonnet-4-20250514", structured_output="tool")

    result, _ = await run(caller, STRICT, echo_registry())

    assert result.output_json == ANSWER
    assert [r.tool_name for r in result.tool_call_history] == ["lookup"]
    first = provider.bodies()[0]
    assert first["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in first["tools"]] == ["lookup", "answer"]


async def test_anthropic_answer_tool_streams_its_input_as_the_answer_text(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    pieces = ('{"customer":', '"ACME","total"', ":12.5}")
    provider.queue(sse(anthropic_tool_stream("answer", pieces)))
    caller = anthropic(provider, callers, "claude-3-5-haiku-20241022", stream=True)

    result, events = await run(caller, STRICT)

    deltas = [e for e in events if isinstance(e, LLMDelta)]
    assert "".join(d.text for d in deltas) == "".join(pieces)  # joined per read, in order
    assert all(d.tool_call_index is None for d in deltas)  # text, not a call's arguments
    assert result.output_json == ANSWER
    assert result.tool_call_history == ()


async def test_anthropic_invalid_answer_tool_input_goes_back_as_text_and_feedback(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(
        ok(anthropic_message("", [("toolu_1", "answer", {"customer": "ACME"})])),
        ok(anthropic_message("", [("toolu_2", "answer", json.loads(ANSWER))])),
    )
    caller = anthropic(provider, callers, "claude-3-5-haiku-20241022")

    result, _ = await run(caller, STRICT)

    assert result.output_json == ANSWER
    assert provider.bodies()[1]["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "text", "text": '{"customer":"ACME"}'}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Your answer does not match the output schema 'invoice': "
                    '"total" is a required property. Answer again with only a JSON object '
                    "that matches the schema.",
                }
            ],
        },
    ]


async def test_anthropic_thinking_keeps_the_tool_choice_automatic(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(anthropic_message(ANSWER)))
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    caller = anthropic(provider, callers, "claude-3-7-sonnet-20250219", params=thinking)

    response = await caller.call(asking(STRICT))

    assert provider.bodies()[0]["tool_choice"] == {"type": "auto"}
    assert response.content == ANSWER


async def test_anthropic_recursive_schema_falls_back_to_the_answer_tool(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    tree = OutputSchema(
        "tree",
        {
            "type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["children"],
            "additionalProperties": False,
        },
    )
    provider.queue(ok(anthropic_message("", [("toolu_1", "answer", {"children": []})])))

    response = await anthropic(provider, callers, "claude-sonnet-4-5").call(asking(tree))

    assert "output_config" not in provider.bodies()[0]
    assert response.content == '{"children":[]}'


async def test_anthropic_refusal_stop_reason_ends_the_run(
    provider: FakeProvider, callers: list[HTTPCaller]
) -> None:
    provider.queue(ok(anthropic_message("I won't do that.", stop_reason="refusal")))

    result, _ = await run(anthropic(provider, callers, "claude-sonnet-4-5"), STRICT)

    assert (result.stop_reason, result.content) == (StopReason.REFUSAL, "I won't do that.")


# -- the rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (STRICT.schema, None),
        ({"type": "array"}, "the root must be an object schema, not a union"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}},
             "required": ["a"], "additionalProperties": False},
            "'/properties/a' uses 'minLength', which strict mode does not take",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "object", "properties": {}}},
             "required": ["a"], "additionalProperties": False},
            "'/properties/a' does not set additionalProperties to false",
        ),
    ],
)  # fmt: skip
def test_strict_mode_rules(schema: dict[str, Any], problem: str | None) -> None:
    assert strict_problem(schema) == problem


@pytest.mark.parametrize(
    ("model", "native"),
    [
        ("claude-sonnet-4-5-20250929", True),
        ("claude-opus-4-5", True),
        ("claude-haiku-4-5", True),
        ("claude-opus-4-1-20250805", False),
        ("claude-sonnet-4-20250514", False),
        ("claude-3-5-haiku-20241022", False),
        ("my-proxy-model", False),
    ],
)
def test_which_anthropic_models_take_output_config(model: str, native: bool) -> None:
    assert anthropic_has_structured_outputs(model) is native
