"""ToolCallRouter: OpenAI and Anthropic formats, both directions."""

import json
from typing import Any

import pytest

from cleveragents.tool import (
    LLMResponse,
    Message,
    Role,
    ToolCall,
    ToolCallRouter,
    ToolFormat,
    ToolSpec,
    Usage,
)

SPECS = [
    ToolSpec(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec("now", "The time."),
]
CALLS = [
    ToolCall("call_1", "read_file", {"path": "a.txt", "opts": {"lines": [1, 2]}}),
    ToolCall("call_2", "now", {}),
]

OPENAI_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-9",
    "object": "chat.completion",
    "created": 1718000000,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
                    },
                    {
                        "id": "call_def",
                        "type": "function",
                        "function": {"name": "now", "arguments": "{}"},
                    },
                ],
                "refusal": None,
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
}

ANTHROPIC_MESSAGE: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [
        {"type": "text", "text": "I'll read it."},
        {
            "type": "tool_use",
            "id": "toolu_01",
            "name": "read_file",
            "input": {"path": "README.md"},
        },
        {"type": "tool_use", "id": "toolu_02", "name": "now", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 120, "output_tokens": 45},
}

CONVERSATION = [
    Message(Role.SYSTEM, "Be brief."),
    Message(Role.USER, "Read README.md"),
    Message(Role.ASSISTANT, "", CALLS),
    Message(Role.TOOL, '{"text": "hi"}', tool_call_id="call_1"),
    Message(Role.TOOL, '{"error": "clock broken"}', tool_call_id="call_2", is_error=True),
]


def test_unknown_format_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unknown tool format 'gemini'; expected one of"):
        ToolCallRouter("gemini")


def test_format_can_be_given_as_string_or_enum() -> None:
    assert ToolCallRouter("anthropic").format is ToolFormat.ANTHROPIC
    assert ToolCallRouter(ToolFormat.OPENAI).format is ToolFormat.OPENAI
    assert ToolCallRouter().format is ToolFormat.OPENAI


# -- tool schemas ------------------------------------------------------------------------------


def test_openai_tool_schemas_are_function_entries_with_parameters() -> None:
    assert ToolCallRouter("openai").tool_schemas(SPECS) == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "now",
                "description": "The time.",
                "parameters": {"type": "object"},
            },
        },
    ]


def test_anthropic_tool_schemas_carry_input_schema() -> None:
    assert ToolCallRouter("anthropic").tool_schemas(SPECS) == [
        {
            "name": "read_file",
            "description": "Read a file.",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
        {"name": "now", "description": "The time.", "input_schema": {"type": "object"}},
    ]


# -- tool calls round trip ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_formatted_tool_calls_parse_back_to_equal_calls(fmt: str) -> None:
    router = ToolCallRouter(fmt)

    assert router.parse_tool_calls(router.format_tool_calls(CALLS)) == CALLS


def test_openai_tool_calls_carry_arguments_as_json_text() -> None:
    (entry,) = ToolCallRouter("openai").format_tool_calls(CALLS[:1])

    assert entry["id"] == "call_1"
    assert entry["type"] == "function"
    assert entry["function"]["name"] == "read_file"
    assert json.loads(entry["function"]["arguments"]) == {
        "path": "a.txt",
        "opts": {"lines": [1, 2]},
    }


def test_anthropic_tool_calls_are_tool_use_blocks() -> None:
    assert ToolCallRouter("anthropic").format_tool_calls(CALLS[1:]) == [
        {"type": "tool_use", "id": "call_2", "name": "now", "input": {}}
    ]


def test_openai_tool_calls_parse_from_an_assistant_message() -> None:
    message = OPENAI_COMPLETION["choices"][0]["message"]

    assert ToolCallRouter("openai").parse_tool_calls(message) == [
        ToolCall("call_abc", "read_file", {"path": "README.md"}),
        ToolCall("call_def", "now", {}),
    ]


def test_anthropic_tool_calls_parse_from_a_message_skipping_text_blocks() -> None:
    assert ToolCallRouter("anthropic").parse_tool_calls(ANTHROPIC_MESSAGE) == [
        ToolCall("toolu_01", "read_file", {"path": "README.md"}),
        ToolCall("toolu_02", "now", {}),
    ]


# -- whole responses ---------------------------------------------------------------------------


def test_openai_chat_completion_parses_to_content_calls_and_usage() -> None:
    response = ToolCallRouter("openai").parse_response(OPENAI_COMPLETION)

    assert response == LLMResponse(
        content="Let me look.",
        tool_calls=[
            ToolCall("call_abc", "read_file", {"path": "README.md"}),
            ToolCall("call_def", "now", {}),
        ],
        usage=Usage(input_tokens=82, output_tokens=17),
    )


def test_openai_final_answer_without_tool_calls_or_usage() -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": "All done."}}]}

    response = ToolCallRouter("openai").parse_response(body)

    assert response.content == "All done."
    assert list(response.tool_calls) == []
    assert response.usage is None


def test_openai_null_content_becomes_empty_text() -> None:
    body: dict[str, Any] = {
        "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": []}}]
    }

    assert ToolCallRouter("openai").parse_response(body).content == ""


