"""Streaming answers: server-sent events from a loopback server, deltas, and broken streams."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from cleveragents.providers import (
    AnswerTooLargeError,
    AnthropicMessagesCaller,
    HTTPCaller,
    OpenAIChatCaller,
    ProviderError,
)
from cleveragents.sidecar.status import status_of
from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    Message,
    ResponseDelta,
    Role,
    ToolCall,
    parse_call,
)

from . import streams
from .conftest import NO_WAIT, SECRET, FakeProvider, ok, openai_completion, openai_error, sse

Factory = Callable[..., HTTPCaller]


@pytest.fixture
async def make_caller(provider: FakeProvider) -> AsyncIterator[Factory]:
    """Streaming callers aimed at the fake: ``make(OpenAIChatCaller, **kwargs)``."""
    made: list[HTTPCaller] = []

    def make(cls: type[HTTPCaller] = OpenAIChatCaller, **kwargs: Any) -> HTTPCaller:
        base = f"{provider.url}/v1" if cls is OpenAIChatCaller else provider.url
        kwargs = {"base_url": base, "api_key": SECRET, "retry": NO_WAIT, "stream": True, **kwargs}
        made.append(cls("model-test", **kwargs))
        return made[-1]

    yield make
    for caller in made:
        await caller.aclose()


def request(deltas: list[ResponseDelta] | None = None) -> LLMRequest:
    sink = deltas.append if deltas is not None else None
    return LLMRequest([Message(Role.USER, "hi")], [], iteration=1, deltas=sink)


def assembled(deltas: list[ResponseDelta]) -> LLMResponse:
    """The answer that the deltas spell out, as a consumer of them would put it together."""
    text = "".join(d.text for d in deltas if d.tool_call_index is None)
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if d.tool_call_index is not None:
            entry = calls.setdefault(d.tool_call_index, [d.tool_call_id, d.tool_name, ""])
            entry[2] += d.arguments
    usage = [d.usage for d in deltas if d.usage is not None]
    return LLMResponse(
        text,
        [parse_call(i, n, a) for _, (i, n, a) in sorted(calls.items())],
        usage[-1] if usage else None,
    )


async def test_an_openai_stream_gives_deltas_that_assemble_to_the_response(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(streams.OPENAI_TOOLS))
    deltas: list[ResponseDelta] = []

    response = await make_caller().call(request(deltas))

    assert response.content == "Adding."
    assert response.tool_calls == [
        ToolCall("call_Xq1", "add", {"a": 2, "b": 3}),
        ToolCall("call_Yz2", "shout", {"text": "h\u00e9"}),
    ]
    assert response.usage is not None
    assert response.usage.input_tokens == 80
    assert assembled(deltas) == response
    first_of_second = next(d for d in deltas if d.tool_call_index == 1)
    assert (first_of_second.tool_call_id, first_of_second.tool_name) == ("call_Yz2", "shout")


async def test_an_openai_stream_is_asked_for_with_its_usage(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(streams.OPENAI_TEXT))

    await make_caller().call(request())

    (received,) = provider.requests
    assert received.body["stream"] is True
    assert received.body["stream_options"] == {"include_usage": True}
    assert received.headers["accept"] == "text/event-stream"


async def test_a_stream_split_at_every_byte_gives_the_same_answer(
    provider: FakeProvider, make_caller: Factory
) -> None:
    stream = streams.OPENAI_SMALL
    caller = make_caller()
    for at in range(1, len(stream)):
        provider.queue(sse(stream, at=[at]))
        deltas: list[ResponseDelta] = []

        response = await caller.call(request(deltas))

        assert response.content == streams.OPENAI_TEXT_CONTENT, f"split at byte {at}"
        assert "".join(d.text for d in deltas) == streams.OPENAI_TEXT_CONTENT


async def test_a_recorded_stream_split_inside_each_character_and_at_each_line_end_is_whole(
    provider: FakeProvider, make_caller: Factory
) -> None:
    stream = streams.OPENAI_TEXT
    inside = [i for i in range(1, len(stream)) if stream[i] & 0xC0 == 0x80]  # UTF-8 tails
    ends = [i for i in range(1, len(stream)) if stream[i - 1 : i] == b"\n"]
    caller = make_caller()
    for at in inside + ends:
        provider.queue(sse(stream, at=[at]))

        response = await caller.call(request())

        assert response.content == streams.OPENAI_TEXT_CONTENT, f"split at byte {at}"


async def test_a_stream_in_one_byte_pieces_keeps_multibyte_characters_whole(
    provider: FakeProvider, make_caller: Factory
) -> None:
    stream = streams.ANTHROPIC_TOOLS
    provider.queue(sse(stream, at=range(1, len(stream))))
    deltas: list[ResponseDelta] = []

    response = await make_caller(AnthropicMessagesCaller).call(request(deltas))

    assert response.content == "Na\u00efve sum."
    assert assembled(deltas) == response


async def test_an_anthropic_stream_gives_text_and_tool_input_deltas(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(streams.ANTHROPIC_TOOLS))
    deltas: list[ResponseDelta] = []

    response = await make_caller(AnthropicMessagesCaller).call(request(deltas))

    assert response.tool_calls == [
        ToolCall("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "add", {"a": 2, "b": 3})
    ]
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (472, 89)
    assert assembled(deltas) == response
    assert provider.requests[0].body["stream"] is True


async def test_a_stream_that_breaks_midway_fails_unavailable_with_what_arrived(
    provider: FakeProvider, make_caller: Factory
) -> None:
    stream = streams.OPENAI_TOOLS
    cut_at = len(b"".join(stream.split(b"\n\n")[:4])) + 8  # inside the first call's JSON
    provider.queue(sse(stream[:cut_at], cut=True), sse(stream))
    deltas: list[ResponseDelta] = []

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request(deltas))

    error = caught.value
    assert status_of(error) is grpc.StatusCode.UNAVAILABLE
    assert "the stream broke after" in str(error)
    assert "7 characters of text and 1 tool call(s) (add)" in str(error)
    assert error.partial is not None
    assert error.partial.content == "Adding."
    assert error.partial.tool_calls[0].arguments_error is not None  # cut inside its JSON
    assert len(provider.requests) == 1  # deltas were out: not sent again
    assert "".join(d.text for d in deltas) == "Adding."


async def test_a_stream_that_breaks_before_its_first_event_is_retried(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(b": keep-alive\n\n", cut=True), sse(streams.OPENAI_TEXT))

    response = await make_caller().call(request())

    assert response.content == streams.OPENAI_TEXT_CONTENT
    assert len(provider.requests) == 2


async def test_a_stream_refused_with_a_retryable_status_is_retried(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(openai_error(503, "busy"), sse(streams.OPENAI_TEXT))

    response = await make_caller().call(request())

    assert response.content == streams.OPENAI_TEXT_CONTENT
    assert len(provider.requests) == 2


async def test_an_error_event_ends_the_stream_with_the_providers_error(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(streams.ANTHROPIC_OVERLOADED))

    with pytest.raises(ProviderError) as caught:
        await make_caller(AnthropicMessagesCaller).call(request())

    assert "overloaded_error: Overloaded" in str(caught.value)
    assert "what had arrived: 10 characters of text" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.UNAVAILABLE


async def test_a_server_that_answers_a_stream_request_with_json_is_understood(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion("Whole.")))

    response = await make_caller().call(request())

    assert response.content == "Whole."


async def test_a_stream_without_its_end_marker_is_a_broken_stream(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(streams.OPENAI_TEXT.replace(b"data: [DONE]\n\n", b"")))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert "the stream ended before the answer was complete" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.UNAVAILABLE


async def test_a_non_streaming_caller_sends_no_stream_field(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(ok(openai_completion("Whole.")))

    await make_caller(stream=False).call(request())

    assert "stream" not in provider.requests[0].body


async def test_a_stream_that_stalls_past_the_timeout_fails_unavailable(
    provider: FakeProvider, make_caller: Factory
) -> None:
    stream = streams.OPENAI_TEXT
    provider.queue(sse(stream[: stream.index(b"data: [DONE]")], stall=True))

    with pytest.raises(ProviderError) as caught:
        await make_caller(timeout_s=0.3).call(request())

    assert "the stream stalled: no data within 0.3s" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.UNAVAILABLE
    assert len(provider.requests) == 1


async def test_an_in_stream_error_that_would_recur_fails_failed_precondition(
    provider: FakeProvider, make_caller: Factory
) -> None:
    error = {"error": {"message": "Invalid 'tools[0].name'", "type": "invalid_request_error",
                       "param": "tools[0].name", "code": "invalid_value"}}  # fmt: skip
    provider.queue(sse(b"data: " + json.dumps(error).encode() + b"\n\n"))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert "invalid_request_error (invalid_value): Invalid 'tools[0].name'" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.FAILED_PRECONDITION


async def test_an_event_larger_than_the_bound_is_refused_not_buffered(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(b"data: " + b"x" * 5000))

    with pytest.raises(ProviderError) as caught:
        await make_caller(max_event_bytes=1000).call(request())

    assert "unusable stream: Server-sent event exceeded the 1000 byte limit" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.FAILED_PRECONDITION


async def test_an_event_that_is_not_json_ends_the_call_naming_it(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(b"data: {not json\n\n"))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert "unusable stream event" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.FAILED_PRECONDITION


async def test_an_event_with_a_number_json_has_not_ends_the_call_saying_so(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(b'data: {"choices":[],"usage":{"prompt_tokens":NaN}}\n\n'))

    with pytest.raises(ProviderError) as caught:
        await make_caller().call(request())

    assert "NaN is not a JSON number" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.FAILED_PRECONDITION


async def test_a_stream_of_only_keep_alives_times_out_unavailable(
    provider: FakeProvider, make_caller: Factory
) -> None:
    """A comment every 0.2 s resets httpx's read timeout; the idle timer counts only events."""
    stream = streams.OPENAI_TEXT
    provider.queue(sse(stream[: stream.index(b"data: [DONE]")], stall=True, keepalive_s=0.2))

    with pytest.raises(ProviderError) as caught:
        async with asyncio.timeout(30):
            await make_caller(timeout_s=1.0).call(request())

    assert "no event within 1s (only keep-alives)" in str(caught.value)
    assert status_of(caught.value) is grpc.StatusCode.UNAVAILABLE
    assert len(provider.requests) == 1


