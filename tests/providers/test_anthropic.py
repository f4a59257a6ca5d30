"""AnthropicMessagesCaller against a fake Messages API server on loopback."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from cleveragents.providers import AnthropicMessagesCaller, ProviderError
from cleveragents.providers.anthropic import MessageStream
from cleveragents.tool import (
    ErrorKind,
    LLMRequest,
    Message,
    Role,
    RunBudget,
    ToolCallingRuntime,
    ToolError,
    ToolRegistry,
    ToolRunner,
    Usage,
)

from .conftest import NO_WAIT, SECRET, FakeProvider, anthropic_error, anthropic_message, ok

Factory = Callable[..., AnthropicMessagesCaller]


@pytest.fixture
async def make_caller(provider: FakeProvider) -> AsyncIterator[Factory]:
    """Callers aimed at the fake (the test key, no waits between retries)."""
    made: list[AnthropicMessagesCaller] = []

    def make(**kwargs: Any) -> AnthropicMessagesCaller:
        kwargs.setdefault("base_url", provider.url)
        kwargs.setdefault("api_key", SECRET)
        kwargs.setdefault("retry", NO_WAIT)
        caller = AnthropicMessagesCaller(kwargs.pop("model", "claude-test"), **kwargs)
        made.append(caller)
        return caller

    yield make
    for caller in made:
        await caller.aclose()


@pytest.fixture
def registry() -> ToolRegistry:
    """``lookup`` (a word's length) and ``broken`` (always fails)."""
    reg = ToolRegistry()

    @reg.tool
    def lookup(word: str) -> int:
        """The length of a word."""
        return len(word)

    @reg.tool
    def broken() -> None:
        """Always fails."""
        raise ToolError("disk on fire")

    return reg


def runtime(
    registry: ToolRegistry, caller: AnthropicMessagesCaller, system_prompt: str | None = None
) -> ToolCallingRuntime:
    return ToolCallingRuntime(
        registry, ToolRunner(registry), caller, router=caller.router, system_prompt=system_prompt
    )


def request() -> LLMRequest:
    return LLMRequest([Message(Role.USER, "hi")], [], 1)


# -- the request -------------------------------------------------------------------------------


async def test_request_goes_to_v1_messages_with_key_and_version_headers(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(anthropic_message("hello")))

    await make_caller().call(request())

    (received,) = provider.requests
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == SECRET
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers


async def test_body_has_system_at_top_level_input_schema_tools_and_default_max_tokens(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(ok(anthropic_message("hello")))

    await runtime(registry, make_caller(), system_prompt="Be brief.").arun_tool_loop("Hi.")

    body = provider.bodies()[0]
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi."}]}]
    assert [t["name"] for t in body["tools"]] == ["lookup", "broken"]
    assert body["tools"][0]["input_schema"]["required"] == ["word"]


async def test_params_override_max_tokens_and_pass_through(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(anthropic_message("hello")))

    await make_caller(params={"max_tokens": 256, "temperature": 0}).call(request())

    body = provider.bodies()[0]
    assert (body["max_tokens"], body["temperature"]) == (256, 0)


async def test_a_summary_call_without_tools_drops_tool_choice(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(anthropic_message(calls=[("toolu_1", "lookup", {"word": "cat"})])),
        ok(anthropic_message("Cat has 3 letters.")),
    )
    choice = {"type": "any", "disable_parallel_tool_use": True}
    caller = make_caller(params={"tool_choice": choice, "temperature": 0})
    run = ToolCallingRuntime(
        registry, ToolRunner(registry), caller, 1, caller.router,
        budget=RunBudget(summarize_on_stop=True),
    )  # fmt: skip

    result = await run.arun_tool_loop("How long is cat?")

    first, summary = provider.bodies()
    assert first["tool_choice"] == choice
    assert "tools" not in summary
    assert "tool_choice" not in summary
    assert summary["temperature"] == 0
    assert result.content == "Cat has 3 letters."


# -- the loop ----------------------------------------------------------------------------------


async def test_tool_use_ids_thread_into_one_user_turn_of_tool_results(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(
            anthropic_message(
                "Looking up.",
                [("toolu_1", "lookup", {"word": "four"}), ("toolu_2", "broken", {})],
            )
        ),
        ok(anthropic_message("Four letters; the other tool broke.")),
    )

    await runtime(registry, make_caller()).arun_tool_loop("Go.")

    _, assistant, results = provider.bodies()[1]["messages"]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking up."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "four"}},
            {"type": "tool_use", "id": "toolu_2", "name": "broken", "input": {}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"result": 4}'},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": '{"error": "disk on fire"}',
                "is_error": True,
            },
        ],
    }