@pytest.mark.parametrize("body", [{}, {"choices": []}, {"choices": None}])
def test_openai_response_without_choices_raises_value_error(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="has no choices"):
        ToolCallRouter("openai").parse_response(body)


def test_anthropic_message_parses_to_text_calls_and_usage() -> None:
    response = ToolCallRouter("anthropic").parse_response(ANTHROPIC_MESSAGE)

    assert response == LLMResponse(
        content="I'll read it.",
        tool_calls=[
            ToolCall("toolu_01", "read_file", {"path": "README.md"}),
            ToolCall("toolu_02", "now", {}),
        ],
        usage=Usage(input_tokens=120, output_tokens=45),
    )


# -- arguments that do not parse ---------------------------------------------------------------


def openai_call_with_arguments(arguments: str) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "add", "arguments": arguments}}


def test_arguments_that_are_not_json_set_arguments_error_instead_of_raising() -> None:
    (call,) = ToolCallRouter("openai").parse_tool_calls([openai_call_with_arguments('{"a": 1')])

    assert call.id == "c1"
    assert call.name == "add"
    assert call.arguments == {}
    assert call.arguments_error is not None
    assert call.arguments_error.startswith("arguments are not valid JSON")


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [("[1, 2]", "an array"), ('"text"', "a string"), ("3", "a number"), ("true", "a boolean")],
)
def test_arguments_that_are_json_but_not_an_object_set_arguments_error(
    arguments: str, kind: str
) -> None:
    (call,) = ToolCallRouter("openai").parse_tool_calls([openai_call_with_arguments(arguments)])

    assert call.arguments == {}
    assert call.arguments_error == f"arguments must be a JSON object, not {kind}"


@pytest.mark.parametrize("arguments", ["", "   "])
def test_empty_arguments_text_means_no_arguments(arguments: str) -> None:
    (call,) = ToolCallRouter("openai").parse_tool_calls([openai_call_with_arguments(arguments)])

    assert call == ToolCall("c1", "add", {})


def test_route_parses_json_text_arguments_and_keeps_mappings() -> None:
    router = ToolCallRouter()
    as_text: Any = '{"a": 1, "b": 2}'
    parsed = ToolCall("c1", "add", {"a": 1, "b": 2})

    assert router.route(ToolCall("c1", "add", as_text)) == parsed
    assert router.route(parsed) is parsed


# -- conversations -----------------------------------------------------------------------------


def test_openai_messages_keep_roles_tool_calls_and_tool_call_ids() -> None:
    body = ToolCallRouter("openai").format_messages(CONVERSATION)

    assert list(body) == ["messages"]
    system, user, assistant, first, second = body["messages"]
    assert system == {"role": "system", "content": "Be brief."}
    assert user == {"role": "user", "content": "Read README.md"}
    assert assistant["role"] == "assistant"
    assert assistant["content"] is None
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert first == {"role": "tool", "tool_call_id": "call_1", "content": '{"text": "hi"}'}
    assert second == {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": '{"error": "clock broken"}',
    }


def test_openai_assistant_text_is_kept_beside_its_tool_calls() -> None:
    body = ToolCallRouter("openai").format_messages([Message(Role.ASSISTANT, "Looking.", CALLS)])

    assert body["messages"][0]["content"] == "Looking."


def test_anthropic_messages_extract_system_and_merge_tool_results_into_one_user_turn() -> None:
    body = ToolCallRouter("anthropic").format_messages(CONVERSATION)

    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Read README.md"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read_file",
                    "input": {"path": "a.txt", "opts": {"lines": [1, 2]}},
                },
                {"type": "tool_use", "id": "call_2", "name": "now", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": '{"text": "hi"}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": '{"error": "clock broken"}',
                    "is_error": True,
                },
            ],
        },
    ]


def test_anthropic_messages_without_system_have_no_system_field() -> None:
    body = ToolCallRouter("anthropic").format_messages([Message(Role.USER, "hi")])

    assert "system" not in body


def test_anthropic_assistant_text_comes_before_its_tool_use_blocks() -> None:
    body = ToolCallRouter("anthropic").format_messages(
        [Message(Role.ASSISTANT, "Looking.", CALLS[1:])]
    )

    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "call_2", "name": "now", "input": {}},
    ]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": 1e400}', "the number 1e400 is out of range"),
        ('{"path": "x\\ud83d"}', "a string holds a lone surrogate \\ud83d"),
        ("[" * 100_000, "arguments are nested too deeply"),
    ],
)
def test_arguments_that_are_not_standard_json_set_arguments_error(
    arguments: str, problem: str
) -> None:
    (call,) = ToolCallRouter("openai").parse_tool_calls([openai_call_with_arguments(arguments)])

    assert call.arguments == {}
    assert call.arguments_error is not None
    assert problem in call.arguments_error


def test_a_usage_count_beyond_int64_is_held_at_the_int64_maximum() -> None:
    body = {**OPENAI_COMPLETION, "usage": {"prompt_tokens": 10**30, "completion_tokens": 5}}

    usage = ToolCallRouter("openai").parse_response(body).usage

    assert usage == Usage(input_tokens=2**63 - 1, output_tokens=5)
    assert usage is not None
    assert (usage + usage).input_tokens == 2**63 - 1  # sums stop there too: int64 fields
