"""A bare grpc.aio server with no protobuf and no logic: the floor the sidecar is measured on.

`Ping` (bidi) echoes each message back; `Stream` (server streaming) sends N copies of the
request's payload, N being the request's first four bytes. Prints its port, then serves, on
the event loop the sidecar picks by default (uvloop when installed), so that the floor and the
sidecar differ only in what the sidecar does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from cleveragents.sidecar.eventloop import loop_factory


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
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=loop_factory("auto")[1]) as runner:
        runner.run(main())
