"""A loopback provider endpoint that streams: the fake provider of the delta rows.

Each POST is answered with server-sent events written one chunk at a time over HTTP/1.1
chunked encoding with keep-alive, shaped as OpenAI Chat Completions sends them (each
``chat.completion.chunk`` with every field the API's own carry, ``delta.content``, then
``finish_reason``, a usage chunk and ``data: [DONE]``) or, with ``shape=anthropic``, as the
Anthropic Messages API does (``event:`` lines, ``message_start``, a text block's
``content_block_delta`` events, ``message_delta``, ``message_stop``). What to stream comes in
the last message of the request: ``"count=N interval=S"`` (N chunks, S seconds apart, the
first at once, or after ``first=F`` seconds, a model's time to its first token; interval 0:
the whole answer in one write, as a burst). Each chunk's text is the ``time.perf_counter()``
at which it is written, then a space, so whoever receives it can tell how long it took (the
clock is the machine's monotonic one, shared by every process). Prints its port, then serves
until killed (``--uvloop``: on uvloop).
``serve`` with ``burst``: the whole answer in one write, each chunk's text ``tok``, so that a
reader's reads are the same every time (`make bench-check` counts them).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

_ASK = re.compile(r"count=(\d+) interval=([0-9.]+)(?: first=([0-9.]+))?(?: shape=(\w+))?")
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(data: dict[str, object], name: str = "") -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def _piece(text: str | None, finish: str | None = None) -> dict[str, object]:
    delta = {"content": text} if text is not None else {}
    return {
        "id": "chatcmpl-Aq7k2bSse",
        "object": "chat.completion.chunk",
        "created": 1718000000,
        "model": "sse-bench",
        "service_tier": "default",
        "system_fingerprint": "fp_0aa8d3e20b",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }


class OpenAIShape:
    """Chat completion chunks, as OpenAI streams them with ``include_usage``."""

    @staticmethod
    def start() -> bytes:
        return _event(_piece(""))

    @staticmethod
    def text(text: str) -> bytes:
        return _event(_piece(text))

    @staticmethod
    def end(count: int) -> bytes:
        usage = {"prompt_tokens": 10, "completion_tokens": count, "total_tokens": 10 + count}
        return (
            _event(_piece(None, "stop"))
            + _event({**_piece(None), "choices": [], "usage": usage})
            + b"data: [DONE]\n\n"
        )


class AnthropicShape:
    """Messages API events: one text block, then the stop reason and usage."""

    @staticmethod
    def start() -> bytes:
        message: dict[str, object] = {
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
            "content": [], "model": "sse-bench", "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1},
        }  # fmt: skip
        block = {"type": "text", "text": ""}
        return _event({"type": "message_start", "message": message}, "message_start") + _event(
            {"type": "content_block_start", "index": 0, "content_block": block},
            "content_block_start",
        )

    @staticmethod
    def text(text: str) -> bytes:
        delta = {"type": "text_delta", "text": text}
        return _event(
            {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
        )

    @staticmethod
    def end(count: int) -> bytes:
        stop = {"stop_reason": "end_turn", "stop_sequence": None}
        return (
            _event({"type": "content_block_stop", "index": 0}, "content_block_stop")
            + _event(
                {"type": "message_delta", "delta": stop, "usage": {"output_tokens": count}},
                "message_delta",
            )
            + _event({"type": "message_stop"}, "message_stop")
        )


SHAPES: dict[str, type[OpenAIShape | AnthropicShape]] = {
    "openai": OpenAIShape,
    "anthropic": AnthropicShape,
}


async def answer(body: bytes, writer: asyncio.StreamWriter, burst: bool = False) -> None:
    """Stream what the request's last message asks for (``burst``: in one write, ``tok`` texts)."""
    messages = json.loads(body).get("messages", [])
    content = messages[-1].get("content", "") if messages else ""
    ask = _ASK.search(content if isinstance(content, str) else json.dumps(content))
    count, interval = (int(ask[1]), float(ask[2])) if ask else (10, 0.0)
    shape = SHAPES[ask[4] if ask and ask[4] else "openai"]
    if burst:
        texts = b"".join(shape.text("tok ") for _ in range(count))
        writer.write(HEAD + _chunk(shape.start() + texts + shape.end(count)) + b"0\r\n\r\n")
        await writer.drain()
        return
    writer.write(HEAD)
    await writer.drain()
    if ask and ask[3]:
        await asyncio.sleep(float(ask[3]))
    if not interval:  # a burst: the whole answer in one write
        pieces = [shape.text(f"{time.perf_counter():.9f} ") for _ in range(count)]
        writer.write(_chunk(shape.start() + b"".join(pieces) + shape.end(count)) + b"0\r\n\r\n")
        await writer.drain()
        return
    writer.write(_chunk(shape.start()))
    for index in range(count):
        if index:
            await asyncio.sleep(interval)
        writer.write(_chunk(shape.text(f"{time.perf_counter():.9f} ")))
        await writer.drain()
    writer.write(_chunk(shape.end(count)) + b"0\r\n\r\n")
    await writer.drain()


async def serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, burst: bool = False
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await answer(await reader.readexactly(length), writer, burst)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
