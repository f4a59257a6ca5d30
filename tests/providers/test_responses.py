"""OpenAIResponsesCaller against a fake Responses API server on loopback."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from cleveragents.providers import OpenAIResponsesCaller, ProviderError
from cleveragents.sidecar.status import status_of
from cleveragents.tool import (
    LLMRequest,
    Message,
    ResponseDelta,
    Role,
    ToolCall,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
    Usage,
)

from . import streams
from .conftest import NO_WAIT, SECRET, FakeProvider, ok, sse
from .test_streaming import assembled

Factory = Callable[..., OpenAIResponsesCaller]


@pytest.fixture
async def make_caller(provider: FakeProvider) -> AsyncIterator[Factory]:
    made: list[OpenAIResponsesCaller] = []

    def make(**kwargs: Any) -> OpenAIResponsesCaller:
        kwargs = {"base_url": f"{provider.url}/v1", "api_key": SECRET, "retry": NO_WAIT, **kwargs}
        made.append(OpenAIResponsesCaller("o4-mini", **kwargs))
        return made[-1]

    yield make
    for caller in made:
        await caller.aclose()


@pytest.fixture
def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return reg


def turns(*, reasoning: bool) -> list[dict[str, Any]]:
    return [
        streams.responses_body("", (("call_a1", "add", '{"a": 2, "b": 3}'),), reasoning=reasoning),
        streams.responses_body("It is 5.", usage=(60, 6, 66)),
    ]


async def test_a_tool_loop_runs_with_function_call_items_and_their_outputs(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(*(ok(body) for body in turns(reasoning=False)))
    caller = make_caller()
    runtime = ToolCallingRuntime(
        registry, ToolRunner(registry), caller, router=caller.router, system_prompt="Be brief."
    )

    result = await runtime.arun_tool_loop("What is 2 + 3?")

    assert result.content == "It is 5."
    assert result.usage == Usage(97, 17)
    first, second = provider.bodies()
    assert provider.requests[0].path == "/v1/responses"
    assert first["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 3?"},
    ]
    assert first["tools"] == [
        {
            "type": "function",
            "name": "add",
            "description": "Add two integers.",
            "parameters": registry.specs()[0].input_schema,
            "strict": False,
        }
    ]
    assert second["input"][2:] == [
        {"type": "function_call", "call_id": "call_a1", "name": "add",
         "arguments": '{"a": 2, "b": 3}'},
        {"type": "function_call_output", "call_id": "call_a1", "output": '{"result": 5}'},
    ]  # fmt: skip


async def test_reasoning_items_go_back_with_the_calls_they_led_to(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(*(ok(body) for body in turns(reasoning=True)))
    caller = make_caller()
    runtime = ToolCallingRuntime(registry, ToolRunner(registry), caller, router=caller.router)

    await runtime.arun_tool_loop("What is 2 + 3?")

    second = provider.bodies()[1]
    assert second["input"][1] == streams.REASONING_ITEM
    assert second["input"][2]["type"] == "function_call"
    assert second["input"][2]["call_id"] == "call_a1"
    assert second["input"][3]["type"] == "function_call_output"


async def test_a_streamed_response_gives_text_and_argument_deltas(
    provider: FakeProvider, make_caller: Factory
) -> None:
    final = streams.responses_body(
        "Adding caf\u00e9 numbers.", (("call_b2", "add", '{"a": 1, "b": 2}'),), reasoning=True
    )
    provider.queue(sse(streams.responses_stream(final)))
    deltas: list[ResponseDelta] = []
    request = LLMRequest([Message(Role.USER, "hi")], [], 1, deltas=deltas.append)

    response = await make_caller(stream=True).call(request)

    assert response.content == "Adding caf\u00e9 numbers."
    assert response.tool_calls == [ToolCall("call_b2", "add", {"a": 1, "b": 2})]
    assert response.usage == Usage(37, 11)
    assert response.reasoning is not None  # not a delta: it comes with the whole answer
    assert assembled(deltas) == dataclasses.replace(response, reasoning=None)
    assert provider.bodies()[0]["stream"] is True


async def test_a_failed_streamed_response_names_the_api_error_code(
    provider: FakeProvider, make_caller: Factory
) -> None:
    failed = {
        "type": "response.failed",
        "sequence_number": 3,
        "response": {
            **streams.responses_body(status="failed"),
            "error": {"code": "server_error", "message": "The model failed to answer."},
        },
    }
    stream = streams.responses_stream(streams.responses_body("Half"))
    head = stream.split(b"event: response.output_text.done")[0]
    provider.queue(sse(head + streams.event("response.failed", failed)))

    with pytest.raises(ProviderError) as caught:
        await make_caller(stream=True).call(LLMRequest([Message(Role.USER, "hi")], [], 1))

    assert "server_error: The model failed to answer." in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.UNAVAILABLE


async def test_an_incomplete_response_without_text_is_an_unusable_answer(
    provider: FakeProvider, make_caller: Factory
) -> None:
    body = {
        **streams.responses_body(status="incomplete"),
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    provider.queue(ok(body))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(LLMRequest([Message(Role.USER, "hi")], [], 1))

    assert "incomplete (max_output_tokens)" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.FAILED_PRECONDITION


async def test_store_false_asks_for_reasoning_it_can_pass_back(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(streams.responses_body("ok")))

    await make_caller(params={"store": False}).call(LLMRequest([Message(Role.USER, "hi")], [], 1))

    assert provider.bodies()[0]["include"] == ["reasoning.encrypted_content"]
