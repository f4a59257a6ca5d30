"""A bare grpc.aio server with no protobuf and no logic: the floor the sidecar is measured on.

`Ping` (bidi) echoes each message back; `Stream` (server streaming) sends N copies of the
request's payload, N being the request's first four bytes; `Relay` (server streaming) POSTs
the request's body to the URL on its first line with aiohttp, the providers' HTTP client, and
sends each read of the answer on as it comes, unparsed: a provider's stream relayed with no
logic, the floor of a delta through the sidecar. Prints its port, then serves on
the event loop the sidecar would pick from the same environment (``event_loop``: uvloop when
installed, unless CLEVERAGENTS_SIDECAR_EVENT_LOOP says asyncio), so that the floor and the
sidecar differ only in what the sidecar does. It imports nothing of the sidecar's.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc

#: The sidecar's setting, read as the sidecar reads it.
EVENT_LOOP = os.environ.get("CLEVERAGENTS_SIDECAR_EVENT_LOOP", "auto")
#: The relay's one HTTP client (a connection pool), made on first use.
SESSION: list[aiohttp.ClientSession] = []


def _identity(data: bytes) -> bytes:
    return data


async def ping(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for message in requests:
        yield message


async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
    count = int.from_bytes(request[:4], "big")
    payload = request[4:]
    for _ in range(count):
        yield payload


async def relay(request: bytes, context: Any) -> AsyncIterator[bytes]:
    url, _, body = request.partition(b"\n")
    if not SESSION:
        SESSION.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)))
    async with SESSION[0].post(url.decode(), data=body) as response:
        async for chunk in response.content.iter_any():
            yield chunk


async def main() -> None:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "floor.Floor",
        {
            "Ping": grpc.stream_stream_rpc_method_handler(
                ping, request_deserializer=_identity, response_serializer=_identity
            ),
            "Stream": grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=_identity, response_serializer=_identity
            ),
            "Relay": grpc.unary_stream_rpc_method_handler(
                relay, request_deserializer=_identity, response_serializer=_identity
            ),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def new_loop() -> asyncio.AbstractEventLoop:
    if EVENT_LOOP != "asyncio":
        try:
            import uvloop
        except ImportError:
            if EVENT_LOOP == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(main())
