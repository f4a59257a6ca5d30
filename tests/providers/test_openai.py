"""OpenAIChatCaller against a fake Chat Completions server on loopback."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from cleveragents.providers import AnswerTooLargeError, OpenAIChatCaller, ProviderError
from cleveragents.sidecar.status import status_of
from cleveragents.tool import (
    ErrorKind,
    LLMCallError,
    LLMRequest,
    Message,
    Role,
    RunBudget,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
    Usage,
)

from .conftest import NO_WAIT, SECRET, FakeProvider, Reply, ok, openai_completion, openai_error

Factory = Callable[..., OpenAIChatCaller]


@pytest.fixture
async def make_caller(provider: FakeProvider) -> AsyncIterator[Factory]:
    """Callers aimed at the fake (``/v1`` base URL, the test key, no waits between retries)."""
    made: list[OpenAIChatCaller] = []

    def make(**kwargs: Any) -> OpenAIChatCaller:
        kwargs.setdefault("base_url", f"{provider.url}/v1")
        kwargs.setdefault("api_key", SECRET)
        kwargs.setdefault("retry", NO_WAIT)
        caller = OpenAIChatCaller(kwargs.pop("model", "gpt-test"), **kwargs)
        made.append(caller)
        return caller

    yield make
    for caller in made:
        await caller.aclose()


@pytest.fixture
def registry() -> ToolRegistry:
    """``add`` (two integers) and ``shout`` (upper-cases a text)."""
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @reg.tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    return reg


def runtime(registry: ToolRegistry, caller: OpenAIChatCaller) -> ToolCallingRuntime:
    return ToolCallingRuntime(registry, ToolRunner(registry), caller, router=caller.router)


class _AnyJSONObject:
    """Equal to any JSON text that holds an object."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and isinstance(json.loads(other), dict)


ANY_JSON: Any = _AnyJSONObject()


def request(*messages: Message, tools: list[dict[str, Any]] | None = None) -> LLMRequest:
    return LLMRequest(list(messages) or [Message(Role.USER, "hi")], tools or [], 1)


# -- the request -------------------------------------------------------------------------------


async def test_request_goes_to_chat_completions_with_a_bearer_key(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion("hello")))

    await make_caller().call(request())

    (received,) = provider.requests
    assert (received.method, received.path) == ("POST", "/v1/chat/completions")
    assert received.headers["authorization"] == f"Bearer {SECRET}"
    assert received.headers["content-type"] == "application/json"


async def test_body_carries_model_params_messages_and_function_tools(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(ok(openai_completion("hello")))
    caller = make_caller(params={"temperature": 0.2, "max_tokens": 50})

    await runtime(registry, caller).arun_tool_loop("Add 1 and 2.")

    body = provider.bodies()[0]
    assert body["model"] == "gpt-test"
    assert (body["temperature"], body["max_tokens"]) == (0.2, 50)
    assert body["messages"] == [{"role": "user", "content": "Add 1 and 2."}]
    assert [t["type"] for t in body["tools"]] == ["function", "function"]
    assert body["tools"][0]["function"]["name"] == "add"
    assert body["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]


async def test_a_summary_call_without_tools_drops_tool_choice_and_parallel_tool_calls(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(openai_completion(calls=[("call_1", "add", '{"a": 1, "b": 2}')])),
        ok(openai_completion("It is 3.")),
    )
    caller = make_caller(params={"tool_choice": "required", "parallel_tool_calls": False})
    run = ToolCallingRuntime(
        registry, ToolRunner(registry), caller, 1, caller.router,
        budget=RunBudget(summarize_on_stop=True),
    )  # fmt: skip

    result = await run.arun_tool_loop("Add 1 and 2.")

    first, summary = provider.bodies()
    assert (first["tool_choice"], first["parallel_tool_calls"]) == ("required", False)
    assert "tools" not in summary
    assert "tool_choice" not in summary
    assert "parallel_tool_calls" not in summary
    assert result.content == "It is 3."


async def test_a_request_without_tools_keeps_the_other_params(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion("hello")))
    caller = make_caller(params={"tool_choice": "auto", "temperature": 0.5})

    await caller.call(request())

    body = provider.bodies()[0]
    assert "tool_choice" not in body
    assert body["temperature"] == 0.5


async def test_no_key_means_no_authorization_header(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion("hello")))

    await make_caller(api_key="").call(request())

    assert "authorization" not in provider.requests[0].headers


async def test_no_tools_means_no_tools_field(provider: FakeProvider, make_caller: Factory) -> None:
    provider.queue(ok(openai_completion("hello")))

    await make_caller().call(request())

    assert "tools" not in provider.bodies()[0]


