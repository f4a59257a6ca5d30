"""Provider profiles end to end: a gRPC client, a real sidecar, and a fake provider."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, RunFailedError, SidecarRpcError
from cleveragents.sidecar import ProfileConfig, Sidecar, SidecarConfig
from cleveragents.sidecar.builtin_tools import builtin_registry
from cleveragents.tool import LLMResponded, RunFailed, StopReason, Usage

from . import streams
from .conftest import (
    SECRET,
    FakeProvider,
    anthropic_message,
    ok,
    openai_completion,
    openai_error,
    sse,
)

KEY_ENV = "CLEVERAGENTS_TEST_PROVIDER_KEY"
Start = Callable[..., Awaitable[AsyncSidecarClient]]


@pytest.fixture
async def start(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """Start a sidecar whose profiles aim at the fake provider; returns a client to it.

    Profiles are ``gpt`` (openai), ``claude`` (anthropic) and ``resp`` (openai_responses), all
    reading ``KEY_ENV``; keyword arguments override fields of all.
    """
    monkeypatch.setenv(KEY_ENV, SECRET)
    sidecars: list[Sidecar] = []
    clients: list[AsyncSidecarClient] = []

    async def make(**fields: Any) -> AsyncSidecarClient:
        common: dict[str, Any] = {"api_key_env": KEY_ENV, "max_retries": 0, **fields}
        profiles = {
            "gpt": ProfileConfig(
                "gpt", "openai", model="gpt-test", base_url=f"{provider.url}/v1", **common
            ),
            "claude": ProfileConfig(
                "claude", "anthropic", model="claude-test", base_url=provider.url, **common
            ),
            "resp": ProfileConfig(
                "resp", "openai_responses", model="o4-mini", base_url=f"{provider.url}/v1",
                **common,
            ),
        }  # fmt: skip
        config = SidecarConfig(listen="127.0.0.1:0", log_format="json", profiles=profiles)
        sidecar = Sidecar(config, registry=builtin_registry())
        await sidecar.start()
        sidecars.append(sidecar)
        clients.append(AsyncSidecarClient(sidecar.address))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()
    for sidecar in sidecars:
        await sidecar.stop(0.2)


def echo_turns_openai() -> list[Any]:
    return [
        ok(openai_completion("Echoing.", [("c1", "echo", '{"text": "one"}')], usage=(50, 5))),
        ok(openai_completion(None, [("c2", "echo", '{"text": "two"}')], usage=(60, 6))),
        ok(openai_completion("Both echoed.", usage=(70, 7))),
    ]


async def test_a_tool_loop_runs_through_an_openai_profile(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(*echo_turns_openai())
    client = await start()

    result = await client.run_tool_loop("Echo one, then two.", profile="gpt", timeout=10)

    assert result.content == "Both echoed."
    assert result.stop_reason is StopReason.FINAL_ANSWER
    assert [(r.call_id, r.output) for r in result.tool_call_history] == [
        ("c1", {"text": "one"}),
        ("c2", {"text": "two"}),
    ]
    assert result.usage == Usage(180, 18)


async def test_the_openai_profile_sends_function_tools_and_tool_messages(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(*echo_turns_openai())
    client = await start()

    await client.run_tool_loop("Echo one, then two.", profile="gpt", timeout=10)

    first, _, last = provider.bodies()
    assert {t["function"]["name"] for t in first["tools"]} == {"echo", "sleep"}
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]
    assert [m.get("tool_call_id") for m in last["messages"] if m["role"] == "tool"] == [
        "c1",
        "c2",
    ]
    assert provider.requests[0].headers["authorization"] == f"Bearer {SECRET}"


async def test_a_tool_loop_runs_through_an_anthropic_profile(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(
        ok(anthropic_message("", [("toolu_1", "echo", {"text": "hi"})], usage=(80, 8))),
        ok(anthropic_message("Echoed hi.", usage=(90, 9))),
    )
    client = await start()

    result = await client.run_tool_loop("Echo hi.", profile="claude", timeout=10)

    assert result.content == "Echoed hi."
    assert [r.call_id for r in result.tool_call_history] == ["toolu_1"]
    assert result.usage == Usage(170, 17)
    first, second = provider.bodies()
    assert {t["name"] for t in first["tools"]} == {"echo", "sleep"}
    assert second["messages"][-1]["content"][0]["tool_use_id"] == "toolu_1"
    assert provider.requests[0].headers["x-api-key"] == SECRET


async def test_llm_model_overrides_the_profile_model(provider: FakeProvider, start: Start) -> None:
    provider.queue(ok(openai_completion("hello")))
    client = await start()

    await client.run_tool_loop("Hi.", profile="gpt", model="gpt-other", timeout=10)

    assert provider.bodies()[0]["model"] == "gpt-other"


async def test_profile_params_reach_the_request(provider: FakeProvider, start: Start) -> None:
    provider.queue(ok(anthropic_message("hello")))
    client = await start(params={"temperature": 0.1, "max_tokens": 99})

    await client.run_tool_loop("Hi.", profile="claude", timeout=10)

    body = provider.bodies()[0]
    assert (body["temperature"], body["max_tokens"]) == (0.1, 99)


async def test_runs_of_a_profile_share_one_connection(provider: FakeProvider, start: Start) -> None:
    provider.queue(ok(openai_completion("one")), ok(openai_completion("two")))
    client = await start()

    await client.run_tool_loop("Hi.", profile="gpt", timeout=10)
    await client.run_tool_loop("Hi again.", profile="gpt", timeout=10)

    assert provider.connections == 1


async def test_an_unknown_profile_is_not_found(start: Start) -> None:
    client = await start()

    with pytest.raises(SidecarRpcError) as caught:
        await client.run_tool_loop("Hi.", profile="gemini", timeout=10)

    assert caught.value.code is grpc.StatusCode.NOT_FOUND


async def test_a_missing_key_variable_is_failed_precondition_naming_it(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await start()
    monkeypatch.delenv(KEY_ENV)

    with pytest.raises(SidecarRpcError) as caught:
        await client.run_tool_loop("Hi.", profile="gpt", timeout=10)

    assert caught.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert f"${KEY_ENV}, which is not set" in caught.value.details


async def test_a_script_on_a_provider_profile_is_invalid(start: Start) -> None:
    client = await start()

    with pytest.raises(SidecarRpcError) as caught:
        await client.run_tool_loop("Hi.", profile="gpt", script=[{"content": "x"}], timeout=10)

    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT


async def test_a_provider_failure_ends_the_run_unavailable_with_status_request_id_and_history(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(
        ok(openai_completion(None, [("c1", "echo", '{"text": "one"}')])),
        openai_error(503, "Service overloaded", x_request_id="req_503"),
    )
    client = await start()

    with pytest.raises(RunFailedError) as caught:
        await client.run_tool_loop("Echo.", profile="gpt", timeout=10)

    assert caught.value.code is grpc.StatusCode.UNAVAILABLE
    # Which profile failed, and where it sent the request: an operator with several knows.
    where = f"openai profile 'gpt' at {provider.url}/v1/chat/completions"
    assert f"{where}: HTTP 503: Error: server_error: Service overloaded" in caught.value.details
    assert "request id req_503" in caught.value.details
    assert caught.value.result.stop_reason is StopReason.ERROR
    assert [r.call_id for r in caught.value.result.tool_call_history] == ["c1"]


async def test_a_rejected_key_ends_the_run_permission_denied(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(openai_error(401, "Incorrect API key provided"))
    client = await start()

    with pytest.raises(RunFailedError) as caught:
        await client.run_tool_loop("Hi.", profile="gpt", timeout=10)

    assert caught.value.code is grpc.StatusCode.PERMISSION_DENIED


async def test_the_key_appears_in_no_log_line_and_no_event(
    provider: FakeProvider, start: Start, captured_logs: io.StringIO
) -> None:
    provider.queue(
        openai_error(429, f"Rate limited for key {SECRET}", retry_after="0"),
        openai_error(500, f"Key {SECRET} broke us"),
    )
    client = await start(max_retries=1)

    events = [e async for e in client.stream_tool_loop("Hi.", profile="gpt", timeout=10)]

    failed = events[-1].event
    assert isinstance(failed, RunFailed)
    assert "[redacted]" in failed.message
    assert SECRET not in repr(events)
    logs = captured_logs.getvalue()
    assert "provider request failed, retrying" in logs
    assert "run finished" in logs
    assert SECRET not in logs
    assert not any(isinstance(e.event, LLMResponded) for e in events)


async def test_a_streaming_profile_runs_a_tool_loop_from_server_sent_events(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(
        sse(streams.openai_stream("Echoing.", (("c1", "echo", '{"text": "one"}'),), (50, 5))),
        sse(streams.openai_stream("Echoed one.", usage=(60, 6))),
    )
    client = await start()  # profiles stream unless they say stream = false

    result = await client.run_tool_loop("Echo one.", profile="gpt", timeout=10)

    assert result.content == "Echoed one."
    assert [(r.call_id, r.output) for r in result.tool_call_history] == [("c1", {"text": "one"})]
    assert result.usage == Usage(110, 11)
    assert [body["stream"] for body in provider.bodies()] == [True, True]


async def test_a_profile_with_stream_false_asks_for_a_whole_answer(
    provider: FakeProvider, start: Start
) -> None:
    provider.queue(ok(anthropic_message("hello")))
    client = await start(stream=False)

    await client.run_tool_loop("Hi.", profile="claude", timeout=10)

    assert "stream" not in provider.bodies()[0]


async def test_a_responses_profile_streams_a_tool_loop_with_reasoning_passed_back(
    provider: FakeProvider, start: Start
) -> None:
    first = streams.responses_body("", (("call_1", "echo", '{"text": "one"}'),), reasoning=True)
    provider.queue(
        sse(streams.responses_stream(first)),
        sse(streams.responses_stream(streams.responses_body("Echoed one."))),
    )
    client = await start()

    result = await client.run_tool_loop("Echo one.", profile="resp", timeout=10)

    assert result.content == "Echoed one."
    assert [r.call_id for r in result.tool_call_history] == ["call_1"]
    second = provider.bodies()[1]
    assert provider.requests[1].path == "/v1/responses"
    assert streams.REASONING_ITEM in second["input"]
    assert second["input"][-1]["type"] == "function_call_output"