@pytest.mark.parametrize(
    ("cls", "stream"),
    [
        (OpenAIChatCaller, streams.openai_stream("", (("c" * 400, "n" * 400, "{}"),))),
        (
            AnthropicMessagesCaller,
            streams.ANTHROPIC_TOOLS.replace(b'"add"', b'"' + b"a" * 800 + b'"'),
        ),
    ],
    ids=["openai", "anthropic"],
)
async def test_tool_call_ids_and_names_count_toward_the_answers_bound(
    provider: FakeProvider, make_caller: Factory, cls: type[HTTPCaller], stream: bytes
) -> None:
    provider.queue(sse(stream))
    deltas: list[ResponseDelta] = []

    with pytest.raises(AnswerTooLargeError) as caught:
        await make_caller(cls, max_answer_chars=500).call(request(deltas))

    assert "the streamed answer passed 500 characters (max_answer_chars)" in str(caught.value)
    assert "request id req_stream" in str(caught.value)
    assert sum(len(d.text + d.tool_call_id + d.tool_name + d.arguments) for d in deltas) <= 500
    assert status_of(caught.value) is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_whole_answer_with_an_error_beside_its_choices_fails_with_the_providers_message(
    provider: FakeProvider, make_caller: Factory
) -> None:
    body = {**openai_completion("cut"), "error": {"code": 400, "message": "Token limit reached"}}
    provider.queue(ok(body))

    with pytest.raises(ProviderError) as caught:
        await make_caller(stream=False).call(request())

    assert "the provider answered with an error: 400: Token limit reached" in str(caught.value)


async def test_streams_read_to_their_end_reuse_one_connection(
    provider: FakeProvider, make_caller: Factory
) -> None:
    provider.queue(sse(streams.OPENAI_TEXT), sse(streams.OPENAI_TEXT))
    caller = make_caller()

    for _ in range(2):
        assert (await caller.call(request())).content == streams.OPENAI_TEXT_CONTENT

    assert provider.connections == 1


async def test_a_connection_left_mid_stream_is_not_reused(
    provider: FakeProvider, make_caller: Factory
) -> None:
    """The answer passed its bound while the body went on: the rest is never read."""
    provider.queue(sse(streams.openai_stream("x" * 600), stall=True), sse(streams.OPENAI_TEXT))
    caller = make_caller(max_answer_chars=500)

    with pytest.raises(AnswerTooLargeError):
        await caller.call(request())
    await caller.call(request())

    assert provider.connections == 2
