"""The deltas of one read go joined: one per run of text or of one call's arguments."""

from __future__ import annotations

import pytest

from cleveragents.providers.anthropic import MessageStream
from cleveragents.providers.openai import ChatStream
from cleveragents.providers.sse import ServerSentEvent, SSEDecoder
from cleveragents.tool import ResponseDelta

from . import streams


def events_of(stream: bytes) -> list[ServerSentEvent]:
    return SSEDecoder(1 << 24).feed(stream)


def test_a_whole_stream_in_one_read_gives_one_delta_per_run_of_a_kind() -> None:
    deltas: list[ResponseDelta] = []

    assert ChatStream(deltas.append, 1).feed_read(events_of(streams.OPENAI_TOOLS))

    assert deltas == [
        ResponseDelta("Adding."),
        ResponseDelta("", 0, "call_Xq1", "add", '{"a": 2, "b": 3}'),
        ResponseDelta("", 1, "call_Yz2", "shout", '{"text": "h\u00e9"}'),
    ]


def test_events_read_one_by_one_give_a_delta_each() -> None:
    deltas: list[ResponseDelta] = []
    stream = ChatStream(deltas.append, 1)

    for event in events_of(streams.OPENAI_TOOLS):
        stream.feed_read([event])

    assert deltas == [
        ResponseDelta("Adding."),
        ResponseDelta("", 0, "call_Xq1", "add"),
        ResponseDelta("", 0, arguments='{"a": 2'),
        ResponseDelta("", 0, arguments=', "b": 3}'),
        ResponseDelta("", 1, "call_Yz2", "shout"),
        ResponseDelta("", 1, arguments='{"text": "h\u00e9"}'),
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_joined_or_not_the_deltas_spell_the_same_answer(size: int) -> None:
    events = events_of(streams.ANTHROPIC_TOOLS)
    deltas: list[ResponseDelta] = []
    stream = MessageStream(deltas.append, 1)

    for start in range(0, len(events), size):
        stream.feed_read(events[start : start + size])

    assert "".join(d.text for d in deltas) == "Na\u00efve sum."
    calls = [d for d in deltas if d.tool_call_index is not None]
    assert calls[0].tool_call_id == "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    assert calls[0].tool_name == "add"
    assert "".join(d.arguments for d in calls) == '{"a": 2, "b": 3}'
    assert stream.complete


def test_what_a_read_held_before_a_failure_in_it_is_sent() -> None:
    deltas: list[ResponseDelta] = []
    events = events_of(streams.ANTHROPIC_OVERLOADED)

    with pytest.raises(Exception, match="Overloaded") as caught:
        MessageStream(deltas.append, 1).feed_read(events)

    assert caught.typename == "StreamFailure"  # the provider's error in the stream

    assert "".join(d.text for d in deltas) == "Na\u00efve sum."