async def test_a_multi_iteration_loop_returns_the_answer_history_and_summed_usage(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(anthropic_message("", [("toolu_1", "lookup", {"word": "ab"})], usage=(300, 20))),
        ok(anthropic_message("", [("toolu_2", "lookup", {"word": "abc"})], usage=(400, 25))),
        ok(anthropic_message("2 and 3.", usage=(500, 9))),
    )

    result = await runtime(registry, make_caller()).arun_tool_loop("Measure two words.")

    assert result.content == "2 and 3."
    assert result.iterations == 3
    assert [(r.call_id, r.output) for r in result.tool_call_history] == [
        ("toolu_1", {"result": 2}),
        ("toolu_2", {"result": 3}),
    ]
    assert result.usage == Usage(1200, 54)


async def test_cached_prompt_tokens_count_as_input(
    provider: FakeProvider, make_caller: Factory
) -> None:
    body = anthropic_message("hello", usage=(10, 5))
    body["usage"].update(cache_creation_input_tokens=100, cache_read_input_tokens=1000)
    provider.queue(ok(body))

    response = await make_caller().call(request())

    assert response.usage == Usage(1110, 5)


async def test_an_input_that_is_not_an_object_becomes_a_failed_record(
    provider: FakeProvider, make_caller: Factory, registry: ToolRegistry
) -> None:
    provider.queue(
        ok(anthropic_message("", [("toolu_1", "lookup", '{"word": ')])),
        ok(anthropic_message("Oops.")),
    )

    result = await runtime(registry, make_caller()).arun_tool_loop("Go.")

    (record,) = result.tool_call_history
    assert record.error_kind is ErrorKind.INVALID_ARGUMENTS
    feedback = provider.bodies()[1]["messages"][-1]["content"][0]
    assert feedback["is_error"] is True
    assert "not valid JSON" in json.loads(feedback["content"])["error"]


async def test_an_empty_end_turn_is_an_empty_final_answer(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(anthropic_message("", stop_reason="end_turn")))

    response = await make_caller().call(request())

    assert (response.content, list(response.tool_calls)) == ("", [])


# -- answers that cannot be used -----------------------------------------------------------------


async def test_a_refusal_stop_reason_is_an_answer_carrying_the_refusal(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(anthropic_message("", stop_reason="refusal"), request_id="req_refused"))

    response = await make_caller().call(request())

    assert response.refusal == "the model refused (stop_reason 'refusal')"
    assert list(response.tool_calls) == []


async def test_a_tool_use_cut_off_at_max_tokens_is_a_provider_error(
    provider: FakeProvider, make_caller: Factory
) -> None:
    message = anthropic_message("", [("toolu_1", "lookup", {})], stop_reason="max_tokens")
    provider.queue(ok(message))

    with pytest.raises(ProviderError, match=r"hit the token limit .*'max_tokens'"):
        await make_caller().call(request())


async def test_no_content_at_max_tokens_is_a_provider_error(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(anthropic_message("", stop_reason="max_tokens")))

    with pytest.raises(ProviderError, match="no content and no tool calls"):
        await make_caller().call(request())


# -- HTTP failures -------------------------------------------------------------------------------


async def test_overloaded_529_is_retried_and_the_retry_succeeds(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(
        anthropic_error(529, "overloaded_error", "Overloaded"), ok(anthropic_message("hello"))
    )

    response = await make_caller().call(request())

    assert response.content == "hello"
    assert len(provider.requests) == 2


async def test_the_error_names_the_request_id_header_anthropic_uses(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(anthropic_error(400, "invalid_request_error", "bad", request_id="req_0a1"))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert caught.value.request_id == "req_0a1"
    assert "invalid_request_error: bad" in str(caught.value)


def _assemble(deltas: int) -> tuple[str, float]:
    """Stream ``deltas`` text deltas of 100 characters into one block: its text, and the
    seconds that took."""
    stream = MessageStream(None, 1)
    stream.handle("message_start", {"type": "message_start", "message": {"role": "assistant"}})
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    stream.handle("content_block_start", block)
    started = time.perf_counter()
    for i in range(deltas):
        delta = {"type": "text_delta", "text": f"{i:05d}" + "x" * 95}
        stream.handle(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
    body = stream.body()
    return body["content"][0]["text"], time.perf_counter() - started


def test_a_long_streamed_text_block_is_assembled_in_linear_time() -> None:
    """The block's text is joined once, not re-copied per delta (which took seconds for
    30,000). Eight times the deltas take about eight times as long, where re-copying takes
    sixty-four: the median of ratios timed in pairs, side by side, so that a loaded machine
    slows both sides of each pair alike (a wall-clock bound failed there)."""
    text, _ = _assemble(30_000)
    ratios = []
    for _ in range(5):
        small, large = _assemble(3_000)[1], _assemble(24_000)[1]
        ratios.append(large / small)

    assert text == "".join(f"{i:05d}" + "x" * 95 for i in range(30_000))
    assert statistics.median(ratios) < 24, ratios
