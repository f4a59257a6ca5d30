"""Server-sent events read by read: the same events however the body is split, CR, LF or both."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cleveragents.providers.sse import ServerSentEvent, SSEDecoder, SSEError

from . import streams

RECORDED = [
    streams.OPENAI_TEXT,
    streams.OPENAI_TOOLS,
    streams.ANTHROPIC_TOOLS,
    streams.OPENROUTER_TOKEN_LIMIT,
    streams.responses_stream(streams.responses_body("Hello there", (("c1", "f", '{"a": 1}'),))),
]


def decode(stream: bytes, cuts: Sequence[int] = (), bound: int = 1 << 24) -> list[ServerSentEvent]:
    """The events of ``stream`` fed to one decoder in pieces cut at ``cuts``."""
    decoder = SSEDecoder(bound)
    events: list[ServerSentEvent] = []
    for start, stop in zip([0, *sorted(cuts)], [*sorted(cuts), len(stream)], strict=True):
        events += decoder.feed(stream[start:stop])
    return events


def reference(stream: bytes) -> list[ServerSentEvent]:
    """The events as the standard reads them, line by line (a plain, slow reading)."""
    text = stream.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    events: list[ServerSentEvent] = []
    name, data = "", list[str]()
    for line in lines[:-1]:  # the last piece has no line end: not a whole line
        if not line:
            if data:
                events.append(ServerSentEvent(name or "message", "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    return events


@pytest.mark.parametrize("stream", RECORDED, ids=range(len(RECORDED)))
def test_a_recorded_stream_read_whole_gives_its_events_in_order(stream: bytes) -> None:
    events = decode(stream)

    assert events
    assert events == reference(stream)


@pytest.mark.parametrize("stream", RECORDED[:3], ids=range(3))
def test_a_recorded_stream_split_at_every_byte_gives_the_same_events(stream: bytes) -> None:
    assert decode(stream, list(range(1, len(stream)))) == decode(stream)


@pytest.mark.parametrize("end", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_cr_line_ends_read_as_lf_even_split_between_cr_and_lf(end: bytes) -> None:
    stream = streams.ANTHROPIC_TOOLS
    crlf = stream.replace(b"\n", end)
    cuts = [i + 1 for i in range(len(crlf) - 1) if crlf[i : i + 1] == b"\r"]

    assert decode(crlf, cuts) == decode(stream)


def test_a_leading_byte_order_mark_is_dropped_even_split() -> None:
    stream = b"\xef\xbb\xbf" + streams.OPENAI_SMALL

    assert decode(stream, [1, 2]) == decode(streams.OPENAI_SMALL)


def test_data_lines_join_with_lf_and_comments_ids_and_retries_are_skipped() -> None:
    stream = b": hi\nid: 7\nretry: 10\nevent: note\ndata:a\ndata: b\n\ndata\n\n"

    assert decode(stream) == [ServerSentEvent("note", "a\nb"), ServerSentEvent("message", "")]


def test_an_event_without_data_or_cut_off_by_the_end_is_not_dispatched() -> None:
    assert decode(b"event: ping\n\n: keep-alive\n\ndata: half") == []


def test_a_character_split_between_reads_arrives_whole() -> None:
    stream = 'data: {"t":"\U0001f642"}\n\n'.encode()

    for at in range(1, len(stream)):
        assert decode(stream, [at]) == [ServerSentEvent("message", '{"t":"\U0001f642"}')]


def test_an_unfinished_event_past_the_bound_is_refused() -> None:
    decoder = SSEDecoder(100)
    decoder.feed(b"data: " + b"x" * 60)

    with pytest.raises(SSEError, match="exceeded the 100 byte limit"):
        decoder.feed(b"x" * 60)


def test_whole_events_within_the_bound_pass_however_many_one_read_holds() -> None:
    event = b"data: " + b"x" * 80 + b"\n\n"

    assert decode(event * 5, bound=100) == [ServerSentEvent("message", "x" * 80)] * 5


_lines = st.lists(
    st.one_of(
        st.sampled_from(["data: {}", "data:x", "event: e", ": c", "id: 1", "data", ""]),
        st.text(alphabet="ab:é\U0001f642 ", max_size=6).map(lambda t: "data: " + t),
    ),
    max_size=12,
)


@given(_lines, st.sampled_from(["\n", "\r\n", "\r"]), st.lists(st.integers(1, 200), max_size=8))
def test_any_stream_split_anywhere_reads_as_the_standard_says(
    lines: list[str], end: str, cuts: list[int]
) -> None:
    stream = (end.join(lines) + end + end).encode()
    cuts = sorted({c for c in cuts if c < len(stream)})

    assert decode(stream, cuts) == reference(stream)
