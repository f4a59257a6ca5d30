"""ScriptedLLMCaller and the scripted-turn JSON shape (response_from_dict)."""

from typing import Any

import pytest

from cleveragents.tool import (
    LLMCaller,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    ScriptedLLMCaller,
    ScriptExhaustedError,
    ToolCall,
    ToolRegistry,
    Usage,
    response_from_dict,
)

from .conftest import make_runtime


def request(iteration: int = 1) -> LLMRequest:
    return LLMRequest(messages=[], tools=[], iteration=iteration)


async def test_returns_the_responses_in_order() -> None:
    first, second = LLMResponse(content="one"), LLMResponse(content="two")
    caller = ScriptedLLMCaller([first, second])

    assert len(caller) == 2
    assert await caller.call(request(1)) is first
    assert await caller.call(request(2)) is second
    assert caller.calls == 2


def test_is_an_llm_caller() -> None:
    assert isinstance(ScriptedLLMCaller([]), LLMCaller)


async def test_asking_past_the_end_raises_script_exhausted_error() -> None:
    caller = ScriptedLLMCaller([LLMResponse(content="only")])
    await caller.call(request(1))

    with pytest.raises(ScriptExhaustedError, match="has 1 response\\(s\\) and iteration 2"):
        await caller.call(request(2))


async def test_exhausted_script_fails_the_run_with_llm_call_error(registry: ToolRegistry) -> None:
    caller = ScriptedLLMCaller([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}])

    with pytest.raises(LLMCallError) as info:
        await make_runtime(registry, caller).arun_tool_loop("hi")

    assert isinstance(info.value.__cause__, ScriptExhaustedError)
    assert info.value.iteration == 2
    assert len(info.value.result.tool_call_history) == 1


async def test_accepts_scripted_turns_as_dicts(registry: ToolRegistry) -> None:
    caller = ScriptedLLMCaller(
        [
            {
                "content": "Adding.",
                "tool_calls": [{"id": "mine", "name": "add", "arguments": {"a": 1, "b": 2}}],
                "usage": {"input_tokens": 12, "output_tokens": 3},
            },
            {"content": "3"},
        ]
    )

    result = await make_runtime(registry, caller).arun_tool_loop("hi")

    assert result.content == "3"
    assert [(r.call_id, r.output) for r in result.tool_call_history] == [("mine", {"result": 3})]
    assert result.usage == Usage(12, 3)


async def test_default_call_ids_are_unique_across_turns() -> None:
    caller = ScriptedLLMCaller(
        [
            {"tool_calls": [{"name": "a"}]},
            LLMResponse(content="plain"),
            {"tool_calls": [{"name": "a"}, {"name": "b", "id": ""}]},
        ]
    )

    ids = [[c.id for c in (await caller.call(request(i))).tool_calls] for i in (1, 2, 3)]

    assert ids == [["call_1_1"], [], ["call_3_1", "call_3_2"]]


def test_response_from_dict_builds_the_full_shape() -> None:
    response = response_from_dict(
        {
            "content": "hi",
            "tool_calls": [{"id": "x", "name": "t", "arguments": {"k": [1]}}],
            "usage": {"input_tokens": 5},
        },
        turn_number=4,
    )

    assert response == LLMResponse(
        content="hi", tool_calls=[ToolCall("x", "t", {"k": [1]})], usage=Usage(5, 0)
    )


def test_response_from_dict_of_an_empty_turn_is_an_empty_final_answer() -> None:
    assert response_from_dict({}) == LLMResponse(content="", tool_calls=[], usage=None)


@pytest.mark.parametrize(
    ("turn", "message"),
    [
        ({"text": "hi"}, "unknown key\\(s\\) in scripted turn: text"),
        ({"content": 3}, "'content' of a scripted turn must be a string"),
        ({"tool_calls": {"name": "t"}}, "'tool_calls' of a scripted turn must be an array"),
        ({"tool_calls": [{"arguments": {}}]}, "tool_calls\\[0\\] needs a string 'name'"),
        ({"tool_calls": ["t"]}, "tool_calls\\[0\\] needs a string 'name'"),
        (
            {"tool_calls": [{"name": "t"}, {"name": "u", "arguments": "{}"}]},
            "tool_calls\\[1\\].arguments must be a JSON object",
        ),
        ({"tool_calls": [{"name": "t", "id": 7}]}, "tool_calls\\[0\\].id must be a string"),
        ({"usage": 10}, "'usage' of a scripted turn must be an object"),
        ({"usage": {"input_tokens": -1}}, "usage token counts must be non-negative integers"),
        ({"usage": {"output_tokens": True}}, "usage token counts must be non-negative integers"),
    ],
)
def test_response_from_dict_rejects_wrong_shapes_naming_the_key(
    turn: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        response_from_dict(turn)


def test_response_from_dict_rejects_a_turn_that_is_not_an_object() -> None:
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        response_from_dict([])  # type: ignore[arg-type]


def test_scripted_caller_rejects_a_bad_turn_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown key\\(s\\) in scripted turn: tools"):
        ScriptedLLMCaller([{"tools": []}])


async def test_a_recording_script_keeps_a_snapshot_of_each_request() -> None:
    llm = ScriptedLLMCaller([LLMResponse("one"), LLMResponse("two")], record=True)
    messages = [Message(Role.USER, "hi")]
    tools = [{"name": "t", "description": "", "input_schema": {"type": "object"}}]
    await llm.call(LLMRequest(messages, tools, 1))
    messages.append(Message(Role.ASSISTANT, "one"))  # the runtime's list is live
    await llm.call(LLMRequest(messages, (), 2))

    assert [r.iteration for r in llm.requests] == [1, 2]
    assert llm.requests[0].messages == [Message(Role.USER, "hi")]
    assert llm.requests[0].tools == tools
    assert len(llm.requests[1].messages) == 2
    assert llm.calls == 2


async def test_a_script_records_nothing_unless_asked() -> None:
    llm = ScriptedLLMCaller([LLMResponse("one")])
    await llm.call(LLMRequest([Message(Role.USER, "hi")], (), 1))
    assert llm.requests == []


async def test_a_responder_function_answers_every_request_with_responses_or_turns() -> None:
    def respond(request: LLMRequest) -> LLMResponse | dict[str, object]:
        if request.iteration == 1:
            return {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}
        return LLMResponse(f"answer {request.iteration}")

    llm = ScriptedLLMCaller(respond)
    first = await llm.call(LLMRequest([], (), 1))
    second = await llm.call(LLMRequest([], (), 2))
    assert [(c.id, c.name) for c in first.tool_calls] == [("call_1_1", "echo")]
    assert second.content == "answer 2"
    assert (llm.calls, len(llm)) == (2, 0)
