"""What real provider traffic needs beyond the basics: totals beyond the parts, prompt
caching, strict schemas, and errors that say which profile, URL and error code."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cleveragents.providers import (
    AnthropicMessagesCaller,
    OpenAIChatCaller,
    OpenAIResponsesCaller,
    ProviderError,
)
from cleveragents.sidecar import ConfigError, ProfileConfig
from cleveragents.sidecar.config import load_config
from cleveragents.tool import (
    LLMRequest,
    Message,
    Role,
    RunBudget,
    StopReason,
    ToolCallingRuntime,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    Usage,
)
from cleveragents.wire.values import usage_from_pb, usage_to_pb

from . import streams
from .conftest import (
    NO_WAIT,
    SECRET,
    FakeProvider,
    Reply,
    anthropic_message,
    ok,
    openai_completion,
    sse,
)

ADD = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {}})


@pytest.fixture
async def closing() -> AsyncIterator[list[object]]:
    """Callers to close after the test."""
    made: list[object] = []
    yield made
    for caller in made:
        await caller.aclose()  # type: ignore[attr-defined]


def hi() -> LLMRequest:
    return LLMRequest([Message(Role.SYSTEM, "Be brief."), Message(Role.USER, "hi")], [], 1)


# -- totals beyond input + output ------------------------------------------------------------


async def test_a_total_beyond_prompt_and_completion_is_kept_in_the_usage(
    provider: FakeProvider, closing: list[object]
) -> None:
    provider.queue(sse(streams.GEMINI_TEXT))
    caller = OpenAIChatCaller("gemini-2.5-flash", base_url=provider.url, stream=True)
    closing.append(caller)

    response = await caller.call(hi())

    assert response.usage == Usage(10, 5, 415)
    assert response.usage.total_tokens == 415


async def test_the_token_budget_counts_thinking_tokens_in_the_reported_total(
    provider: FakeProvider, closing: list[object]
) -> None:
    turn = openai_completion(None, [("c1", "add", "{}")], usage=(10, 5))
    turn["usage"]["total_tokens"] = 415  # Gemini: 400 thinking tokens on top
    provider.queue(ok(turn), ok(openai_completion("done")))
    caller = OpenAIChatCaller("gemini-2.5-flash", base_url=provider.url)
    closing.append(caller)
    registry = ToolRegistry()
    registry.register(ADD, lambda: 5)
    runtime = ToolCallingRuntime(
        registry,
        ToolRunner(registry),
        caller,
        router=caller.router,
        budget=RunBudget(max_total_tokens=100),
    )

    result = await runtime.arun_tool_loop("Add.")

    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.usage is not None
    assert result.usage.total_tokens == 415


def test_a_reported_total_survives_the_wire_and_sums() -> None:
    usage = Usage(10, 5, 415)
    pb = usage_to_pb(usage)

    assert pb is not None
    assert usage_from_pb(pb) == usage
    assert (usage + Usage(1, 1)).total_tokens == 417
    assert Usage(10, 5, 15) == Usage(10, 5)  # a total equal to the parts says nothing more


# -- Anthropic prompt caching ----------------------------------------------------------------


async def test_cache_prompt_marks_the_system_prompt_tools_and_last_turn(
    provider: FakeProvider, closing: list[object]
) -> None:
    provider.queue(ok(anthropic_message("hello")))
    caller = AnthropicMessagesCaller("claude-test", base_url=provider.url, cache_prompt=True)
    closing.append(caller)
    tools = caller.router.tool_schemas([ADD, ToolSpec("sub", "Subtract.", {"type": "object"})])

    await caller.call(LLMRequest(hi().messages, tools, 1))

    body = provider.bodies()[0]
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": ephemeral}]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == ephemeral
    assert body["messages"][-1]["content"][-1]["cache_control"] == ephemeral


async def test_without_cache_prompt_nothing_is_marked(
    provider: FakeProvider, closing: list[object]
) -> None:
    provider.queue(ok(anthropic_message("hello")))
    caller = AnthropicMessagesCaller("claude-test", base_url=provider.url)
    closing.append(caller)

    await caller.call(hi())

    assert "cache_control" not in str(provider.bodies()[0])


# -- strict tool schemas ---------------------------------------------------------------------


async def test_strict_tools_marks_chat_function_schemas_strict(
    provider: FakeProvider, closing: list[object]
) -> None:
    provider.queue(ok(openai_completion("ok")))
    caller = OpenAIChatCaller("gpt-test", base_url=provider.url, strict_tools=True)
    closing.append(caller)

    await caller.call(LLMRequest(hi().messages, caller.router.tool_schemas([ADD]), 1))

    assert provider.bodies()[0]["tools"][0]["function"]["strict"] is True


async def test_strict_tools_sets_strict_on_responses_tools(
    provider: FakeProvider, closing: list[object]
) -> None:
    provider.queue(ok(streams.responses_body("ok")))
    caller = OpenAIResponsesCaller("o4-mini", base_url=provider.url, strict_tools=True)
    closing.append(caller)

    await caller.call(LLMRequest(hi().messages, caller.router.tool_schemas([ADD]), 1))

    assert provider.bodies()[0]["tools"][0]["strict"] is True


# -- error messages --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (401, "invalid_api_key", "Incorrect API key provided: sk-proj-****abcd."),
        (404, "model_not_found", "The model `gpt-9` does not exist or you do not have access."),
    ],
)
async def test_an_error_names_the_profile_the_url_and_the_providers_code(
    provider: FakeProvider, closing: list[object], status: int, code: str, message: str
) -> None:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}  # fmt: skip
    provider.queue(Reply(status, body))
    caller = OpenAIChatCaller(
        "gpt-9", base_url=f"{provider.url}/v1", api_key=SECRET, profile="prod", retry=NO_WAIT
    )
    closing.append(caller)

    with pytest.raises(ProviderError) as caught:
        await caller.call(hi())

    text = str(caught.value)
    assert f"profile 'prod' at {provider.url}/v1/chat/completions" in text
    assert f"invalid_request_error ({code}): {message}" in text


# -- profile settings ------------------------------------------------------------------------


def test_stream_strict_and_cache_settings_load_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.toml"
    path.write_text(
        '[profiles.a]\nkind = "openai"\nmodel = "m"\nstream = false\nstrict_tools = true\n'
        '[profiles.b]\nkind = "anthropic"\nmodel = "m"\ncache_prompt = true\n'
        '[profiles.c]\nkind = "openai_responses"\nmodel = "m"\n',
        encoding="utf-8",
    )

    profiles = load_config(path, env={}).profiles

    assert (profiles["a"].stream, profiles["a"].strict_tools) == (False, True)
    assert (profiles["b"].stream, profiles["b"].cache_prompt) == (True, True)
    assert (profiles["c"].kind, profiles["c"].stream) == ("openai_responses", True)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('kind = "openai"\ncache_prompt = true', "unknown key"),
        ('kind = "openai_responses"\nstream_usage = false', "unknown key"),
        ('kind = "openai"\nstream = "yes"', "must be true or false"),
    ],
)
def test_a_setting_for_another_kind_is_a_config_error(
    tmp_path: Path, table: str, message: str
) -> None:
    path = tmp_path / "sidecar.toml"
    path.write_text(f"[profiles.p]\n{table}\n", encoding="utf-8")

    with pytest.raises(ConfigError, match=message):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("kind", "setting", "message"),
    [
        ("openai", "cache_prompt", "cache_prompt is for kind 'anthropic'"),
    ],
)
def test_a_profile_value_with_a_setting_its_kind_lacks_is_refused(
    kind: str, setting: str, message: str
) -> None:
    settings: dict[str, Any] = {setting: True}

    with pytest.raises(ConfigError, match=message):
        ProfileConfig("p", kind, model="m", **settings)
