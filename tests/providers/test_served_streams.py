"""Provider streams as a real sidecar process meets them, from loopback servers that speak
the vendors' SSE byte for byte: an ``error`` in any chunk ends the call with the provider's
message, a stream ended by an error event names the response's request id, and an answer past
its bound is refused while it streams (the sidecar stops reading; its memory stays bounded)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, RunFailedError

from . import streams
from .conftest import FakeProvider, Reply, sse

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

MIB = 1024 * 1024
#: What the flooding provider streams: the issue's figure.
FLOOD_BYTES = 192 * MIB
#: The text of one of its chunks.
FLOOD_PIECE = "x" * (64 * 1024)


def _config(path: Path, url: str) -> Path:
    """A config whose profiles aim at ``url``: ``gpt`` (openai) and ``claude`` (anthropic)."""
    common = 'api_key_env = ""\nmax_retries = 0\ntimeout = 30\n'
    path.write_text(
        f'[profiles.gpt]\nkind = "openai"\nmodel = "m"\nbase_url = "{url}/v1"\n{common}'
        f'[profiles.claude]\nkind = "anthropic"\nmodel = "m"\nbase_url = "{url}"\n{common}',
        encoding="utf-8",
    )
    return path


@pytest.fixture
def served(serve_sidecar: ServeSidecar, provider: FakeProvider, tmp_path: Path) -> ServedSidecar:
    """A sidecar process whose profiles aim at the fake provider."""
    return serve_sidecar("--config", str(_config(tmp_path / "sidecar.toml", provider.url)))


async def _failure(address: str, profile: str) -> RunFailedError:
    async with AsyncSidecarClient(address) as client:
        with pytest.raises(RunFailedError) as caught:
            await client.run_tool_loop("Go.", profile=profile, timeout=60)
    return caught.value


async def test_an_error_beside_choices_after_a_length_chunk_ends_the_run_with_its_message(
    served: ServedSidecar, provider: FakeProvider
) -> None:
    provider.queue(sse(streams.OPENROUTER_TOKEN_LIMIT))

    failure = await _failure(served.address, "gpt")

    assert "the provider ended the stream with an error: 400: Token limit reached" in (
        failure.details
    )
    assert "finish_reason" not in failure.details
    assert "request id req_stream" in failure.details
    assert failure.code is grpc.StatusCode.FAILED_PRECONDITION


async def test_an_error_chunk_after_some_text_fails_the_run_instead_of_completing_it(
    served: ServedSidecar, provider: FakeProvider
) -> None:
    provider.queue(sse(streams.OPENROUTER_MIDSTREAM_ERROR))

    failure = await _failure(served.address, "gpt")

    assert "server_error: Provider disconnected unexpectedly" in failure.details
    assert "what had arrived: 11 characters of text" in failure.details
    assert failure.code is grpc.StatusCode.UNAVAILABLE  # a server error: a later try may do


async def test_a_stream_ended_by_an_error_event_names_the_responses_request_id(
    served: ServedSidecar, provider: FakeProvider
) -> None:
    request_id = "req_011CVmQ7dXk2Pz4Hn8Wq5Ybe"
    stream = sse(streams.ANTHROPIC_OVERLOADED_AFTER_CALL)
    provider.queue(Reply(200, None, {"request-id": request_id}, chunks=stream.chunks))

    failure = await _failure(served.address, "claude")

    assert "the provider ended the stream with an error: overloaded_error: Overloaded" in (
        failure.details
    )
    assert f"request id {request_id}" in failure.details
    assert "10 characters of text and 1 tool call(s) (add)" in failure.details
    assert failure.code is grpc.StatusCode.UNAVAILABLE


class Flood:
    """A loopback Chat Completions server that streams ``FLOOD_BYTES`` of text to each
    request, in 64 KiB chunks, and counts what its reader took before it stopped reading."""

    def __init__(self) -> None:
        self.sent = 0
        self.finished = False
        self.done = asyncio.Event()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> Flood:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )  # fmt: skip
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"x-request-id: req_flood\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        event = {"id": "chatcmpl-flood", "object": "chat.completion.chunk", "created": 1,
                 "model": "m", "choices": [{"index": 0, "delta": {"content": FLOOD_PIECE},
                                            "finish_reason": None}]}  # fmt: skip
        data = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        chunk = b"%x\r\n%s\r\n" % (len(data), data)
        try:
            while self.sent < FLOOD_BYTES:
                writer.write(chunk)
                await writer.drain()
                self.sent += len(chunk)
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            await writer.drain()
            self.finished = True
        except ConnectionError:
            pass
        finally:
            self.done.set()
            writer.close()


@pytest.fixture
async def flood() -> AsyncIterator[Flood]:
    async with Flood() as server:
        yield server


@pytest.mark.timeout(300)
async def test_a_provider_streaming_past_the_answers_bound_is_cut_off_and_not_buffered(
    serve_sidecar: ServeSidecar, flood: Flood, tmp_path: Path
) -> None:
    """192 MiB of text against ``max_message_bytes`` of 4 MiB: the run fails as soon as the
    answer passes 4 Mi characters, RESOURCE_EXHAUSTED naming the setting; the sidecar stops
    reading there, and grows by a bounded amount (it grew by 1.33 GiB reading the whole)."""
    config = _config(tmp_path / "sidecar.toml", flood.url)
    sidecar = serve_sidecar("--config", str(config), max_message_bytes=4 * MIB)
    before = sidecar.status_kib("VmRSS")

    failure = await _failure(sidecar.address, "gpt")
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):  # the server's next write finds the socket closed
            await flood.done.wait()
    grown = sidecar.status_kib("VmHWM") - before

    assert failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the streamed answer passed 4194304 characters (max_message_bytes)" in failure.details
    assert "request id req_flood" in failure.details
    assert not flood.finished
    assert flood.sent < 48 * MIB  # 4 MiB read, and what the socket buffers held
    assert grown < 100 * 1024, f"the sidecar grew by {grown} KiB"