async def test_neutral_tool_schemas_from_a_runtime_without_router_are_converted(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion("hello")))
    neutral = {"name": "now", "description": "The time.", "input_schema": {"type": "object"}}

    await make_caller().call(request(tools=[neutral]))

    assert provider.bodies()[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "now",
                "description": "The time.",
                "parameters": {"type": "object"},
            },
        }
    ]


@pytest.mark.parametrize("key", ["model", "messages", "tools", "stream"])
def test_params_may_not_set_the_fields_the_caller_writes(key: str) -> None:
    with pytest.raises(ValueError, match=f"params may not set {key}"):
        OpenAIChatCaller("gpt-test", params={key: 1})


# -- the loop ----------------------------------------------------------------------------------


async def test_tool_call_ids_and_results_are_threaded_into_the_next_request(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(openai_completion(None, [("call_a", "add", '{"a": 1, "b": 2}')])),
        ok(openai_completion("3")),
    )

    await runtime(registry, make_caller()).arun_tool_loop("Add 1 and 2.")

    _, assistant, tool = provider.bodies()[1]["messages"]
    assert assistant["role"] == "assistant"
    assert assistant["content"] is None
    assert assistant["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": ANY_JSON}}
    ]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert tool == {"role": "tool", "tool_call_id": "call_a", "content": '{"result": 3}'}


async def test_a_multi_iteration_loop_returns_the_answer_history_and_summed_usage(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(openai_completion("Adding.", [("c1", "add", '{"a": 1, "b": 2}')], usage=(100, 10))),
        ok(openai_completion(None, [("c2", "shout", '{"text": "three"}')], usage=(150, 12))),
        ok(openai_completion("THREE is 3.", usage=(200, 8))),
    )

    result = await runtime(registry, make_caller()).arun_tool_loop("Add, then shout.")

    assert result.content == "THREE is 3."
    assert result.iterations == 3
    assert [(r.tool_name, r.output, r.call_id) for r in result.tool_call_history] == [
        ("add", {"result": 3}, "c1"),
        ("shout", {"result": "THREE"}, "c2"),
    ]
    assert result.usage == Usage(450, 30)


async def test_arguments_that_are_not_json_become_a_failed_record_the_model_sees(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(openai_completion(None, [("c1", "add", '{"a": 1, "b":')])),
        ok(openai_completion("Sorry.")),
    )

    result = await runtime(registry, make_caller()).arun_tool_loop("Add.")

    (record,) = result.tool_call_history
    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    assert record.error is not None
    assert "not valid JSON" in record.error
    tool_message = provider.bodies()[1]["messages"][-1]
    assert tool_message["tool_call_id"] == "c1"
    assert "not valid JSON" in json.loads(tool_message["content"])["error"]


async def test_an_unknown_tool_becomes_a_failed_record_and_the_loop_goes_on(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(openai_completion(None, [("c1", "divide", '{"a": 1}')])),
        ok(openai_completion("No divide tool.")),
    )

    result = await runtime(registry, make_caller()).arun_tool_loop("Divide.")

    assert result.content == "No divide tool."
    assert result.tool_call_history[0].error_kind is ErrorKind.UNKNOWN_TOOL


async def test_missing_call_ids_are_filled_in(provider: FakeProvider, make_caller: Factory) -> None:
    provider.queue(ok(openai_completion(None, [("", "add", "{}"), ("", "add", "{}")])))

    response = await make_caller().call(LLMRequest([Message(Role.USER, "hi")], [], 4))

    assert [c.id for c in response.tool_calls] == ["call_4_1", "call_4_2"]


# -- answers that cannot be used -----------------------------------------------------------------


async def test_an_empty_choice_list_is_a_provider_error_with_the_request_id(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok({"id": "x", "choices": [], "usage": None}, request_id="req_empty"))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert str(caught.value) == (
        "openai: HTTP 200: unusable response: the provider's response has no choices "
        "(request id req_empty)"
    )


async def test_a_refusal_is_an_answer_carrying_its_text(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion(None, refusal="I can't help with that.")))

    response = await make_caller().call(request())

    assert response.refusal == "I can't help with that."
    assert (response.content, list(response.tool_calls)) == ("", [])


async def test_tool_calls_cut_off_by_the_token_limit_are_a_provider_error(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion(None, [("c1", "add", '{"a": 1')], finish_reason="length")))

    with pytest.raises(ProviderError, match=r"hit the token limit .*raise max_tokens"):
        await make_caller().call(request())


async def test_no_content_because_of_the_content_filter_is_a_provider_error(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion(None, finish_reason="content_filter")))

    with pytest.raises(ProviderError, match=r"no content and no tool calls .*'content_filter'"):
        await make_caller().call(request())


