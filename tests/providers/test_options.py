"""Profile options that change the request bytes: Anthropic strict tools and Chat streams
without ``stream_options``, each checked against the exact body the loopback server got."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.providers import AnthropicMessagesCaller, OpenAIChatCaller, ProviderError
from cleveragents.sidecar import ConfigError, ProfileConfig
from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.status import status_of
from cleveragents.tool import LLMRequest, Message, Role, ToolSpec, Usage

from . import streams
from .conftest import NO_WAIT, SECRET, FakeProvider, Reply, anthropic_message, ok, sse

ADD = ToolSpec(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)


@pytest.fixture
async def closing() -> AsyncIterator[list[Any]]:
    """Callers to close after the test."""
    made: list[Any] = []
    yield made
    for caller in made:
        await caller.aclose()


def hi(tools: Any = ()) -> LLMRequest:
    return LLMRequest([Message(Role.USER, "hi")], list(tools), 1)


# -- Anthropic strict tool use ---------------------------------------------------------------


async def test_strict_tools_sends_anthropic_tools_with_strict_true(
    provider: FakeProvider, closing: list[Any]
) -> None:
    provider.queue(ok(anthropic_message("ok")))
    caller = AnthropicMessagesCaller("claude-test", base_url=provider.url, strict_tools=True)
    closing.append(caller)

    await caller.call(hi(caller.router.tool_schemas([ADD])))

    received = provider.requests[0]
    assert received.raw == (
        b'{"model":"claude-test","max_tokens":4096,'
        b'"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],'
        b'"tools":[{"name":"add","description":"Add two integers.","input_schema":'
        b'{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},'
        b'"required":["a","b"],"additionalProperties":false},"strict":true}]}'
    )
    assert "anthropic-beta" not in received.headers  # generally available: no beta header


def test_strict_tools_on_an_anthropic_profile_loads_and_reaches_its_caller(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sidecar.toml"
    path.write_text(
        '[profiles.claude]\nkind = "anthropic"\nmodel = "m"\nstrict_tools = true\n',
        encoding="utf-8",
    )

    profile = load_config(path, env={}).profiles["claude"]

    assert profile.strict_tools is True


# -- Chat Completions streams without stream_options ------------------------------------------


async def test_stream_usage_false_leaves_stream_options_out_of_the_request(
    provider: FakeProvider, closing: list[Any]
) -> None:
    provider.queue(sse(streams.openai_stream("Hello")))
    caller = OpenAIChatCaller(
        "local-model", base_url=f"{provider.url}/v1", stream=True, stream_usage=False
    )
    closing.append(caller)

    response = await caller.call(hi())

    assert response.content == "Hello"
    assert provider.requests[0].raw == (
        b'{"model":"local-model","messages":[{"role":"user","content":"hi"}],"stream":true}'
    )


async def test_a_stream_asks_for_its_usage_by_default(
    provider: FakeProvider, closing: list[Any]
) -> None:
    provider.queue(sse(streams.openai_stream("Hello", usage=(7, 2))))
    caller = OpenAIChatCaller("gpt-test", base_url=f"{provider.url}/v1", stream=True)
    closing.append(caller)

    response = await caller.call(hi())

    assert response.usage == Usage(7, 2)
    assert provider.requests[0].raw == (
        b'{"model":"gpt-test","messages":[{"role":"user","content":"hi"}],"stream":true,'
        b'"stream_options":{"include_usage":true}}'
    )


async def test_a_400_naming_stream_options_says_which_setting_to_change(
    provider: FakeProvider, closing: list[Any]
) -> None:
    body = {"error": {"message": "Unrecognized request argument supplied: stream_options",
                      "type": "invalid_request_error", "param": None, "code": None}}  # fmt: skip
    provider.queue(Reply(400, body))
    caller = OpenAIChatCaller(
        "local-model", base_url=f"{provider.url}/v1", api_key=SECRET, stream=True,
        profile="local", retry=NO_WAIT,
    )  # fmt: skip
    closing.append(caller)

    with pytest.raises(ProviderError) as caught:
        await caller.call(hi())

    text = str(caught.value)
    assert "profile 'local'" in text
    assert "set stream_usage = false in the profile" in text
    assert status_of(caught.value) is grpc.StatusCode.FAILED_PRECONDITION
    assert len(provider.requests) == 1  # a refusal is not retried


def test_stream_usage_loads_from_toml_for_an_openai_profile(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.toml"
    path.write_text(
        '[profiles.local]\nkind = "openai"\nmodel = "m"\nstream_usage = false\n'
        '[profiles.gpt]\nkind = "openai"\nmodel = "m"\n',
        encoding="utf-8",
    )

    profiles = load_config(path, env={}).profiles

    assert (profiles["local"].stream_usage, profiles["gpt"].stream_usage) == (False, True)


@pytest.mark.parametrize("kind", ["anthropic", "openai_responses"])
def test_stream_usage_on_another_kind_is_a_config_error(kind: str) -> None:
    with pytest.raises(ConfigError, match="stream_usage is for kind 'openai'"):
        ProfileConfig("p", kind, model="m", stream_usage=False)
