"""Shared-token authentication: every RPC but health checking must carry the token.

Clients send ``authorization: Bearer <token>`` metadata. The comparison runs in constant
time; a missing or wrong token is ``UNAUTHENTICATED`` before any handler runs.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["TokenAuthInterceptor"]

_EXEMPT_PREFIX = "/grpc.health.v1.Health/"
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]


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
        if handler is None or handler_call_details.method.startswith(_EXEMPT_PREFIX):
            return handler
        presented = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                presented = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(presented, self._expected):
            return handler
        return _refusal(handler)


def _refusal(handler: Handler) -> Handler:
    """A handler of the same shape as ``handler`` that answers ``UNAUTHENTICATED``."""
    message = "missing or invalid credentials: send 'authorization: Bearer <token>' metadata"

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator

    kinds = (handler.request_streaming, handler.response_streaming)
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if kinds == (False, False):
        return grpc.unary_unary_rpc_method_handler(unary, **options)
    if kinds == (False, True):
        return grpc.unary_stream_rpc_method_handler(streaming, **options)
    if kinds == (True, False):
        return grpc.stream_unary_rpc_method_handler(unary, **options)
    return grpc.stream_stream_rpc_method_handler(streaming, **options)