async def test_a_body_that_is_not_json_is_a_provider_error(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(Reply(200, b"<html>gateway</html>"))

    expected = r"not standard JSON \(Expecting value at position 0\): <html>gateway</html>"
    with pytest.raises(ProviderError, match=expected):
        await make_caller().call(request())


async def test_a_failed_call_ends_the_loop_with_llm_call_error_and_the_history_so_far(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(openai_completion(None, [("c1", "add", '{"a": 1, "b": 2}')])),
        ok({"choices": []}),
    )

    with pytest.raises(LLMCallError) as caught:
        await runtime(registry, make_caller()).arun_tool_loop("Add.")

    assert isinstance(caught.value.__cause__, ProviderError)
    assert [r.call_id for r in caught.value.tool_call_history] == ["c1"]


# -- HTTP failures -------------------------------------------------------------------------------


async def test_a_429_is_retried_and_the_retry_succeeds(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(openai_error(429, "Rate limit reached"), ok(openai_completion("hello")))

    response = await make_caller().call(request())

    assert response.content == "hello"
    assert len(provider.requests) == 2


async def test_a_500_is_retried_max_retries_times_then_fails_with_status_and_request_id(
    provider: FakeProvider, make_caller: Factory
) -> None:
    error = openai_error(500, "The server had an error", x_request_id="req_500")
    provider.queue(error, error, error)

    with pytest.raises(ProviderError) as caught:
        await make_caller(max_retries=2).call(request())

    assert len(provider.requests) == 3
    assert (caught.value.status, caught.value.request_id) == (500, "req_500")
    assert str(caught.value) == (
        "openai: HTTP 500: Error: server_error: The server had an error "
        "(request id req_500, 3 attempts)"
    )


async def test_a_400_is_not_retried(provider: FakeProvider, make_caller: Factory) -> None:
    provider.queue(openai_error(400, "Invalid model"), ok(openai_completion("unreached")))

    with pytest.raises(ProviderError, match="HTTP 400: Bad Request: server_error: Invalid model"):
        await make_caller().call(request())

    assert len(provider.requests) == 1


async def test_a_retry_after_longer_than_the_policy_allows_is_not_waited_for(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(openai_error(429, "Slow down", retry_after="3600"))

    with pytest.raises(ProviderError, match="not retried: the provider asked to wait 3600s"):
        await make_caller().call(request())

    assert len(provider.requests) == 1


async def test_a_request_without_an_answer_times_out(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(Reply(hang=True))

    with pytest.raises(ProviderError) as caught:
        await make_caller(timeout_s=0.2, max_retries=0).call(request())

    assert caught.value.status is None
    assert caught.value.retryable
    assert str(caught.value) == "openai: no response within 0.2s (ReadTimeout)"


async def test_a_timeout_is_retried_on_a_new_connection(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(Reply(hang=True), ok(openai_completion("hello")))

    response = await make_caller(timeout_s=0.2, max_retries=1).call(request())

    assert response.content == "hello"
    assert provider.connections == 2


async def test_a_dropped_connection_is_retried(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(Reply(drop=True), ok(openai_completion("hello")))

    response = await make_caller().call(request())

    assert response.content == "hello"


async def test_a_refused_connection_fails_without_a_status(make_caller: Factory) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    caller = make_caller(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)

    with pytest.raises(ProviderError, match=r"^openai: connection failed \(ConnectError"):
        await caller.call(request())


async def test_the_key_is_scrubbed_from_an_error_that_quotes_it(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(openai_error(401, f"Incorrect API key provided: {SECRET}."))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)
    assert "Incorrect API key provided: [redacted]." in str(caught.value)


async def test_a_whole_answer_body_past_its_bound_is_refused_unread(
    provider: FakeProvider, make_caller: Factory
) -> None:
    """Six bytes a character of ``max_answer_chars`` and 1 MiB more; the answer here is far
    smaller, but the body is not."""
    padding = "x" * (1024 * 1024 + 700)
    provider.queue(ok({**openai_completion("short"), "padding": padding}))

    with pytest.raises(AnswerTooLargeError) as caught:
        await make_caller(max_answer_chars=100).call(request())

    assert str(caught.value).startswith("openai: HTTP 200: the response body passed 1049176 bytes")
    assert "request id req_ok" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_whole_answer_body_within_its_bound_is_read(
    provider: FakeProvider, make_caller: Factory
) -> None:
    padding = "x" * (1024 * 1024)
    provider.queue(ok({**openai_completion("short"), "padding": padding}))

    response = await make_caller(max_answer_chars=100).call(request())

    assert response.content == "short"
