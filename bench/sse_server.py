"""A loopback OpenAI Chat Completions endpoint that streams: the fake provider of the delta rows.

Each POST is answered with server-sent events shaped as OpenAI's (``chat.completion.chunk``
with ``delta.content``, then ``finish_reason``, a usage chunk and ``data: [DONE]``), written
one chunk at a time over HTTP/1.1 chunked encoding with keep-alive. What to stream comes in
the last message of the request: ``"count=N interval=S"`` (N chunks, S seconds apart, the
first at once, or after ``first=F`` seconds, a model's time to its first token). Each chunk's
text is the ``time.perf_counter()`` at which it is written, then a space, so whoever receives
it can tell how long it took (the clock is the machine's monotonic one, shared by every
process). Prints its port, then serves until killed (``--uvloop``: on uvloop). ``serve`` with
``burst``: the whole answer in one write, each chunk's text ``tok``, so that a reader's reads are
the same every time (`make bench-check` counts them).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

_ASK = re.compile(r"count=(\d+) interval=([0-9.]+)(?: first=([0-9.]+))?")
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(data: dict[str, object]) -> bytes:
    return _chunk(b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n")


def _piece(text: str | None, finish: str | None = None) -> dict[str, object]:
    delta = {"content": text} if text is not None else {}
    return {
        "id": "chatcmpl-sse",
        "object": "chat.completion.chunk",
        "created": 1718000000,
        "model": "sse-bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _tail(count: int) -> bytes:
    """The finish, usage and [DONE] chunks after ``count`` text chunks, and the last chunk."""
    usage = {"prompt_tokens": 10, "completion_tokens": count, "total_tokens": 10 + count}
    return (
        _event(_piece(None, "stop"))
        + _event({**_piece(None), "choices": [], "usage": usage})
        + _chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )


async def answer(body: bytes, writer: asyncio.StreamWriter, burst: bool = False) -> None:
    """Stream what the request's last message asks for (``burst``: in one write)."""
    messages = json.loads(body).get("messages", [])
    content = messages[-1].get("content", "") if messages else ""
    ask = _ASK.search(content if isinstance(content, str) else json.dumps(content))
    count, interval = (int(ask[1]), float(ask[2])) if ask else (10, 0.0)
    if burst:
        writer.write(HEAD + _event(_piece("tok ")) * count + _tail(count))
        await writer.drain()
        return
    writer.write(HEAD)
    await writer.drain()
    if ask and ask[3]:
        await asyncio.sleep(float(ask[3]))
    for index in range(count):
        if index and interval:
            await asyncio.sleep(interval)
        writer.write(_event(_piece(f"{time.perf_counter():.9f} ")))
        await writer.drain()
    writer.write(_tail(count))
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
