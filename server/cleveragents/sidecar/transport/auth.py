"""Shared-token authentication: every RPC but health checking must carry the token.

Clients send ``authorization: Bearer <token>`` metadata. The comparison runs in constant
time; a missing or wrong token is ``UNAUTHENTICATED`` before any handler runs.

An unauthenticated peer's request message is never read: gRPC reads a unary request whole
(up to ``max_message_bytes``) before its handler runs, so a refusal that waited for it let 48
peers sending 15 MiB each push the server from 52 MB to 731 MB. Refusals are served by
request-streaming handlers that end the call without reading; gRPC's flow control then
holds at most one window of each refused stream. Health checks without the token are
answered for the whole server (the empty service name), again without reading what they ask.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["TokenAuthInterceptor"]

_EXEMPT_PREFIX = "/grpc.health.v1.Health/"
_REFUSAL = "missing or invalid credentials: send 'authorization: Bearer <token>' metadata"
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls whose ``authorization`` metadata is not ``Bearer <token>``."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the auth token must not be empty")
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        presented = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                presented = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(presented, self._expected):
            return handler
        if handler_call_details.method.startswith(_EXEMPT_PREFIX):
            return _unread(handler)
        return _refusal(handler)


def _refusal(handler: Handler) -> Handler:
    """A handler for ``handler``'s method that answers ``UNAUTHENTICATED`` unread."""

    async def unary(requests: AsyncIterator[Any], context: Context) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)

    async def streaming(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)
        yield  # pragma: no cover - makes this an async generator

    return _request_streaming(handler, unary, streaming)


def _unread(handler: Handler) -> Handler:
    """``handler`` serving its method's default request instead of the one sent (unread)."""
    default = handler.request_deserializer(b"") if handler.request_deserializer else b""
    behaviour: Any = handler.unary_unary or handler.unary_stream
    if handler.request_streaming or behaviour is None:
        return _refusal(handler)  # no exempt method streams its requests

    async def unary(requests: AsyncIterator[Any], context: Context) -> Any:
        return await behaviour(default, context)

    async def streaming(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        result = behaviour(default, context)
        if isinstance(result, AsyncIterator):
            async for response in result:
                yield response
        else:
            await result

    return _request_streaming(handler, unary, streaming)


def _request_streaming(
    handler: Handler,
    unary: Callable[[AsyncIterator[Any], Context], Awaitable[Any]],
    streaming: Callable[[AsyncIterator[Any], Context], AsyncIterator[Any]],
) -> Handler:
    """A handler of ``handler``'s response shape whose requests gRPC reads only on demand."""
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming, **options)
    return grpc.stream_unary_rpc_method_handler(unary, **options)
