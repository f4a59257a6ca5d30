"""Fake provider servers for the adapter tests: real HTTP/1.1 on 127.0.0.1, port 0.

A :class:`FakeProvider` answers each request with the next queued :class:`Reply` (a JSON
body shaped like the vendor's, an error status, a hang, or a dropped connection) and records
every request it received. It runs in the test's own event loop. Tests import the helpers
with ``from .conftest import ...``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import io
import itertools
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import pytest

from cleveragents.providers import RetryPolicy
from cleveragents.sidecar import configure_logging
from cleveragents.sidecar.llm_profiles import close_provider_clients

#: A key that must never show up in an error, a log line or an event.
SECRET = "sk-test-9f8e7d6c5b4a-do-not-log"
#: Retries without waiting, so that retry tests stay fast.
NO_WAIT = RetryPolicy(base_delay_s=0.0, max_delay_s=0.0)


@dataclasses.dataclass(frozen=True)
class Reply:
    """What the fake answers to one request.

    ``hang`` never answers (until the server closes); ``drop`` closes the connection without
    answering. ``body`` is JSON-encoded unless it is ``bytes``. ``chunks`` make it a stream
    (``text/event-stream``, chunked): each piece is written and flushed on its own; ``cut``
    then closes the connection after them, without the end of the body, and ``stall`` sends
    nothing more until the server closes (but a keep-alive comment every ``keepalive_s``
    seconds, when set).
    """

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    hang: bool = False
    drop: bool = False
    chunks: Sequence[bytes] | None = None
    cut: bool = False
    stall: bool = False
    keepalive_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Received:
    """One request as the fake received it (header names in lower case)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""


class FakeProvider:
    """A minimal HTTP/1.1 server with keep-alive, replying from a queue."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.connections = 0
        self._replies: collections.deque[Reply] = collections.deque()
        self._server: asyncio.Server | None = None
        self._closing = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._arrived = asyncio.Condition()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        self._replies.extend(replies)

    def bodies(self) -> list[Any]:
        """The JSON bodies received, in order."""
        return [r.body for r in self.requests]

    async def wait_for_requests(self, count: int) -> None:
        """Return once ``count`` requests have arrived (whatever their replies)."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while not reader.at_eof():
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                request_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(
                    Received(method, path, headers, json.loads(raw or b"null"), raw)
                )
                async with self._arrived:
                    self._arrived.notify_all()
                reply = self._replies.popleft() if self._replies else _UNQUEUED
                if reply.hang:
                    await self._closing.wait()
                    return
                if reply.drop:
                    return
                if reply.chunks is not None:
                    _CLOSING[writer] = self._closing
                    if not await _stream(writer, reply):
                        return
                    continue
                writer.write(_encode(reply))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            _CLOSING.pop(writer, None)
            self._writers.discard(writer)
            writer.close()


_UNQUEUED = Reply(500, {"error": {"message": "fake provider: no reply queued", "type": "test"}})
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 429: "Too Many Requests"}


def _encode(reply: Reply) -> bytes:
    body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
    reason = _REASONS.get(reply.status, "Error")
    head = [f"HTTP/1.1 {reply.status} {reason}", "content-type: application/json"]
    head += [f"{k}: {v}" for k, v in reply.headers.items()]
    head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


#: The closing event of the server each streaming connection belongs to.
_CLOSING: dict[asyncio.StreamWriter, asyncio.Event] = {}


async def _stream(writer: asyncio.StreamWriter, reply: Reply) -> bool:
    """Write a streamed reply piece by piece; ``False`` when it was cut off."""
    head = [f"HTTP/1.1 {reply.status} OK", "content-type: text/event-stream; charset=utf-8"]
    head += [f"{k}: {v}" for k, v in reply.headers.items()]
    head.append("transfer-encoding: chunked")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    for piece in reply.chunks or ():
        if piece:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
    if reply.stall:
        closing = _CLOSING[writer]
        while reply.keepalive_s and not closing.is_set():
            writer.write(b"e\r\n: keep-alive\n\n\r\n")  # one 14-byte chunk: a comment
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), reply.keepalive_s)
        await closing.wait()
    if reply.cut or reply.stall:
        return False
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


def sse(
    stream: bytes,
    *,
    at: Sequence[int] = (),
    cut: bool = False,
    stall: bool = False,
    keepalive_s: float = 0.0,
) -> Reply:
    """A 200 stream of ``stream``'s bytes, split into pieces at the offsets ``at``."""
    bounds = [0, *sorted(at), len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    headers = {"x-request-id": "req_stream"}
    return Reply(200, None, headers, chunks=chunks, cut=cut, stall=stall, keepalive_s=keepalive_s)


# -- recorded-shape responses ----------------------------------------------------------------


def openai_completion(
    content: str | None = None,
    calls: Sequence[tuple[str, str, str]] = (),
    *,
    usage: tuple[int, int] = (10, 5),
    finish_reason: str | None = None,
    refusal: str | None = None,
) -> dict[str, Any]:
    """A chat completion; ``calls`` are ``(id, name, arguments as JSON text)``."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1718000000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def anthropic_message(
    text: str = "",
    calls: Sequence[tuple[str, str, Any]] = (),
    *,
    usage: tuple[int, int] = (10, 5),
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """A Messages API response; ``calls`` are ``(id, name, input)``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def ok(body: Any, request_id: str = "req_ok") -> Reply:
    """A 200 reply carrying ``x-request-id``."""
    return Reply(200, body, {"x-request-id": request_id})


def openai_error(status: int, message: str, **headers: str) -> Reply:
    """An error reply in OpenAI's shape (header names with ``_`` become ``-``)."""
    body = {"error": {"message": message, "type": "server_error", "code": None}}
    return Reply(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


def anthropic_error(status: int, kind: str, message: str, **headers: str) -> Reply:
    """An error reply in Anthropic's shape."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Reply(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    """A started fake provider, closed after the test with the profiles' HTTP clients."""
    fake = FakeProvider()
    await fake.start()
    yield fake
    await close_provider_clients()
    await fake.close()


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """Every log line (JSON, debug level and up) written during the test."""
    stream = io.StringIO()
    configure_logging("json", "debug", stream=stream)
    yield stream
    configure_logging("console", "error")


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    configure_logging("console", "error")
