"""The stdio transport's line splitter and parser: lines cut from the bytes wherever the chunks
end, a line over the cap reported once and dropped to its end, and the SDK's parse results
(an error keeping the line, for the connection to judge)."""

from __future__ import annotations

import json

import pydantic
from mcp.shared.message import SessionMessage

from cleveragents.sidecar.mcp.stdio import LineSplitter, MessageTooLarge, parse_line

LINES = [
    json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": "héllo wörld ✓ 𝄞"}}).encode() + b"\r",
    b"",
    json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}).encode(),
    json.dumps(
        {"jsonrpc": "2.0", "id": 2, "result": {"text": "日本語" * 50}}, ensure_ascii=False
    ).encode(),
]
STREAM = b"".join(line + b"\n" for line in LINES)


def split(chunks: list[bytes], limit: int = 1 << 20) -> list[bytes | MessageTooLarge]:
    splitter = LineSplitter(limit)
    return [item for chunk in chunks for item in splitter.feed(chunk)]


def test_lines_come_out_whole_wherever_the_chunks_are_cut() -> None:
    for size in (1, 2, 3, 5, 7, 64, len(STREAM)):
        chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]

        assert split(chunks) == LINES, size


def test_every_single_cut_gives_the_same_lines_even_inside_crlf_and_a_character() -> None:
    for cut in range(len(STREAM) + 1):
        assert split([STREAM[:cut], STREAM[cut:]]) == LINES, cut


def test_several_lines_in_one_chunk_and_one_line_over_many_chunks() -> None:
    long = b"a" * 10_000

    assert split([b"x\ny\nz\n"]) == [b"x", b"y", b"z"]
    assert split([long[i : i + 100] for i in range(0, len(long), 100)] + [b"\n"]) == [long]


def test_an_unfinished_line_keeps_the_chunks_as_they_came_and_joins_them_once() -> None:
    splitter = LineSplitter(1 << 30)
    chunks = [bytes([65 + i]) * 65536 for i in range(20)]

    for chunk in chunks:
        assert splitter.feed(chunk) == []
    kept = splitter.pending
    [line] = splitter.feed(b"end\n")

    # The very chunk objects, not copies grown at every chunk (what made the SDK quadratic).
    assert all(piece is chunk for piece, chunk in zip(kept, chunks, strict=True))
    assert line == b"".join(chunks) + b"end"


def test_a_line_not_ended_when_the_output_closes_is_not_a_line() -> None:
    assert split([b"done\npartial"]) == [b"done"]


def test_a_line_over_the_limit_is_reported_once_as_soon_as_it_is_and_dropped_to_its_end() -> None:
    splitter = LineSplitter(100)

    first = splitter.feed(b"ok\n" + b"a" * 60)
    over = splitter.feed(b"a" * 60)  # 120 bytes of an unfinished line: over at once
    rest = [splitter.feed(b"a" * 1000) for _ in range(5)]
    after = splitter.feed(b"aaa\nnext\n")

    assert first == [b"ok"]
    assert len(over) == 1
    assert isinstance(over[0], MessageTooLarge)
    assert over[0].limit == 100
    assert rest == [[]] * 5  # nothing kept, nothing reported again
    assert after == [b"next"]
    assert splitter.pending_bytes == 0
    assert splitter.pending == []


def test_a_line_that_ends_in_the_chunk_that_makes_it_too_long_is_reported() -> None:
    [item, following] = split([b"a" * 50, b"a" * 60 + b"\nb\n"], limit=100)

    assert isinstance(item, MessageTooLarge)
    assert following == b"b"


def test_a_line_of_exactly_the_limit_is_kept() -> None:
    assert split([b"a" * 60, b"a" * 40 + b"\n"], limit=100) == [b"a" * 100]


def test_parse_line_reads_a_message_and_returns_a_malformed_line_as_the_error() -> None:
    message = parse_line(LINES[0])
    failed = parse_line(b'{"jsonrpc": "2.0", "id": 1, oops')

    assert isinstance(message, SessionMessage)
    assert message.message.model_dump(by_alias=True)["result"] == {"text": "héllo wörld ✓ 𝄞"}
    assert isinstance(failed, pydantic.ValidationError)
    assert failed.errors()[0]["type"] == "json_invalid"
    assert failed.errors()[0]["input"] == b'{"jsonrpc": "2.0", "id": 1, oops'
